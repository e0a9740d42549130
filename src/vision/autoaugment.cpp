// TrivialAugmentWide and RandAugment (torchvision.transforms.autoaugment, 0.14): the 14
// operations in torchvision's order, their magnitude bins (torch.linspace in float32, as
// torchvision builds them, read back as double), the draws, and _apply_op on images: the
// geometric ops through Pillow's affine transform (geometry.cpp), the enhance ops through
// ImageEnhance's blends and the ImageOps tables (color.cpp).
#include <cmath>
#include <iterator>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "vision/augment.hpp"
#include "vision/torch_ops.hpp"

namespace stoker::vision {

namespace {

constexpr double kRadToDeg = 180.0 / 3.14159265358979323846;  // CPython's math.degrees

void check_bins(const char* what, int bins) {
  if (bins < 2) {
    throw std::invalid_argument(
        fmt::format("vision::{}: num_magnitude_bins is {}; it must be at least 2", what, bins));
  }
}

bool has_magnitudes(AugmentOp op) {
  return op != AugmentOp::kIdentity && op != AugmentOp::kAutoContrast && op != AugmentOp::kEqualize;
}

}  // namespace

namespace {

struct OpInfo {
  std::string_view name;  // torchvision's
  bool is_signed;         // negated with probability 1/2
};
// In AugmentOp's order, which is torchvision's _augmentation_space order.
constexpr OpInfo kOps[kAugmentOps] = {
    {"Identity", false},     {"ShearX", true},    {"ShearY", true},     {"TranslateX", true},
    {"TranslateY", true},    {"Rotate", true},    {"Brightness", true}, {"Color", true},
    {"Contrast", true},      {"Sharpness", true}, {"Posterize", false}, {"Solarize", false},
    {"AutoContrast", false}, {"Equalize", false},
};

}  // namespace

std::string_view augment_op_name(AugmentOp op) noexcept {
  const auto i = static_cast<std::size_t>(op);
  return i < std::size(kOps) ? kOps[i].name : std::string_view("unknown");
}

bool augment_op_signed(AugmentOp op) noexcept {
  const auto i = static_cast<std::size_t>(op);
  return i < std::size(kOps) && kOps[i].is_signed;
}

double augment_magnitude(AugmentOp op, int bin, int bins, bool wide, Size image) noexcept {
  auto linspace = [bin, bins](double start, double end) {
    return static_cast<double>(
        detail::torch_linspace(static_cast<float>(start), static_cast<float>(end), bins, bin));
  };
  switch (op) {
    case AugmentOp::kShearX:
    case AugmentOp::kShearY:
      return linspace(0.0, wide ? 0.99 : 0.3);
    case AugmentOp::kTranslateX:
      return linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * image.width);
    case AugmentOp::kTranslateY:
      return linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * image.height);
    case AugmentOp::kRotate:
      return linspace(0.0, wide ? 135.0 : 30.0);
    case AugmentOp::kBrightness:
    case AugmentOp::kColor:
    case AugmentOp::kContrast:
    case AugmentOp::kSharpness:
      return linspace(0.0, wide ? 0.99 : 0.9);
    case AugmentOp::kPosterize: {
      // 8 - (torch.arange(bins) / ((bins - 1) / k)).round().int(): a float32 division.
      const auto divisor = static_cast<float>((bins - 1) / (wide ? 6.0 : 4.0));
      return 8.0 - std::nearbyint(static_cast<float>(bin) / divisor);
    }
    case AugmentOp::kSolarize:
      return linspace(255.0, 0.0);
    default:
      return 0.0;
  }
}

namespace {

// One draw of torchvision's forward: the op, then (for ops with magnitudes) the bin when
// `bin` is negative (TrivialAugmentWide), then the sign.
AugmentStep draw(Generator& rng, int bin, int bins, bool wide, Size image) {
  AugmentStep step;
  step.op = static_cast<AugmentOp>(rng.below(kAugmentOps));
  if (has_magnitudes(step.op)) {
    step.bin = bin >= 0 ? bin : static_cast<int>(rng.below(static_cast<std::uint64_t>(bins)));
    step.magnitude = augment_magnitude(step.op, step.bin, bins, wide, image);
  }
  if (augment_op_signed(step.op) && rng.below(2) != 0) step.magnitude *= -1.0;
  return step;
}

}  // namespace

TrivialAugmentWide::TrivialAugmentWide(int bins, Interpolation interp,
                                       std::array<std::uint8_t, 3> value)
    : AugmentSpace{bins, interp, value} {
  check_bins("TrivialAugmentWide", bins);
}

std::vector<AugmentStep> TrivialAugmentWide::sample(Generator& rng, Size image) const {
  return {draw(rng, -1, num_magnitude_bins, true, image)};
}

RandAugment::RandAugment(int ops, int m, int bins, Interpolation interp,
                         std::array<std::uint8_t, 3> value)
    : AugmentSpace{bins, interp, value}, num_ops(ops), magnitude(m) {
  check_bins("RandAugment", bins);
  if (ops < 0) {
    throw std::invalid_argument(
        fmt::format("vision::RandAugment: num_ops is {}; it must be >= 0", ops));
  }
  if (m < 0 || m >= bins) {
    throw std::invalid_argument(fmt::format(
        "vision::RandAugment: magnitude is {}; it must be a bin in [0, num_magnitude_bins = {})", m,
        bins));
  }
}

std::vector<AugmentStep> RandAugment::sample(Generator& rng, Size image) const {
  std::vector<AugmentStep> steps;
  steps.reserve(static_cast<std::size_t>(num_ops));
  for (int i = 0; i < num_ops; ++i) {
    steps.push_back(draw(rng, magnitude, num_magnitude_bins, false, image));
  }
  return steps;
}

namespace detail {

void apply_augment(Image& image, Image& spare, const AugmentStep& step, Interpolation interpolation,
                   std::array<std::uint8_t, 3> fill) {
  const double m = step.magnitude;
  using namespace functional;
  switch (step.op) {
    case AugmentOp::kIdentity:
      return;
    case AugmentOp::kShearX:
      affine(image, 0.0, {0, 0}, 1.0, {std::atan(m) * kRadToDeg, 0.0}, interpolation, fill,
             Point{0, 0}, spare);
      break;
    case AugmentOp::kShearY:
      affine(image, 0.0, {0, 0}, 1.0, {0.0, std::atan(m) * kRadToDeg}, interpolation, fill,
             Point{0, 0}, spare);
      break;
    case AugmentOp::kTranslateX:
      affine(image, 0.0, {static_cast<int>(m), 0}, 1.0, {0.0, 0.0}, interpolation, fill,
             std::nullopt, spare);
      break;
    case AugmentOp::kTranslateY:
      affine(image, 0.0, {0, static_cast<int>(m)}, 1.0, {0.0, 0.0}, interpolation, fill,
             std::nullopt, spare);
      break;
    case AugmentOp::kRotate:
      rotate(image, m, interpolation, false, std::nullopt, fill, spare);
      break;
    case AugmentOp::kBrightness:
      return adjust_brightness(image, 1.0 + m);
    case AugmentOp::kColor:
      return adjust_saturation(image, 1.0 + m);
    case AugmentOp::kContrast:
      return adjust_contrast(image, 1.0 + m);
    case AugmentOp::kSharpness:
      return adjust_sharpness(image, 1.0 + m);
    case AugmentOp::kPosterize:
      return posterize(image, static_cast<int>(m));
    case AugmentOp::kSolarize:
      return solarize(image, m);
    case AugmentOp::kAutoContrast:
      return autocontrast(image);
    case AugmentOp::kEqualize:
      return equalize(image);
  }
  std::swap(image, spare);  // the geometric steps wrote spare
}

}  // namespace detail

namespace functional {

void apply_augment(Image& image, const AugmentStep& step, Interpolation interpolation,
                   std::array<std::uint8_t, 3> fill) {
  Image spare;
  detail::apply_augment(image, spare, step, interpolation, fill);
}

}  // namespace functional
}  // namespace stoker::vision
