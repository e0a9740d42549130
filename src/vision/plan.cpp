// Pipeline planning: torchvision's transforms, applied in order to a virtual image described by
// the stage being built (a crop box of the stage's input, an optional resize, a window of the
// result and the flips), are folded into as few stages as keep torchvision's pixels. A new
// stage starts (the current one is "materialised") only where fusing would change pixels: a
// resize of something already resized, cropped or flipped (Pillow's filter clamps at the
// image's edges); an operation on the whole image (colour jitter, which needs e.g. contrast's
// mean; grayscale; blur; rotation; the augment ops); non-constant padding. RandomErasing
// works on the output tensor: it becomes an Erasure of the plan.
#include "vision/plan.hpp"

#include <stdexcept>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

namespace stoker::vision::detail {
namespace {

Rect full(Size size) { return Rect{0, 0, size.width, size.height}; }

bool inside(const Rect& r, Size size) {
  return r.x >= 0 && r.y >= 0 && r.x + r.width <= size.width && r.y + r.height <= size.height;
}

class Planner {
 public:
  Planner(Plan& plan, Size input) : plan_(plan), size_(input) { start(input); }

  Size size() const { return size_; }

  // A stage whose output is its input, unchanged.
  void start(Size input) {
    cur_ = Stage{};
    cur_.box = full(input);
    cur_.window = full(input);
  }
  void materialise(Between next = Between{}) {
    plan_.stages.push_back(cur_);
    plan_.between.push_back(std::move(next));
    start(size_);
  }
  bool untouched() const {
    return !cur_.resize && !cur_.flip && !cur_.vflip && cur_.window == full(cur_.base());
  }
  bool window_is_base() const { return cur_.window == full(cur_.base()); }

  void resize(Size target, Interpolation interpolation) {
    if (target == size_) return;  // torchvision returns the image itself
    if (!untouched()) materialise();
    cur_.resize = true;
    cur_.resized = target;
    cur_.interpolation = interpolation;
    cur_.window = full(target);
    size_ = target;
  }

  // Crops r (in the virtual image's coordinates; beyond it: `fill`).
  void crop(Rect r, std::array<std::uint8_t, 3> fill = {0, 0, 0}) {
    if (r == full(size_)) return;
    const bool pads = !inside(r, size_);
    // Padding is fused only onto a window that is still the whole (resized) box: then what
    // lies outside the virtual image lies outside the box, and is fill.
    if (pads && !window_is_base()) materialise();
    if (pads) cur_.fill = fill;
    if (cur_.flip) r.x = size_.width - (r.x + r.width);
    if (cur_.vflip) r.y = size_.height - (r.y + r.height);
    cur_.window = Rect{cur_.window.x + r.x, cur_.window.y + r.y, r.width, r.height};
    size_ = Size{r.height, r.width};
  }

  void resized_crop(Rect box, Size target, Interpolation interpolation) {
    if (box.width < 1 || box.height < 1) {
      // Nothing of the image: Pillow resizes the empty crop to black.
      if (!untouched()) materialise();
      cur_ = Stage{};
      cur_.empty = true;
      cur_.resize = true;
      cur_.resized = target;
      cur_.window = full(target);
      size_ = target;
      return;
    }
    if (!cur_.resize && !cur_.flip && !cur_.vflip && !cur_.empty &&
        inside(cur_.window, cur_.base())) {
      // A crop of a crop of the stage's input.
      cur_.box = Rect{cur_.box.x + cur_.window.x + box.x, cur_.box.y + cur_.window.y + box.y,
                      box.width, box.height};
    } else {
      materialise();
      cur_.box = box;
    }
    cur_.resize = true;
    cur_.resized = target;
    cur_.interpolation = interpolation;
    cur_.window = full(target);
    size_ = target;
  }

  void flip() { cur_.flip = !cur_.flip; }
  void vflip() { cur_.vflip = !cur_.vflip; }

  // An operation on the whole image; it may change its size (rotation with expand) or its
  // channels (grayscale).
  void between(Between b, Size after) {
    materialise(std::move(b));
    size_ = after;
    start(size_);
  }
  void between(Between b) { between(std::move(b), size_); }

  void pad(Padding p, PaddingMode mode) {
    between(Between{Between::Pad{p, mode}},
            Size{size_.height + p.top + p.bottom, size_.width + p.left + p.right});
  }

  void finish() {
    plan_.stages.push_back(cur_);
    plan_.output = size_;
  }

 private:
  Plan& plan_;
  Size size_;
  Stage cur_;
};

}  // namespace

void make_plan(const std::vector<Transform>& transforms, Size input, Generator* rng, Plan& plan,
               Trace* trace) {
  plan.stages.clear();
  plan.between.clear();
  plan.erasures.clear();
  if (trace != nullptr) {
    *trace = Trace{};
    trace->decoded = input;
  }
  // RandomErasings before the Normalize have their values normalised.
  std::size_t normalize_at = transforms.size();
  for (std::size_t i = 0; i < transforms.size(); ++i) {
    if (std::holds_alternative<Normalize>(transforms[i])) normalize_at = i;
  }
  int channels = 3;
  Planner p(plan, input);
  for (std::size_t index = 0; index < transforms.size(); ++index) {
    std::visit(
        [&](const auto& t) {
          using T = std::decay_t<decltype(t)>;
          if constexpr (std::is_same_v<T, Resize>) {
            const Size target = t.output_size(p.size());
            if (target.width < 1 || target.height < 1) {
              throw std::invalid_argument(fmt::format(
                  "vision::Resize({}, max_size={}): the image would become {} x {} (height x "
                  "width); an image needs a height and width of at least 1 (torchvision raises "
                  "here too): raise max_size, or leave such thin images out",
                  t.shorter_side, t.max_size, target.height, target.width));
            }
            p.resize(target, t.interpolation);
          } else if constexpr (std::is_same_v<T, CenterCrop>) {
            p.crop(t.box(p.size()));
          } else if constexpr (std::is_same_v<T, RandomResizedCrop>) {
            const Rect box = t.sample(*rng, p.size());
            if (trace != nullptr) trace->boxes.push_back(box);
            p.resized_crop(box, t.size, t.interpolation);
          } else if constexpr (std::is_same_v<T, RandomCrop>) {
            const Padding pad = t.total_padding(p.size());
            const bool pads = pad.left + pad.top + pad.right + pad.bottom > 0;
            Size padded = p.size();
            padded.width += pad.left + pad.right;
            padded.height += pad.top + pad.bottom;
            const Rect box = t.sample(*rng, padded);
            if (trace != nullptr) trace->boxes.push_back(box);
            const Padding more = t.shortfall_padding(p.size());
            const bool twice =
                more.left + more.top + more.right + more.bottom > 0 &&
                t.padding.left + t.padding.top + t.padding.right + t.padding.bottom > 0;
            if (pads && t.padding_mode == PaddingMode::kConstant) {
              p.crop(Rect{box.x - pad.left, box.y - pad.top, box.width, box.height}, t.fill);
            } else if (twice && (t.padding_mode == PaddingMode::kReflect ||
                                 t.padding_mode == PaddingMode::kSymmetric)) {
              // Reflecting a reflected image is not one larger reflection: pad as torchvision.
              p.pad(t.padding, t.padding_mode);
              p.pad(more, t.padding_mode);
              p.crop(box);
            } else {
              if (pads) p.pad(pad, t.padding_mode);  // edge padding twice is edge padding once
              p.crop(box);
            }
          } else if constexpr (std::is_same_v<T, RandomHorizontalFlip>) {
            const bool flipped = t.sample(*rng);
            if (trace != nullptr) trace->flips.push_back(flipped);
            if (flipped) p.flip();
          } else if constexpr (std::is_same_v<T, RandomVerticalFlip>) {
            const bool flipped = t.sample(*rng);
            if (trace != nullptr) trace->vflips.push_back(flipped);
            if (flipped) p.vflip();
          } else if constexpr (std::is_same_v<T, ColorJitter>) {
            const ColorJitter::Params drawn = t.sample(*rng);
            if (trace != nullptr) trace->jitters.push_back(drawn);
            p.between(Between{drawn});
          } else if constexpr (std::is_same_v<T, Grayscale>) {
            p.between(Between{Between::Gray{t.num_output_channels}});
            channels = t.num_output_channels;
          } else if constexpr (std::is_same_v<T, RandomGrayscale>) {
            const bool grey = t.sample(*rng);
            if (trace != nullptr) trace->grays.push_back(grey);
            if (grey && channels == 3) p.between(Between{Between::Gray{3}});
          } else if constexpr (std::is_same_v<T, GaussianBlur>) {
            const double sigma = t.sample(*rng);
            if (trace != nullptr) trace->sigmas.push_back(sigma);
            const Size size = p.size();
            if (t.kernel_x / 2 >= size.width || t.kernel_y / 2 >= size.height) {
              throw std::invalid_argument(fmt::format(
                  "vision::GaussianBlur: the image is {} x {} (height x width), too small for a "
                  "({}, {}) kernel: torch's reflect padding by half the kernel needs sides "
                  "longer than it (torchvision raises here too); use a smaller kernel_size",
                  size.height, size.width, t.kernel_x, t.kernel_y));
            }
            p.between(Between{Between::Blur{t.kernel_x, t.kernel_y, sigma}});
          } else if constexpr (std::is_same_v<T, RandomRotation>) {
            const double angle = t.sample(*rng);
            if (trace != nullptr) trace->angles.push_back(angle);
            p.between(Between{Between::Rotate{angle, t.interpolation, t.expand, t.center, t.fill}},
                      rotated_size(p.size(), angle, t.expand, t.center));
          } else if constexpr (std::is_same_v<T, TrivialAugmentWide> ||
                               std::is_same_v<T, RandAugment>) {
            std::vector<AugmentStep> steps = t.sample(*rng, p.size());
            if (trace != nullptr) trace->augments.push_back(steps);
            if (!steps.empty()) {
              p.between(Between{Between::Augment{std::move(steps), t.interpolation, t.fill}});
            }
          } else if constexpr (std::is_same_v<T, RandomErasing>) {
            RandomErasing::Params drawn = t.sample(*rng, p.size(), channels);
            if (trace != nullptr) trace->erasures.push_back(drawn);
            if (drawn.erase && drawn.box.width > 0 && drawn.box.height > 0) {
              Erasure e;
              e.box = drawn.box;
              e.normalised = index < normalize_at && normalize_at < transforms.size();
              if (t.random_values) {
                e.values = std::move(drawn.values);
              } else {
                e.values.assign(t.value.begin(), t.value.begin() + channels);
              }
              plan.erasures.push_back(std::move(e));
            }
          } else {
            static_assert(std::is_same_v<T, Normalize>);  // applied by the output conversion
          }
        },
        transforms[index]);
  }
  p.finish();
  plan.channels = channels;
}

}  // namespace stoker::vision::detail
