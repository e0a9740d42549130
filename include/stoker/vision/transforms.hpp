// stoker::vision transforms, named and parameterised as torchvision.transforms names them
// (torchvision 0.14 on PIL images): Resize, CenterCrop, RandomResizedCrop, RandomCrop,
// RandomHorizontalFlip, RandomVerticalFlip, ColorJitter, Grayscale, RandomGrayscale,
// GaussianBlur, RandomRotation, TrivialAugmentWide, RandAugment, Normalize and RandomErasing.
// Each is a small value type; a Pipeline (stoker/vision/pipeline.hpp) composes them. The random
// ones draw from a Generator through sample(), a pure function that the Pipeline calls with
// sample_rng(); what sample() returns is the parameter of a deterministic function below
// (namespace functional), which is what the torchvision parity test compares.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "stoker/random.hpp"
#include "stoker/tensor.hpp"
#include "stoker/vision/image.hpp"

namespace stoker::vision {

// torchvision.transforms.InterpolationMode: Pillow's NEAREST, BILINEAR (a triangle filter whose
// support grows with the downscale factor: antialiased) and BICUBIC (a = -0.5).
enum class Interpolation : std::uint8_t { kNearest, kBilinear, kBicubic };

enum class Layout : std::uint8_t { kCHW, kHWC };  // of an image tensor

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

// What the transforms that happen or not share: a probability p, and the draw of whether they
// happen (torchvision's `torch.rand(1) < p`).
struct RandomChance {
  double p = 0.5;
  bool sample(Generator& rng) const noexcept { return rng.uniform() < p; }
};

// torchvision.transforms.RandomHorizontalFlip: mirrored with probability p.
struct RandomHorizontalFlip : RandomChance {
  explicit RandomHorizontalFlip(double p = 0.5);
};

// torchvision.transforms.RandomVerticalFlip: mirrored top-bottom with probability p.
struct RandomVerticalFlip : RandomChance {
  explicit RandomVerticalFlip(double p = 0.5);
};

// torchvision.transforms.Grayscale: Pillow's convert("L") (ITU-R 601-2 luma, rounded as
// Pillow rounds it), with 1 output channel (the tensor is [1, H, W]) or 3 equal ones. Throws
// std::invalid_argument for other counts.
struct Grayscale {
  explicit Grayscale(int num_output_channels = 1);
  int num_output_channels = 1;
};

// torchvision.transforms.RandomGrayscale: with probability p, Grayscale keeping the image's
// channel count (3 for a colour image; a grey one is left as it is).
struct RandomGrayscale : RandomChance {
  explicit RandomGrayscale(double p = 0.1);
};

// torchvision.transforms.GaussianBlur: torchvision's float32 Gaussian kernel of
// kernel_size = (x, y) (odd, positive) taps and a sigma uniform in [sigma.first,
// sigma.second] (> 0), convolved with the reflect-padded image and rounded to 8 bits, as
// torchvision does on the tensor of a PIL image. Throws std::invalid_argument for even or
// non-positive sizes and for sigmas <= 0 or out of order.
struct GaussianBlur {
  explicit GaussianBlur(int kernel_size, std::pair<double, double> sigma = {0.1, 2.0});
  GaussianBlur(int kernel_size, double sigma);
  GaussianBlur(std::pair<int, int> kernel_size, std::pair<double, double> sigma = {0.1, 2.0});
  // torchvision's GaussianBlur.get_params: the sigma of one draw.
  double sample(Generator& rng) const noexcept;

  int kernel_x = 0;  // taps along a row (torchvision's kernel_size[0])
  int kernel_y = 0;  // taps along a column (kernel_size[1])
  std::pair<double, double> sigma;
};

// A point in pixels, x to the right and y down: torchvision's `center` (x, y).
struct Point {
  double x = 0;
  double y = 0;
};

// torchvision.transforms.RandomRotation: Pillow's Image.rotate by an angle (degrees,
// counter-clockwise) uniform in `degrees` (a number d: [-d, d]), with NEAREST (the default),
// BILINEAR or BICUBIC sampling (Pillow's 2x2 / 4x4 affine filters, not Resize's), around
// `center` (default the image's centre), optionally `expand`ing the output to hold the whole
// rotated image; uncovered pixels are `fill`. Throws std::invalid_argument for a negative d
// or a range out of order.
struct RandomRotation {
  explicit RandomRotation(double degrees, Interpolation interpolation = Interpolation::kNearest,
                          bool expand = false, std::optional<Point> center = std::nullopt,
                          std::array<std::uint8_t, 3> fill = {0, 0, 0});
  RandomRotation(std::pair<double, double> degrees,
                 Interpolation interpolation = Interpolation::kNearest, bool expand = false,
                 std::optional<Point> center = std::nullopt,
                 std::array<std::uint8_t, 3> fill = {0, 0, 0});
  // torchvision's RandomRotation.get_params: the angle of one draw.
  double sample(Generator& rng) const noexcept;

  std::pair<double, double> degrees;
  Interpolation interpolation = Interpolation::kNearest;
  bool expand = false;
  std::optional<Point> center;
  std::array<std::uint8_t, 3> fill{};
};

// The operations of TrivialAugmentWide and RandAugment, in torchvision's order (the index an
// op is drawn by).
enum class AugmentOp : std::uint8_t {
  kIdentity,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
};
inline constexpr int kAugmentOps = 14;
std::string_view augment_op_name(AugmentOp op) noexcept;  // torchvision's: "ShearX", ...

// One operation with its magnitude (signed where torchvision signs it): what
// functional::apply_augment applies. `bin` is the magnitude bin it came from.
struct AugmentStep {
  AugmentOp op = AugmentOp::kIdentity;
  double magnitude = 0;
  int bin = 0;
  friend bool operator==(const AugmentStep&, const AugmentStep&) = default;
};

// What TrivialAugmentWide and RandAugment share: the number of magnitude bins (at least 2),
// and the sampling (NEAREST by default) and fill of their geometric ops' uncovered pixels.
struct AugmentSpace {
  int num_magnitude_bins = 31;
  Interpolation interpolation = Interpolation::kNearest;
  std::array<std::uint8_t, 3> fill{};
};

// torchvision.transforms.TrivialAugmentWide: one op drawn uniformly from the 14, a magnitude
// bin drawn uniformly from num_magnitude_bins (the "wide" ranges: shear 0.99, translate 32
// pixels, rotate 135 degrees, enhance factors 1 +- 0.99, posterize 8..2 bits, solarize
// 255..0), negated with probability 1/2 for signed ops. Throws std::invalid_argument for
// num_magnitude_bins < 2.
struct TrivialAugmentWide : AugmentSpace {
  explicit TrivialAugmentWide(int num_magnitude_bins = 31,
                              Interpolation interpolation = Interpolation::kNearest,
                              std::array<std::uint8_t, 3> fill = {0, 0, 0});
  // torchvision's draws for an image of this size (one step).
  std::vector<AugmentStep> sample(Generator& rng, Size image) const;
};

// torchvision.transforms.RandAugment: num_ops ops, each drawn uniformly from the 14, all at
// magnitude bin `magnitude` of num_magnitude_bins (RandAugment's ranges: shear 0.3,
// translate 150/331 of the image, rotate 30 degrees, enhance factors 1 +- 0.9, posterize 8..4
// bits, solarize 255..0), signed ops negated with probability 1/2. Throws
// std::invalid_argument for num_ops < 0, num_magnitude_bins < 2 or a magnitude outside
// [0, num_magnitude_bins).
struct RandAugment : AugmentSpace {
  explicit RandAugment(int num_ops = 2, int magnitude = 9, int num_magnitude_bins = 31,
                       Interpolation interpolation = Interpolation::kNearest,
                       std::array<std::uint8_t, 3> fill = {0, 0, 0});
  std::vector<AugmentStep> sample(Generator& rng, Size image) const;

  int num_ops = 2;
  int magnitude = 9;
};

// The magnitude of bin `bin` of `op` (unsigned), as torchvision's _augmentation_space holds
// it: float32 values of torch.linspace, read back as double. `wide`: TrivialAugmentWide's
// space, else RandAugment's (whose translations scale with `image`). 0 for the ops without
// magnitudes.
double augment_magnitude(AugmentOp op, int bin, int num_bins, bool wide, Size image) noexcept;
// Whether torchvision negates the op's magnitude with probability 1/2.
bool augment_op_signed(AugmentOp op) noexcept;

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
  // One mean and std for every channel (torchvision's Normalize([m], [s])): the form a grey
  // output (Grayscale(1)) takes.
  Normalize(float mean, float std);
  std::array<float, 3> mean;
  std::array<float, 3> std;
};

// torchvision.transforms.RandomErasing, on the output tensor (as torchvision's works on the
// tensor after ToTensor): with probability p, a box of area (a fraction uniform in `scale` of
// the image) and aspect ratio (height / width, log-uniform in `ratio`), 10 attempts (none
// fitting: nothing erased), set to `value` per channel, or to standard normal values with
// RandomErasing::kRandom (torchvision's value="random"). Values are in the output's units:
// ToTensor's [0, 1] for floating-point outputs (normalised when a Normalize follows), pixel
// levels [0, 255] for uint8 (truncated). Put it after the image transforms: only Normalize
// or another RandomErasing may follow it. Throws std::invalid_argument for p outside [0, 1]
// or a scale outside [0, 1].
struct RandomErasing {
  struct Random {};
  static constexpr Random kRandom{};

  explicit RandomErasing(double p = 0.5, std::pair<double, double> scale = {0.02, 0.33},
                         std::pair<double, double> ratio = {0.3, 3.3}, float value = 0.0f);
  RandomErasing(double p, std::pair<double, double> scale, std::pair<double, double> ratio,
                std::array<float, 3> value);
  RandomErasing(double p, std::pair<double, double> scale, std::pair<double, double> ratio, Random);

  // What one draw decided: whether to erase, the box (x, y: its left and top), and for
  // kRandom its channels x height x width normal values.
  struct Params {
    bool erase = false;
    Rect box;
    std::vector<float> values;
  };
  // torchvision's RandomErasing.forward draws for an image of this size and channel count.
  Params sample(Generator& rng, Size image, int channels) const;

  double p = 0.5;
  std::pair<double, double> scale;
  std::pair<double, double> ratio;
  std::array<float, 3> value{};
  bool random_values = false;
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
void vflip(Image& image);
// F.rgb_to_grayscale: Pillow's convert("L"), replicated to 3 channels when asked. `in` is RGB
// or grey.
void rgb_to_grayscale(const Image& in, int num_output_channels, Image& out);
// F.gaussian_blur(img, [kernel_x, kernel_y], [sigma_x, sigma_y]) on an RGB or grey image.
// Throws std::invalid_argument for an even or non-positive size, a sigma <= 0, or an image
// whose side is not longer than half the kernel (torch's reflect padding needs it).
void gaussian_blur(const Image& in, int kernel_x, int kernel_y, double sigma_x, double sigma_y,
                   Image& out);
// F.rotate(img, angle, interpolation, expand, center, fill): Pillow's Image.rotate.
void rotate(const Image& in, double angle, Interpolation interpolation, bool expand,
            std::optional<Point> center, std::array<std::uint8_t, 3> fill, Image& out);
// F.affine(img, angle, translate, scale, shear, interpolation, fill, center): Pillow's AFFINE
// transform by torchvision's inverse matrix (shear in degrees, (x, y)). Throws
// std::invalid_argument for scale <= 0.
void affine(const Image& in, double angle, std::pair<int, int> translate, double scale,
            std::pair<double, double> shear, Interpolation interpolation,
            std::array<std::uint8_t, 3> fill, std::optional<Point> center, Image& out);
// ImageEnhance.Sharpness: blended with Pillow's SMOOTH filter of the image.
void adjust_sharpness(Image& image, double factor);
// ImageOps.posterize (bits in [0, 8]), solarize (values >= threshold inverted), autocontrast
// (each channel stretched to 0..255), equalize (each channel's histogram equalised).
void posterize(Image& image, int bits);
void solarize(Image& image, double threshold);
void autocontrast(Image& image);
void equalize(Image& image);
// torchvision's _apply_op: one TrivialAugmentWide / RandAugment step on an RGB or grey image.
void apply_augment(Image& image, const AugmentStep& step, Interpolation interpolation,
                   std::array<std::uint8_t, 3> fill);
// F.erase on a tensor image ([C, H, W], or [H, W, C] with kHWC) of uint8, float32, bfloat16 or
// float16: the box set to `values` (1 value, one per channel, or C x h x w of them, channel
// first), converted to the tensor's dtype (uint8: truncated). Throws std::invalid_argument for
// a box outside the image or a count of values that fits none of those.
void erase(Tensor& image, Layout layout, Rect box, std::span<const float> values);
// ImageEnhance: Brightness, Contrast, Color (saturation); adjust_hue through Pillow's HSV.
void adjust_brightness(Image& image, double factor);
void adjust_contrast(Image& image, double factor);
void adjust_saturation(Image& image, double factor);
void adjust_hue(Image& image, double hue_factor);  // hue_factor in [-0.5, 0.5]
void color_jitter(Image& image, const ColorJitter::Params& params);

}  // namespace functional

}  // namespace stoker::vision
