// stoker::vision::Pipeline: building and checking a pipeline, and running one on an image.
// Running: read the header, plan the stages (drawing the random parameters), decode only the
// region the first stage reads (fast mode: at the DCT scale that keeps the output's
// resolution), then run the stages, the last one writing into the output tensor. Buffers are
// per thread and reused, so an image costs no large allocation but its tensor's.
#include "stoker/vision/pipeline.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "vision/augment.hpp"
#include "vision/decoders.hpp"
#include "vision/output.hpp"
#include "vision/plan.hpp"
#include "vision/resample.hpp"
#include "vision/torch_ops.hpp"

namespace stoker::vision {
namespace {

// Extra source pixels around a JPEG region (full-size pixels): libjpeg's fancy upsampling
// treats a cropped region's edge as the image's edge, so the pixels next to it are not those
// of a full decode; the region is widened past them.
constexpr int kJpegRegionMargin = 8;

struct Scratch {
  Image decoded;
  Image converted;
  Image stages[2];
  detail::Plan plan;
  detail::Axis columns;
  detail::Axis rows;
};
thread_local Scratch t_scratch;

// A stage's input: `image`, whose pixel (0, 0) is pixel (x, y) of the stage's input decoded at
// 1/denom of its size.
struct Input {
  const Image* image = nullptr;
  int x = 0;
  int y = 0;
  int denom = 1;
};

// One axis of a stage: output pixels [v0, v1) of the box [box0, box0 + box_len) resized to
// out_len (or, without resize, cropped), reading input pixels [offset, offset + available).
void stage_axis(detail::Axis& axis, bool resize, int box0, int box_len, int out_len,
                Interpolation interpolation, int v0, int v1, int offset, int available, int denom) {
  if (!resize) {
    detail::identity_axis(axis, box0 + v0 - offset, v1 - v0);
    return;
  }
  if (denom == 1) {
    detail::pillow_axis(axis, box_len, 0.0, box_len, out_len, interpolation, v0, v1 - v0);
    for (int& s : axis.start) s += box0 - offset;
    return;
  }
  // Fast mode: the box in the scaled image's coordinates, fractional, as Pillow's box.
  const double s0 = static_cast<double>(box0) / denom;
  const double s1 = static_cast<double>(box0 + box_len) / denom;
  const int c0 = std::max(static_cast<int>(std::floor(s0)), offset);
  const int c1 = std::min(static_cast<int>(std::ceil(s1)), offset + available);
  detail::pillow_axis(axis, c1 - c0, s0 - c0, s1 - c0, out_len, interpolation, v0, v1 - v0);
  for (int& s : axis.start) s += c0 - offset;
}

// The window's part inside the resized box, in window coordinates.
Rect valid_part(const detail::Stage& stage) {
  if (stage.empty) return Rect{};
  const Size base = stage.base();
  const Rect& w = stage.window;
  const int x0 = std::clamp(w.x, 0, base.width);
  const int y0 = std::clamp(w.y, 0, base.height);
  const int x1 = std::clamp(w.x + w.width, 0, base.width);
  const int y1 = std::clamp(w.y + w.height, 0, base.height);
  return Rect{x0 - w.x, y0 - w.y, std::max(0, x1 - x0), std::max(0, y1 - y0)};
}

void stage_axes(const detail::Stage& stage, const Input& in, const Rect& valid,
                detail::Axis& columns, detail::Axis& rows) {
  const Size base = stage.base();
  const int vx0 = stage.window.x + valid.x;
  const int vy0 = stage.window.y + valid.y;
  stage_axis(columns, stage.resize, stage.box.x, stage.box.width, base.width, stage.interpolation,
             vx0, vx0 + valid.width, in.x, in.image->width, in.denom);
  stage_axis(rows, stage.resize, stage.box.y, stage.box.height, base.height, stage.interpolation,
             vy0, vy0 + valid.height, in.y, in.image->height, in.denom);
}

detail::Placement placement(const detail::Stage& stage, const Rect& valid, int channels) {
  detail::Placement at;
  at.width = stage.window.width;
  at.height = stage.window.height;
  at.channels = channels;
  at.valid = valid;
  at.flip = stage.flip;
  at.vflip = stage.vflip;
  at.fill = stage.fill;
  return at;
}

void run_stage(const detail::Stage& stage, const Input& in, const Rect& valid, Scratch& s,
               detail::RowSink sink, void* context) {
  if (valid.width == 0 || valid.height == 0) return;
  stage_axes(stage, in, valid, s.columns, s.rows);
  detail::resample(detail::view_of(*in.image), s.columns, s.rows, sink, context);
}

// Pillow's convert("RGB") of a grey or RGBA image.
const Image& as_rgb(const Image& image, Image& scratch) {
  if (image.channels == 3) return image;
  if (image.channels != 1 && image.channels != 4) {
    throw std::invalid_argument(fmt::format(
        "vision::Pipeline: the image has {} channels; it takes grey (1), RGB (3) or RGBA (4)",
        image.channels));
  }
  scratch.reset(image.width, image.height, 3);
  const std::size_t n =
      static_cast<std::size_t>(image.width) * static_cast<std::size_t>(image.height);
  const std::uint8_t* in = image.pixels.data();
  std::uint8_t* out = scratch.pixels.data();
  const std::size_t step = static_cast<std::size_t>(image.channels);
  for (std::size_t i = 0; i < n; ++i, in += step, out += 3) {
    out[0] = in[0];
    out[1] = image.channels == 1 ? in[0] : in[1];
    out[2] = image.channels == 1 ? in[0] : in[2];
  }
  return scratch;
}

bool is_random_transform(const Transform& t) {
  return !std::holds_alternative<Resize>(t) && !std::holds_alternative<CenterCrop>(t) &&
         !std::holds_alternative<Grayscale>(t) && !std::holds_alternative<Normalize>(t);
}

bool is_tensor_transform(const Transform& t) {
  return std::holds_alternative<Normalize>(t) || std::holds_alternative<RandomErasing>(t);
}

// The three values of a fill, a mean or an erasing value, on a grey output.
void check_one_value(const char* what, const char* name, std::array<double, 3> v) {
  if (v[1] != v[0] || v[2] != v[0]) {
    throw std::invalid_argument(fmt::format(
        "vision::Pipeline: {} has {} ({}, {}, {}) but the image is grey after "
        "Grayscale(num_output_channels=1); give one value for every channel, as torchvision "
        "takes one value per channel",
        what, name, v[0], v[1], v[2]));
  }
}

template <class T>
std::array<double, 3> as_doubles(const std::array<T, 3>& v) {
  return {static_cast<double>(v[0]), static_cast<double>(v[1]), static_cast<double>(v[2])};
}

std::string_view name_of(std::string_view source) {
  return source.empty() ? std::string_view("image") : source;
}

}  // namespace

Pipeline::Pipeline(std::initializer_list<Transform> transforms) {
  for (const Transform& t : transforms) add(t);
}

const Normalize* Pipeline::normalize() const noexcept {
  for (const Transform& t : transforms_) {
    if (const auto* n = std::get_if<Normalize>(&t)) return n;
  }
  return nullptr;
}

void Pipeline::add(Transform transform) {
  const bool normalized = normalize() != nullptr;
  const bool erases = std::any_of(transforms_.begin(), transforms_.end(), [](const Transform& t) {
    return std::holds_alternative<RandomErasing>(t);
  });
  if (std::holds_alternative<Normalize>(transform) && normalized) {
    throw std::invalid_argument(
        "vision::Pipeline: a second Normalize; normalise once, with the mean and std of the "
        "data");
  }
  if (normalized && !std::holds_alternative<RandomErasing>(transform)) {
    throw std::invalid_argument(
        "vision::Pipeline: an image transform after Normalize; Normalize works on the output "
        "tensor, so only RandomErasing may follow it");
  }
  if (erases && !is_tensor_transform(transform)) {
    throw std::invalid_argument(
        "vision::Pipeline: an image transform after RandomErasing; RandomErasing works on the "
        "output tensor, so only Normalize or another RandomErasing may follow it");
  }
  if (std::holds_alternative<Normalize>(transform) && dtype_ == DType::kUInt8) {
    throw std::invalid_argument(
        "vision::Pipeline: Normalize with a uint8 output; normalised values need a floating-point "
        "output (output(DType::kFloat32), kBFloat16 or kFloat16)");
  }
  if (channels() == 1) {
    std::visit(
        [](const auto& t) {
          using T = std::decay_t<decltype(t)>;
          if constexpr (std::is_same_v<T, Normalize>) {
            check_one_value("Normalize", "mean", as_doubles(t.mean));
            check_one_value("Normalize", "std", as_doubles(t.std));
          } else if constexpr (std::is_same_v<T, RandomErasing>) {
            if (!t.random_values) check_one_value("RandomErasing", "value", as_doubles(t.value));
          } else if constexpr (std::is_same_v<T, RandomCrop> || std::is_same_v<T, RandomRotation> ||
                               std::is_same_v<T, TrivialAugmentWide> ||
                               std::is_same_v<T, RandAugment>) {
            check_one_value(std::is_same_v<T, RandomCrop>       ? "RandomCrop"
                            : std::is_same_v<T, RandomRotation> ? "RandomRotation"
                            : std::is_same_v<T, RandAugment>    ? "RandAugment"
                                                                : "TrivialAugmentWide",
                            "fill", as_doubles(t.fill));
          }
        },
        transform);
  }
  transforms_.push_back(std::move(transform));
  table_ = detail::make_output_table(dtype(), layout_, normalize());
}

Pipeline& Pipeline::then(Transform transform) & {
  add(std::move(transform));
  return *this;
}
Pipeline Pipeline::then(Transform transform) && {
  add(std::move(transform));
  return std::move(*this);
}
Pipeline& Pipeline::mode(Mode m) & {
  mode_ = m;
  return *this;
}
Pipeline Pipeline::mode(Mode m) && {
  mode_ = m;
  return std::move(*this);
}

void Pipeline::set_output(DType dtype, Layout layout) {
  if (dtype != DType::kUInt8 && dtype != DType::kFloat32 && dtype != DType::kBFloat16 &&
      dtype != DType::kFloat16) {
    throw std::invalid_argument(fmt::format(
        "vision::Pipeline::output: dtype {}; images are uint8, float32, bfloat16 or float16",
        dtype_name(dtype)));
  }
  if (dtype == DType::kUInt8 && normalize() != nullptr) {
    throw std::invalid_argument(
        "vision::Pipeline::output: uint8 with Normalize; normalised values need float32, "
        "bfloat16 or float16");
  }
  dtype_ = dtype;
  layout_ = layout;
  table_ = detail::make_output_table(dtype, layout, normalize());
}

Pipeline& Pipeline::output(DType dtype, Layout layout) & {
  set_output(dtype, layout);
  return *this;
}
Pipeline Pipeline::output(DType dtype, Layout layout) && {
  set_output(dtype, layout);
  return std::move(*this);
}

DType Pipeline::dtype() const noexcept {
  if (dtype_) return *dtype_;
  return normalize() != nullptr ? DType::kFloat32 : DType::kUInt8;
}

int Pipeline::channels() const noexcept {
  int channels = 3;
  for (const Transform& t : transforms_) {
    if (const auto* g = std::get_if<Grayscale>(&t)) channels = g->num_output_channels;
  }
  return channels;
}

const detail::OutputTable& Pipeline::table() const {
  if (table_) return *table_;
  // A default-constructed pipeline: uint8 CHW.
  static const std::shared_ptr<const detail::OutputTable> plain =
      detail::make_output_table(DType::kUInt8, Layout::kCHW, nullptr);
  return *plain;
}

std::optional<Size> Pipeline::output_size() const noexcept {
  std::optional<Size> size;
  for (const Transform& transform : transforms_) {
    std::visit(
        [&size](const auto& t) {
          using T = std::decay_t<decltype(t)>;
          if constexpr (std::is_same_v<T, Resize>) {
            size = t.shorter_side == 0 ? std::optional<Size>(t.size) : std::nullopt;
          } else if constexpr (std::is_same_v<T, CenterCrop> || std::is_same_v<T, RandomCrop> ||
                               std::is_same_v<T, RandomResizedCrop>) {
            size = t.size;
          } else if constexpr (std::is_same_v<T, RandomRotation>) {
            if (t.expand) size = std::nullopt;  // the rotated image's size depends on the angle
          }
        },
        transform);
  }
  return size;
}

bool Pipeline::is_random() const noexcept {
  return std::any_of(transforms_.begin(), transforms_.end(), is_random_transform);
}

std::string Pipeline::to_string() const {
  std::string out;
  auto interp = [](Interpolation i) {
    return i == Interpolation::kBilinear  ? ""
           : i == Interpolation::kBicubic ? ", bicubic"
                                          : ", nearest";
  };
  auto name = [](Interpolation i) {
    return i == Interpolation::kBilinear  ? "bilinear"
           : i == Interpolation::kBicubic ? "bicubic"
                                          : "nearest";
  };
  for (const Transform& transform : transforms_) {
    std::visit(
        [&](const auto& t) {
          using T = std::decay_t<decltype(t)>;
          if constexpr (std::is_same_v<T, Resize>) {
            out += t.shorter_side != 0
                       ? fmt::format("Resize({}{})", t.shorter_side, interp(t.interpolation))
                       : fmt::format("Resize(({}, {}){})", t.size.height, t.size.width,
                                     interp(t.interpolation));
          } else if constexpr (std::is_same_v<T, CenterCrop>) {
            out += fmt::format("CenterCrop(({}, {}))", t.size.height, t.size.width);
          } else if constexpr (std::is_same_v<T, RandomResizedCrop>) {
            out +=
                fmt::format("RandomResizedCrop(({}, {}), scale=({}, {}), ratio=({:.4g}, {:.4g}){})",
                            t.size.height, t.size.width, t.scale.first, t.scale.second,
                            t.ratio.first, t.ratio.second, interp(t.interpolation));
          } else if constexpr (std::is_same_v<T, RandomCrop>) {
            out += fmt::format("RandomCrop(({}, {}), padding=({}, {}, {}, {}))", t.size.height,
                               t.size.width, t.padding.left, t.padding.top, t.padding.right,
                               t.padding.bottom);
          } else if constexpr (std::is_same_v<T, RandomHorizontalFlip>) {
            out += fmt::format("RandomHorizontalFlip(p={})", t.p);
          } else if constexpr (std::is_same_v<T, RandomVerticalFlip>) {
            out += fmt::format("RandomVerticalFlip(p={})", t.p);
          } else if constexpr (std::is_same_v<T, Grayscale>) {
            out += fmt::format("Grayscale(num_output_channels={})", t.num_output_channels);
          } else if constexpr (std::is_same_v<T, RandomGrayscale>) {
            out += fmt::format("RandomGrayscale(p={})", t.p);
          } else if constexpr (std::is_same_v<T, GaussianBlur>) {
            out += fmt::format("GaussianBlur(kernel_size=({}, {}), sigma=({}, {}))", t.kernel_x,
                               t.kernel_y, t.sigma.first, t.sigma.second);
          } else if constexpr (std::is_same_v<T, RandomRotation>) {
            out += fmt::format("RandomRotation(degrees=({}, {}), interpolation={}{})",
                               t.degrees.first, t.degrees.second, name(t.interpolation),
                               t.expand ? ", expand=True" : "");
          } else if constexpr (std::is_same_v<T, TrivialAugmentWide>) {
            out += fmt::format("TrivialAugmentWide(num_magnitude_bins={}, interpolation={})",
                               t.num_magnitude_bins, name(t.interpolation));
          } else if constexpr (std::is_same_v<T, RandAugment>) {
            out += fmt::format(
                "RandAugment(num_ops={}, magnitude={}, num_magnitude_bins={}, interpolation={})",
                t.num_ops, t.magnitude, t.num_magnitude_bins, name(t.interpolation));
          } else if constexpr (std::is_same_v<T, RandomErasing>) {
            out += t.random_values
                       ? fmt::format(
                             "RandomErasing(p={}, scale=({}, {}), ratio=({}, {}), "
                             "value=random)",
                             t.p, t.scale.first, t.scale.second, t.ratio.first, t.ratio.second)
                       : fmt::format(
                             "RandomErasing(p={}, scale=({}, {}), ratio=({}, {}), "
                             "value=({}, {}, {}))",
                             t.p, t.scale.first, t.scale.second, t.ratio.first, t.ratio.second,
                             t.value[0], t.value[1], t.value[2]);
          } else if constexpr (std::is_same_v<T, ColorJitter>) {
            auto range = [](const std::optional<ColorJitter::Range>& r) {
              return r ? fmt::format("({:.3g}, {:.3g})", r->first, r->second) : std::string("-");
            };
            out += fmt::format("ColorJitter(brightness={}, contrast={}, saturation={}, hue={})",
                               range(t.brightness), range(t.contrast), range(t.saturation),
                               range(t.hue));
          } else {
            static_assert(std::is_same_v<T, Normalize>);
            out += fmt::format("Normalize(mean=({}, {}, {}), std=({}, {}, {}))", t.mean[0],
                               t.mean[1], t.mean[2], t.std[0], t.std[1], t.std[2]);
          }
        },
        transform);
    out += " -> ";
  }
  out += fmt::format("{} {}, {}", dtype_name(dtype()), layout_ == Layout::kCHW ? "CHW" : "HWC",
                     mode_ == Mode::kExact ? "exact" : "fast");
  return out;
}

namespace {

// The whole-image operation between two stages, on `image` (the result replaces it; `spare`
// is scratch).
void run_between(const detail::Between& b, Image& image, Image& spare) {
  std::visit(
      [&](const auto& op) {
        using T = std::decay_t<decltype(op)>;
        if constexpr (std::is_same_v<T, ColorJitter::Params>) {
          functional::color_jitter(image, op);
        } else if constexpr (std::is_same_v<T, detail::Between::Pad>) {
          const Padding& p = op.padding;
          functional::crop(image,
                           Rect{-p.left, -p.top, image.width + p.left + p.right,
                                image.height + p.top + p.bottom},
                           spare, {0, 0, 0}, op.mode);
          std::swap(image, spare);
        } else if constexpr (std::is_same_v<T, detail::Between::Gray>) {
          functional::rgb_to_grayscale(image, op.channels, spare);
          std::swap(image, spare);
        } else if constexpr (std::is_same_v<T, detail::Between::Blur>) {
          detail::gaussian_blur_image(image, detail::gaussian_kernel1d(op.kernel_x, op.sigma),
                                      detail::gaussian_kernel1d(op.kernel_y, op.sigma), spare);
          std::swap(image, spare);
        } else if constexpr (std::is_same_v<T, detail::Between::Rotate>) {
          functional::rotate(image, op.angle, op.interpolation, op.expand, op.center, op.fill,
                             spare);
          std::swap(image, spare);
        } else if constexpr (std::is_same_v<T, detail::Between::Augment>) {
          for (const AugmentStep& step : op.steps) {
            detail::apply_augment(image, spare, step, op.interpolation, op.fill);
          }
        }
      },
      b.op);
}

// Runs the planned stages on the first stage's input; the last writes into a new tensor.
Tensor execute(const detail::Plan& plan, Input input, const detail::OutputTable& table,
               Scratch& s) {
  std::size_t buffer = 0;
  for (std::size_t i = 0; i + 1 < plan.stages.size(); ++i) {
    const detail::Stage& stage = plan.stages[i];
    const Rect valid = valid_part(stage);
    detail::ImageSink sink{&s.stages[buffer], placement(stage, valid, input.image->channels)};
    detail::begin(sink);
    run_stage(stage, input, valid, s, detail::image_row, &sink);
    run_between(plan.between[i], s.stages[buffer], s.stages[1 - buffer]);
    input = Input{&s.stages[buffer], 0, 0, 1};
    buffer = 1 - buffer;
  }
  const detail::Stage& last = plan.stages.back();
  const Size size = plan.output;
  const int c = input.image->channels;
  const Shape shape = table.layout == Layout::kCHW ? Shape{c, size.height, size.width}
                                                   : Shape{size.height, size.width, c};
  Tensor tensor = Tensor::empty(table.dtype, shape);
  const Rect valid = valid_part(last);
  detail::TensorSink sink{tensor.raw_data(), &table, placement(last, valid, c)};
  detail::begin(sink);
  run_stage(last, input, valid, s, detail::tensor_row, &sink);
  for (const detail::Erasure& e : plan.erasures) detail::erase_output(tensor, table, e);
  return tensor;
}

// The DCT scale for fast mode: the largest of 8, 4, 2 at which the first stage's box still has
// at least its output's resolution; 1 when it does not resize.
int fast_denom(const detail::Stage& stage) {
  if (!stage.resize) return 1;
  for (int d : {8, 4, 2}) {
    if (stage.box.width >= stage.resized.width * d &&
        stage.box.height >= stage.resized.height * d) {
      return d;
    }
  }
  return 1;
}

}  // namespace

Tensor Pipeline::run(std::span<const std::uint8_t> encoded, Generator& rng, std::string_view source,
                     Trace* trace) const {
  Scratch& s = t_scratch;
  detail::Reader& reader = detail::Reader::for_this_thread();
  const ImageInfo info = reader.open(encoded, source);
  try {
    detail::make_plan(transforms_, Size{info.height, info.width}, &rng, s.plan, trace);
  } catch (const std::invalid_argument& e) {
    throw Error(fmt::format("vision::Pipeline: {} ({} x {}): {}", name_of(source), info.width,
                            info.height, e.what()));
  }
  // The region of the source the first stage reads (at full size).
  const detail::Stage& first = s.plan.stages.front();
  const Rect valid = valid_part(first);
  DecodeOptions options;
  if (valid.width > 0 && valid.height > 0) {
    Image whole;  // only its size is read
    whole.width = info.width;
    whole.height = info.height;
    stage_axes(first, Input{&whole, 0, 0, 1}, valid, s.columns, s.rows);
    Rect roi{s.columns.first_input(), s.rows.first_input(),
             s.columns.end_input() - s.columns.first_input(),
             s.rows.end_input() - s.rows.first_input()};
    if (mode_ == Mode::kFast && info.format == ImageFormat::kJpeg) {
      options.scale_denom = fast_denom(first);
    }
    if (info.format == ImageFormat::kJpeg) {
      const int margin = kJpegRegionMargin * options.scale_denom;
      const int x0 = std::max(0, roi.x - margin);
      const int y0 = std::max(0, roi.y - margin);
      roi = Rect{x0, y0, std::min(info.width, roi.x + roi.width + margin) - x0,
                 std::min(info.height, roi.y + roi.height + margin) - y0};
    }
    if (roi != Rect{0, 0, info.width, info.height}) options.roi = roi;
  } else {
    options.roi = Rect{0, 0, 1, 1};  // nothing of the image is shown: decode the least
  }
  reader.read(options, s.decoded);
  return execute(s.plan, Input{&s.decoded, s.decoded.x, s.decoded.y, s.decoded.scale_denom},
                 table(), s);
}

Tensor Pipeline::run(const Image& image, Generator& rng, std::string_view source,
                     Trace* trace) const {
  Scratch& s = t_scratch;
  const Image& rgb = as_rgb(image, s.converted);
  try {
    detail::make_plan(transforms_, Size{rgb.height, rgb.width}, &rng, s.plan, trace);
  } catch (const std::invalid_argument& e) {
    throw Error(fmt::format("vision::Pipeline: {} ({} x {}): {}", name_of(source), rgb.width,
                            rgb.height, e.what()));
  }
  return execute(s.plan, Input{&rgb, 0, 0, 1}, table(), s);
}

namespace {

// sample_rng() only when the pipeline draws: a fixed pipeline runs anywhere.
Generator& generator_for(const Pipeline& pipeline) {
  if (pipeline.is_random()) return sample_rng();
  thread_local Generator unused;
  return unused;
}

}  // namespace

Tensor Pipeline::operator()(std::span<const std::uint8_t> encoded, std::string_view source) const {
  return run(encoded, generator_for(*this), source);
}

Tensor Pipeline::operator()(const Image& image, std::string_view source) const {
  return run(image, generator_for(*this), source);
}

}  // namespace stoker::vision
