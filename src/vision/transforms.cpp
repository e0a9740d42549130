// The torchvision transforms' parameters: validation, output sizes, crop boxes and the random
// draws (torchvision 0.14's get_params, drawing from stoker's Generator), and the geometric
// functional forms (resize, resized_crop, crop with padding, hflip) on Images.
#include "stoker/vision/transforms.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "vision/resample.hpp"

namespace stoker::vision {
namespace {

void check_size(const char* what, Size size) {
  if (size.height < 1 || size.width < 1) {
    throw std::invalid_argument(
        fmt::format("vision::{}: size is {} x {} (height x width); both must be at least 1", what,
                    size.height, size.width));
  }
}

void check_range(const char* what, const char* name, std::pair<double, double> range, double low) {
  if (!(range.first <= range.second) || !(range.first >= low) || !std::isfinite(range.second)) {
    throw std::invalid_argument(fmt::format(
        "vision::{}: {} is ({}, {}); it must be a range (min <= max) of finite values >= {}", what,
        name, range.first, range.second, low));
  }
}

// Python's round(): to nearest, ties to even (the default floating-point rounding mode).
int round_half_even(double v) { return static_cast<int>(std::nearbyint(v)); }

// One attempt of RandomResizedCrop's and RandomErasing's box search: an area uniform in `scale`
// of the image's, an aspect ratio log-uniform in `ratio`; the two sides sqrt(area * ratio) and
// sqrt(area / ratio), rounded as Python rounds.
struct Sides {
  int by_ratio = 0;    // round(sqrt(area * aspect))
  int over_ratio = 0;  // round(sqrt(area / aspect))
};
Sides draw_sides(Generator& rng, Size image, std::pair<double, double> scale,
                 std::pair<double, double> ratio) {
  const double area = static_cast<double>(image.width) * static_cast<double>(image.height);
  const double target = area * rng.uniform(scale.first, scale.second);
  const double aspect = std::exp(rng.uniform(std::log(ratio.first), std::log(ratio.second)));
  return {round_half_even(std::sqrt(target * aspect)), round_half_even(std::sqrt(target / aspect))};
}

}  // namespace

Resize::Resize(int shorter, Interpolation interp, int cap)
    : shorter_side(shorter), max_size(cap), interpolation(interp) {
  if (shorter < 1) {
    throw std::invalid_argument(
        fmt::format("vision::Resize: size is {}; the shorter side must be at least 1", shorter));
  }
  if (cap != 0 && cap <= shorter) {
    throw std::invalid_argument(fmt::format(
        "vision::Resize: max_size is {} and size {}; max_size must be larger than size (or 0 "
        "for no cap), as torchvision requires",
        cap, shorter));
  }
}

Resize::Resize(Size exact, Interpolation interp) : size(exact), interpolation(interp) {
  check_size("Resize", exact);
}

Size Resize::output_size(Size input) const noexcept {
  if (shorter_side == 0) return size;
  const bool wide = input.width > input.height;
  const std::int64_t shorter = wide ? input.height : input.width;
  const std::int64_t longer = wide ? input.width : input.height;
  // torchvision: int(size * long / short), the division in double precision.
  std::int64_t new_short = shorter_side;
  auto new_long = static_cast<std::int64_t>(static_cast<double>(shorter_side * longer) /
                                            static_cast<double>(shorter));
  if (max_size != 0 && new_long > max_size) {
    new_short = static_cast<std::int64_t>(static_cast<double>(std::int64_t{max_size} * new_short) /
                                          static_cast<double>(new_long));
    new_long = max_size;
  }
  return wide ? Size{static_cast<int>(new_short), static_cast<int>(new_long)}
              : Size{static_cast<int>(new_long), static_cast<int>(new_short)};
}

CenterCrop::CenterCrop(int side) : CenterCrop(Size{side, side}) {}

CenterCrop::CenterCrop(Size crop) : size(crop) { check_size("CenterCrop", crop); }

Rect CenterCrop::box(Size input) const noexcept {
  // Larger than the input: torchvision pads (crop - side) / 2 on the left/top (floor), the rest
  // on the right/bottom, and crops nothing on that axis.
  auto offset = [](int side, int crop) {
    if (crop > side) return -((crop - side) / 2);
    return round_half_even((side - crop) / 2.0);
  };
  return Rect{offset(input.width, size.width), offset(input.height, size.height), size.width,
              size.height};
}

RandomResizedCrop::RandomResizedCrop(int side, std::pair<double, double> area,
                                     std::pair<double, double> aspect, Interpolation interp)
    : RandomResizedCrop(Size{side, side}, area, aspect, interp) {}

RandomResizedCrop::RandomResizedCrop(Size out, std::pair<double, double> area,
                                     std::pair<double, double> aspect, Interpolation interp)
    : size(out), scale(area), ratio(aspect), interpolation(interp) {
  check_size("RandomResizedCrop", out);
  check_range("RandomResizedCrop", "scale", area, 0.0);
  check_range("RandomResizedCrop", "ratio", aspect, 0.0);
  if (aspect.first <= 0.0) {
    throw std::invalid_argument(
        fmt::format("vision::RandomResizedCrop: ratio is ({}, {}); aspect ratios must be > 0",
                    aspect.first, aspect.second));
  }
}

Rect RandomResizedCrop::sample(Generator& rng, Size input) const noexcept {
  const int width = input.width;
  const int height = input.height;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const Sides sides = draw_sides(rng, input, scale, ratio);
    const int w = sides.by_ratio;
    const int h = sides.over_ratio;
    if (0 < w && w <= width && 0 < h && h <= height) {
      const auto top = static_cast<int>(rng.below(static_cast<std::uint64_t>(height - h + 1)));
      const auto left = static_cast<int>(rng.below(static_cast<std::uint64_t>(width - w + 1)));
      return Rect{left, top, w, h};
    }
  }
  // torchvision's fallback: the whole image, cut to the nearest ratio in range, centred.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int w = width;
  int h = height;
  if (in_ratio < ratio.first) {
    h = round_half_even(w / ratio.first);
  } else if (in_ratio > ratio.second) {
    w = round_half_even(h * ratio.second);
  }
  return Rect{(width - w) / 2, (height - h) / 2, w, h};
}

RandomCrop::RandomCrop(int side, Padding pad, bool pad_small, std::array<std::uint8_t, 3> value,
                       PaddingMode mode)
    : RandomCrop(Size{side, side}, pad, pad_small, value, mode) {}

RandomCrop::RandomCrop(Size crop, Padding pad, bool pad_small, std::array<std::uint8_t, 3> value,
                       PaddingMode mode)
    : size(crop), padding(pad), pad_if_needed(pad_small), fill(value), padding_mode(mode) {
  check_size("RandomCrop", crop);
  if (pad.left < 0 || pad.top < 0 || pad.right < 0 || pad.bottom < 0) {
    throw std::invalid_argument(fmt::format(
        "vision::RandomCrop: padding is (left {}, top {}, right {}, bottom {}); each must be >= 0",
        pad.left, pad.top, pad.right, pad.bottom));
  }
}

Padding RandomCrop::shortfall_padding(Size input) const noexcept {
  Padding p;
  const int width = input.width + padding.left + padding.right;
  const int height = input.height + padding.top + padding.bottom;
  // torchvision pads both sides by the whole shortfall.
  if (pad_if_needed && width < size.width) p.left = p.right = size.width - width;
  if (pad_if_needed && height < size.height) p.top = p.bottom = size.height - height;
  return p;
}

Padding RandomCrop::total_padding(Size input) const noexcept {
  const Padding more = shortfall_padding(input);
  return Padding(padding.left + more.left, padding.top + more.top, padding.right + more.right,
                 padding.bottom + more.bottom);
}

Rect RandomCrop::sample(Generator& rng, Size padded) const {
  if (padded.height < size.height || padded.width < size.width) {
    throw std::invalid_argument(fmt::format(
        "vision::RandomCrop: the crop ({} x {}) is larger than the (padded) image ({} x {}); set "
        "pad_if_needed or padding",
        size.height, size.width, padded.height, padded.width));
  }
  if (padded == size) return Rect{0, 0, size.width, size.height};
  const auto top =
      static_cast<int>(rng.below(static_cast<std::uint64_t>(padded.height - size.height + 1)));
  const auto left =
      static_cast<int>(rng.below(static_cast<std::uint64_t>(padded.width - size.width + 1)));
  return Rect{left, top, size.width, size.height};
}

RandomHorizontalFlip::RandomHorizontalFlip(double probability) : RandomChance{probability} {
  if (!(probability >= 0.0 && probability <= 1.0)) {
    throw std::invalid_argument(fmt::format(
        "vision::RandomHorizontalFlip: p is {}; it must be a probability in [0, 1]", probability));
  }
}

namespace {

std::optional<ColorJitter::Range> factor_range(const char* name, double v) {
  if (!(v >= 0.0) || !std::isfinite(v)) {
    throw std::invalid_argument(
        fmt::format("vision::ColorJitter: {} is {}; it must be a finite value >= 0", name, v));
  }
  if (v == 0.0) return std::nullopt;
  return ColorJitter::Range{std::max(0.0, 1.0 - v), 1.0 + v};
}

std::optional<ColorJitter::Range> checked(const char* name, ColorJitter::Range r, double center,
                                          double low, double high) {
  if (!(r.first <= r.second) || !(r.first >= low) || !(r.second <= high)) {
    throw std::invalid_argument(fmt::format(
        "vision::ColorJitter: {} is ({}, {}); it must be a range (min <= max) within [{}, {}]",
        name, r.first, r.second, low, high));
  }
  if (r.first == center && r.second == center) return std::nullopt;
  return r;
}

}  // namespace

ColorJitter::ColorJitter(double b, double c, double s, double h)
    : brightness(factor_range("brightness", b)),
      contrast(factor_range("contrast", c)),
      saturation(factor_range("saturation", s)) {
  if (!(h >= 0.0 && h <= 0.5)) {
    throw std::invalid_argument(
        fmt::format("vision::ColorJitter: hue is {}; it must be in [0, 0.5]", h));
  }
  if (h != 0.0) hue = Range{-h, h};
}

ColorJitter::ColorJitter(Range b, Range c, Range s, Range h)
    : brightness(checked("brightness", b, 1.0, 0.0, HUGE_VAL)),
      contrast(checked("contrast", c, 1.0, 0.0, HUGE_VAL)),
      saturation(checked("saturation", s, 1.0, 0.0, HUGE_VAL)),
      hue(checked("hue", h, 0.0, -0.5, 0.5)) {}

ColorJitter::Params ColorJitter::sample(Generator& rng) const noexcept {
  Params p;
  rng.shuffle(p.order.begin(), p.order.end());  // torch.randperm(4)
  auto draw = [&rng](const std::optional<Range>& r) -> std::optional<double> {
    if (!r) return std::nullopt;
    return rng.uniform(r->first, r->second);
  };
  p.brightness = draw(brightness);
  p.contrast = draw(contrast);
  p.saturation = draw(saturation);
  p.hue = draw(hue);
  return p;
}

Normalize::Normalize(std::array<float, 3> m, std::array<float, 3> s) : mean(m), std(s) {
  for (float v : s) {
    if (!(v != 0.0f) || !std::isfinite(v)) {
      throw std::invalid_argument(fmt::format(
          "vision::Normalize: std is ({}, {}, {}); every value must be finite and non-zero", s[0],
          s[1], s[2]));
    }
  }
}

namespace functional {
namespace {

void check_image(const char* what, const Image& in) {
  if (in.width < 1 || in.height < 1 || in.channels < 1 || in.channels > 4 ||
      in.pixels.size() < in.row_bytes() * static_cast<std::size_t>(in.height)) {
    throw std::invalid_argument(fmt::format(
        "vision::functional::{}: the image is {} x {} x {} with {} bytes of pixels; it needs a "
        "size of at least 1 x 1, 1 to 4 channels and all its bytes",
        what, in.width, in.height, in.channels, in.pixels.size()));
  }
}

void copy_row(void* context, int row, const std::uint8_t* pixels) {
  auto* out = static_cast<Image*>(context);
  std::copy_n(pixels, out->row_bytes(), out->row(row));
}

}  // namespace

void resized_crop(const Image& in, Rect box, Size size, Interpolation interpolation, Image& out) {
  check_image("resized_crop", in);
  check_size("functional::resized_crop", size);
  if (box.x < 0 || box.y < 0 || box.width < 1 || box.height < 1 || box.x + box.width > in.width ||
      box.y + box.height > in.height) {
    throw std::invalid_argument(fmt::format(
        "vision::functional::resized_crop: the box ({}, {}, {} x {}) is not inside the {} x {} "
        "image",
        box.x, box.y, box.width, box.height, in.width, in.height));
  }
  if (&in == &out) {
    Image copy = in;
    resized_crop(copy, box, size, interpolation, out);
    return;
  }
  detail::Axis columns;
  detail::Axis rows;
  detail::pillow_axis(columns, box.width, 0.0, box.width, size.width, interpolation, 0, size.width);
  detail::pillow_axis(rows, box.height, 0.0, box.height, size.height, interpolation, 0,
                      size.height);
  for (int& s : columns.start) s += box.x;
  for (int& s : rows.start) s += box.y;
  out.reset(size.width, size.height, in.channels);
  detail::resample(detail::view_of(in), columns, rows, copy_row, &out);
}

void resize(const Image& in, Size size, Interpolation interpolation, Image& out) {
  check_image("resize", in);
  resized_crop(in, Rect{0, 0, in.width, in.height}, size, interpolation, out);
}

}  // namespace functional

int detail::pad_index(int i, int n, PaddingMode mode) noexcept {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PaddingMode::kConstant:
      return -1;
    case PaddingMode::kEdge:
      return i < 0 ? 0 : n - 1;
    case PaddingMode::kReflect: {  // numpy's "reflect": the edge pixel is not repeated
      if (n == 1) return 0;
      const int period = 2 * (n - 1);
      int m = i % period;
      if (m < 0) m += period;
      return m < n ? m : period - m;
    }
    case PaddingMode::kSymmetric: {  // numpy's "symmetric": the edge pixel is repeated
      const int period = 2 * n;
      int m = i % period;
      if (m < 0) m += period;
      return m < n ? m : period - 1 - m;
    }
  }
  return -1;
}

namespace functional {

void crop(const Image& in, Rect box, Image& out, std::array<std::uint8_t, 3> fill,
          PaddingMode mode) {
  check_image("crop", in);
  if (box.width < 1 || box.height < 1) {
    throw std::invalid_argument(fmt::format(
        "vision::functional::crop: the box is {} x {}; it needs a width and height of at least 1",
        box.width, box.height));
  }
  if (&in == &out) {
    Image copy = in;
    crop(copy, box, out, fill, mode);
    return;
  }
  const int c = in.channels;
  out.reset(box.width, box.height, c);
  std::vector<int> columns(static_cast<std::size_t>(box.width));
  for (int x = 0; x < box.width; ++x) {
    columns[static_cast<std::size_t>(x)] = detail::pad_index(box.x + x, in.width, mode);
  }
  for (int y = 0; y < box.height; ++y) {
    const int sy = detail::pad_index(box.y + y, in.height, mode);
    std::uint8_t* o = out.row(y);
    for (int x = 0; x < box.width; ++x, o += c) {
      const int sx = columns[static_cast<std::size_t>(x)];
      if (sy < 0 || sx < 0) {
        for (int k = 0; k < c; ++k) o[k] = fill[static_cast<std::size_t>(std::min(k, 2))];
      } else {
        std::copy_n(in.row(sy) + static_cast<std::ptrdiff_t>(sx) * c, c, o);
      }
    }
  }
}

void hflip(Image& image) {
  check_image("hflip", image);
  const int c = image.channels;
  for (int y = 0; y < image.height; ++y) {
    std::uint8_t* row = image.row(y);
    for (int a = 0, b = image.width - 1; a < b; ++a, --b) {
      std::swap_ranges(row + static_cast<std::ptrdiff_t>(a) * c,
                       row + static_cast<std::ptrdiff_t>(a + 1) * c,
                       row + static_cast<std::ptrdiff_t>(b) * c);
    }
  }
}

}  // namespace functional
}  // namespace stoker::vision

namespace stoker::vision {
namespace {

void check_probability(const char* what, double p) {
  if (!(p >= 0.0 && p <= 1.0)) {
    throw std::invalid_argument(
        fmt::format("vision::{}: p is {}; it must be a probability in [0, 1]", what, p));
  }
}

}  // namespace

RandomVerticalFlip::RandomVerticalFlip(double probability) : RandomChance{probability} {
  check_probability("RandomVerticalFlip", probability);
}

Grayscale::Grayscale(int channels) : num_output_channels(channels) {
  if (channels != 1 && channels != 3) {
    throw std::invalid_argument(fmt::format(
        "vision::Grayscale: num_output_channels is {}; it must be 1 or 3, as torchvision's",
        channels));
  }
}

RandomGrayscale::RandomGrayscale(double probability) : RandomChance{probability} {
  check_probability("RandomGrayscale", probability);
}

GaussianBlur::GaussianBlur(int kernel_size, std::pair<double, double> s)
    : GaussianBlur(std::pair<int, int>{kernel_size, kernel_size}, s) {}

namespace {

std::pair<double, double> single_sigma(double s) {
  if (!(s > 0.0)) {
    throw std::invalid_argument(
        fmt::format("vision::GaussianBlur: sigma is {}; a single sigma must be > 0", s));
  }
  return {s, s};
}

}  // namespace

GaussianBlur::GaussianBlur(int kernel_size, double s)
    : GaussianBlur(std::pair<int, int>{kernel_size, kernel_size}, single_sigma(s)) {}

GaussianBlur::GaussianBlur(std::pair<int, int> kernel_size, std::pair<double, double> s)
    : kernel_x(kernel_size.first), kernel_y(kernel_size.second), sigma(s) {
  if (kernel_x < 1 || kernel_y < 1 || kernel_x % 2 == 0 || kernel_y % 2 == 0) {
    throw std::invalid_argument(fmt::format(
        "vision::GaussianBlur: kernel_size is ({}, {}); each must be odd and positive, as "
        "torchvision's",
        kernel_x, kernel_y));
  }
  if (!(s.first > 0.0 && s.first <= s.second) || !std::isfinite(s.second)) {
    throw std::invalid_argument(
        fmt::format("vision::GaussianBlur: sigma is ({}, {}); it must be a range (min, max) with "
                    "0 < min <= max, finite",
                    s.first, s.second));
  }
}

double GaussianBlur::sample(Generator& rng) const noexcept {
  return rng.uniform(sigma.first, sigma.second);
}

namespace {

std::pair<double, double> symmetric_degrees(double d) {
  if (!(d >= 0.0)) {
    throw std::invalid_argument(fmt::format(
        "vision::RandomRotation: degrees is {}; a single value d must be >= 0 (the range is "
        "[-d, d])",
        d));
  }
  return {-d, d};
}

}  // namespace

RandomRotation::RandomRotation(double d, Interpolation interp, bool grow, std::optional<Point> c,
                               std::array<std::uint8_t, 3> value)
    : RandomRotation(symmetric_degrees(d), interp, grow, c, value) {}

RandomRotation::RandomRotation(std::pair<double, double> d, Interpolation interp, bool grow,
                               std::optional<Point> c, std::array<std::uint8_t, 3> value)
    : degrees(d), interpolation(interp), expand(grow), center(c), fill(value) {
  if (!(d.first <= d.second) || !std::isfinite(d.first) || !std::isfinite(d.second)) {
    throw std::invalid_argument(fmt::format(
        "vision::RandomRotation: degrees is ({}, {}); it must be a range (min <= max) of finite "
        "angles",
        d.first, d.second));
  }
}

double RandomRotation::sample(Generator& rng) const noexcept {
  return rng.uniform(degrees.first, degrees.second);
}

namespace {

void check_erasing(double p, std::pair<double, double> scale, std::pair<double, double> ratio) {
  check_probability("RandomErasing", p);
  if (!(scale.first >= 0.0 && scale.first <= scale.second && scale.second <= 1.0)) {
    throw std::invalid_argument(fmt::format(
        "vision::RandomErasing: scale is ({}, {}); it must be a range (min <= max) within "
        "[0, 1]",
        scale.first, scale.second));
  }
  if (!(ratio.first > 0.0 && ratio.first <= ratio.second) || !std::isfinite(ratio.second)) {
    throw std::invalid_argument(fmt::format(
        "vision::RandomErasing: ratio is ({}, {}); it must be a range (min <= max) of finite "
        "aspect ratios > 0",
        ratio.first, ratio.second));
  }
}

}  // namespace

RandomErasing::RandomErasing(double probability, std::pair<double, double> area,
                             std::pair<double, double> aspect, float v)
    : RandomErasing(probability, area, aspect, std::array<float, 3>{v, v, v}) {}

RandomErasing::RandomErasing(double probability, std::pair<double, double> area,
                             std::pair<double, double> aspect, std::array<float, 3> v)
    : p(probability), scale(area), ratio(aspect), value(v) {
  check_erasing(probability, area, aspect);
  for (float x : v) {
    if (!std::isfinite(x)) {
      throw std::invalid_argument(
          fmt::format("vision::RandomErasing: value is ({}, {}, {}); the values must be finite",
                      v[0], v[1], v[2]));
    }
  }
}

RandomErasing::RandomErasing(double probability, std::pair<double, double> area,
                             std::pair<double, double> aspect, Random)
    : p(probability), scale(area), ratio(aspect), random_values(true) {
  check_erasing(probability, area, aspect);
}

RandomErasing::Params RandomErasing::sample(Generator& rng, Size image, int channels) const {
  Params out;
  if (!(rng.uniform() < p)) return out;
  for (int attempt = 0; attempt < 10; ++attempt) {
    // torchvision: the height takes the ratio (unlike RandomResizedCrop's width).
    const Sides sides = draw_sides(rng, image, scale, ratio);
    const int h = sides.by_ratio;
    const int w = sides.over_ratio;
    if (!(h < image.height && w < image.width)) continue;
    if (random_values) {
      out.values.resize(static_cast<std::size_t>(channels) * static_cast<std::size_t>(h) *
                        static_cast<std::size_t>(w));
      for (float& v : out.values) v = static_cast<float>(rng.normal());
    }
    const auto top = static_cast<int>(rng.below(static_cast<std::uint64_t>(image.height - h + 1)));
    const auto left = static_cast<int>(rng.below(static_cast<std::uint64_t>(image.width - w + 1)));
    out.erase = true;
    out.box = Rect{left, top, w, h};
    return out;
  }
  return out;  // torchvision's fallback erases the image with itself: nothing changes
}

Normalize::Normalize(float m, float s)
    : Normalize(std::array<float, 3>{m, m, m}, std::array<float, 3>{s, s, s}) {}

}  // namespace stoker::vision
