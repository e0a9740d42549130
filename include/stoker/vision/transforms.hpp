// stoker::vision transforms, named and parameterised as torchvision.transforms names them
// (torchvision 0.14 on PIL images): Resize, CenterCrop, RandomResizedCrop, RandomCrop,
// RandomHorizontalFlip, ColorJitter, Normalize. Each is a small value type; a Pipeline
// (stoker/vision/pipeline.hpp) composes them. The random ones draw from a Generator through
// sample(), a pure function that the Pipeline calls with sample_rng().
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <utility>

#include "stoker/random.hpp"
#include "stoker/vision/image.hpp"

namespace stoker::vision {

// torchvision.transforms.InterpolationMode: Pillow's NEAREST, BILINEAR (a triangle filter whose
// support grows with the downscale factor: antialiased) and BICUBIC (a = -0.5).
enum class Interpolation : std::uint8_t { kNearest, kBilinear, kBicubic };

// A size in torchvision's order: (height, width).
struct Size {
  int height = 0;
  int width = 0;
  friend bool operator==(const Size&, const Size&) = default;
};

// torchvision.transforms.Resize. Resize(256): the shorter side becomes 256 and the longer
// int(256 * longer / shorter) (floor), then at most max_size (0: no cap) as torchvision caps
// it. Resize(Size{h, w}): exactly h x w. Throws std::invalid_argument for sizes < 1.
struct Resize {
  explicit Resize(int shorter_side, Interpolation interpolation = Interpolation::kBilinear,
                  int max_size = 0);
  explicit Resize(Size size, Interpolation interpolation = Interpolation::kBilinear);
  Size output_size(Size input) const noexcept;

  int shorter_side = 0;  // > 0: shorter-side mode; 0: `size` exactly
  Size size;
  int max_size = 0;
  Interpolation interpolation = Interpolation::kBilinear;
};

// torchvision.transforms.CenterCrop: the box at offsets int(round((side - crop) / 2.0)); an
// image smaller than the crop is padded with zeros first, as torchvision pads it.
struct CenterCrop {
  explicit CenterCrop(int side);
  explicit CenterCrop(Size size);
  // The crop box in the input's coordinates (negative or beyond the input where it pads).
  Rect box(Size input) const noexcept;

  Size size;
};

// torchvision.transforms.RandomResizedCrop: a box of random area (a fraction uniform in
// `scale`) and aspect ratio (log-uniform in `ratio`), 10 attempts, then torchvision's central
// fallback; the box is resized to `size`.
struct RandomResizedCrop {
  explicit RandomResizedCrop(int side, std::pair<double, double> scale = {0.08, 1.0},
                             std::pair<double, double> ratio = {3.0 / 4.0, 4.0 / 3.0},
                             Interpolation interpolation = Interpolation::kBilinear);
  RandomResizedCrop(Size size, std::pair<double, double> scale = {0.08, 1.0},
                    std::pair<double, double> ratio = {3.0 / 4.0, 4.0 / 3.0},
                    Interpolation interpolation = Interpolation::kBilinear);
  // torchvision's RandomResizedCrop.get_params, drawing from `rng`. Pure; never blocks.
  Rect sample(Generator& rng, Size input) const noexcept;

  Size size;
  std::pair<double, double> scale;
  std::pair<double, double> ratio;
  Interpolation interpolation = Interpolation::kBilinear;
};

// torchvision's padding modes (transforms.Pad / RandomCrop's padding_mode).
enum class PaddingMode : std::uint8_t { kConstant, kEdge, kReflect, kSymmetric };

struct Padding {
  Padding() = default;
  Padding(int all) : left(all), top(all), right(all), bottom(all) {}  // NOLINT: as torchvision
  Padding(int left_right, int top_bottom)
      : left(left_right), top(top_bottom), right(left_right), bottom(top_bottom) {}
  Padding(int l, int t, int r, int b) : left(l), top(t), right(r), bottom(b) {}
  int left = 0;
  int top = 0;
  int right = 0;
  int bottom = 0;
};

// torchvision.transforms.RandomCrop: pad (padding, then pad_if_needed up to the crop size),
// then a box at a uniformly random offset. torchvision pads twice: `padding` first, then the
// shortfall on the padded image, and with kReflect or kSymmetric reflecting a padded image is
// not one larger reflection; the Pipeline pads the same two times.
struct RandomCrop {
  explicit RandomCrop(int side, Padding padding = {}, bool pad_if_needed = false,
                      std::array<std::uint8_t, 3> fill = {0, 0, 0},
                      PaddingMode padding_mode = PaddingMode::kConstant);
  RandomCrop(Size size, Padding padding = {}, bool pad_if_needed = false,
             std::array<std::uint8_t, 3> fill = {0, 0, 0},
             PaddingMode padding_mode = PaddingMode::kConstant);
  // The padding torchvision applies to an input of this size (padding plus pad_if_needed).
  Padding total_padding(Size input) const noexcept;
  // pad_if_needed's part of it: what is padded, on each side, to the image already padded by
  // `padding` (zero without pad_if_needed or when the crop fits).
  Padding shortfall_padding(Size input) const noexcept;
  // torchvision's RandomCrop.get_params on the padded input: the box in padded coordinates.
  // Throws std::invalid_argument when the padded input is smaller than the crop.
  Rect sample(Generator& rng, Size padded) const;

  Size size;
  Padding padding;
  bool pad_if_needed = false;
  std::array<std::uint8_t, 3> fill{};
  PaddingMode padding_mode = PaddingMode::kConstant;
};

// torchvision.transforms.RandomHorizontalFlip: mirrored with probability p.
struct RandomHorizontalFlip {
  explicit RandomHorizontalFlip(double p = 0.5);
  bool sample(Generator& rng) const noexcept { return rng.uniform() < p; }
  double p = 0.5;
};

// torchvision.transforms.ColorJitter on PIL images (ImageEnhance): brightness, contrast and
// saturation factors uniform in [max(0, 1 - v), 1 + v] (or an explicit range), hue uniform in
// [-h, h] (h <= 0.5), applied in a random order. 0 leaves that adjustment out.
struct ColorJitter {
  using Range = std::pair<double, double>;
  explicit ColorJitter(double brightness = 0, double contrast = 0, double saturation = 0,
                       double hue = 0);
  ColorJitter(Range brightness, Range contrast, Range saturation, Range hue);

  // What one draw decided: the order of the four adjustments (0 brightness, 1 contrast,
  // 2 saturation, 3 hue; torch.randperm(4)) and the factors of those enabled.
  struct Params {
    std::array<std::uint8_t, 4> order{0, 1, 2, 3};
    std::optional<double> brightness;
    std::optional<double> contrast;
    std::optional<double> saturation;
    std::optional<double> hue;
  };
  Params sample(Generator& rng) const noexcept;

  std::optional<Range> brightness;
  std::optional<Range> contrast;
  std::optional<Range> saturation;
  std::optional<Range> hue;
};

// torchvision.transforms.ToTensor + Normalize: value = (pixel / 255 - mean) / std per channel,
// in float32 as torch computes it. Makes the pipeline's output floating point.
struct Normalize {
  Normalize(std::array<float, 3> mean, std::array<float, 3> std);
  std::array<float, 3> mean;
  std::array<float, 3> std;
};

inline constexpr std::array<float, 3> kImageNetMean{0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> kImageNetStd{0.229f, 0.224f, 0.225f};

// torchvision.transforms.functional on uint8 images (RGB or grey), for code that has its own
// random parameters; the Pipeline runs the same code. Either process; none blocks.
namespace functional {

// F.resize(img, [h, w]): Pillow's resample of the whole image.
void resize(const Image& in, Size size, Interpolation interpolation, Image& out);
// F.resized_crop(img, top, left, h, w, size): the box (inside the image) resampled to size.
void resized_crop(const Image& in, Rect box, Size size, Interpolation interpolation, Image& out);
// F.crop / F.pad: the box; where it lies outside the image, padded by `mode` (`fill` for
// kConstant).
void crop(const Image& in, Rect box, Image& out, std::array<std::uint8_t, 3> fill = {0, 0, 0},
          PaddingMode mode = PaddingMode::kConstant);
void hflip(Image& image);
// ImageEnhance: Brightness, Contrast, Color (saturation); adjust_hue through Pillow's HSV.
void adjust_brightness(Image& image, double factor);
void adjust_contrast(Image& image, double factor);
void adjust_saturation(Image& image, double factor);
void adjust_hue(Image& image, double hue_factor);  // hue_factor in [-0.5, 0.5]
void color_jitter(Image& image, const ColorJitter::Params& params);

}  // namespace functional

}  // namespace stoker::vision
