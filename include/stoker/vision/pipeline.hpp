// stoker::vision::Pipeline: decode + transforms + the conversion to the sample's tensor, as
// torchvision's transforms.Compose([...]) after PIL's Image.open(f).convert("RGB"). Used inside
// a dataset's get(): randomness comes from sample_rng(), so augmentation is the same for any
// num_workers. Geometry is fused (crop box -> region decode -> resample only the output's
// pixels -> flip) and written straight into the output tensor.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "stoker/random.hpp"
#include "stoker/tensor.hpp"
#include "stoker/vision/image.hpp"
#include "stoker/vision/transforms.hpp"

namespace stoker::vision {

namespace detail {
struct OutputTable;
}

using Transform =
    std::variant<Resize, CenterCrop, RandomResizedCrop, RandomCrop, RandomHorizontalFlip,
                 ColorJitter, Normalize, RandomVerticalFlip, Grayscale, RandomGrayscale,
                 GaussianBlur, RandomRotation, TrivialAugmentWide, RandAugment, RandomErasing>;

enum class Mode : std::uint8_t {
  kExact,  // full-resolution pixels and Pillow's resampling: torchvision's output
  kFast,   // JPEG DCT scaling (1/2, 1/4, 1/8) where the region keeps the output's resolution
};

// What the random transforms of one run drew, in pipeline order (to replay it elsewhere, e.g.
// in torchvision's functional API).
struct Trace {
  Size decoded;             // the decoded image (full size)
  std::vector<Rect> boxes;  // RandomResizedCrop and RandomCrop boxes (RandomCrop: padded)
  std::vector<bool> flips;  // RandomHorizontalFlip
  std::vector<ColorJitter::Params> jitters;
  std::vector<bool> vflips;                        // RandomVerticalFlip
  std::vector<bool> grays;                         // RandomGrayscale
  std::vector<double> sigmas;                      // GaussianBlur
  std::vector<double> angles;                      // RandomRotation
  std::vector<std::vector<AugmentStep>> augments;  // TrivialAugmentWide, RandAugment
  std::vector<RandomErasing::Params> erasures;     // RandomErasing
};

class Pipeline {
 public:
  // No transforms: the decoded RGB image as uint8 CHW, exact mode.
  Pipeline() = default;
  // transforms.Compose([...]). Throws std::invalid_argument for an order torchvision would
  // reject: an image transform after Normalize or RandomErasing (which work on the tensor), a
  // second Normalize, a Normalize with three different values on a grey (Grayscale(1)) output.
  Pipeline(std::initializer_list<Transform> transforms);

  // Builders; each returns the pipeline. Throw std::invalid_argument as the constructor does.
  Pipeline& then(Transform transform) &;
  Pipeline then(Transform transform) &&;
  Pipeline& mode(Mode mode) &;
  Pipeline mode(Mode mode) &&;
  // The tensor's dtype (kUInt8, kFloat32, kBFloat16, kFloat16) and layout. Floating-point
  // values are pixel / 255 (ToTensor), normalised when the pipeline has a Normalize. Without
  // this call: uint8, or float32 when there is a Normalize. Throws std::invalid_argument for
  // other dtypes, or uint8 with Normalize.
  Pipeline& output(DType dtype, Layout layout = Layout::kCHW) &;
  Pipeline output(DType dtype, Layout layout = Layout::kCHW) &&;

  Mode mode() const noexcept { return mode_; }
  DType dtype() const noexcept;
  Layout layout() const noexcept { return layout_; }
  const std::vector<Transform>& transforms() const noexcept { return transforms_; }
  // The output's (height, width) when it does not depend on the image (the last geometric
  // transform fixes it), else empty.
  std::optional<Size> output_size() const noexcept;
  // The output's channels: 1 after Grayscale(num_output_channels = 1), else 3.
  int channels() const noexcept;
  bool is_random() const noexcept;  // draws from a generator
  // "Resize(256) -> CenterCrop((224, 224)) -> uint8 CHW, exact"
  std::string to_string() const;

  // Decodes `encoded` (JPEG, PNG or WebP) and applies the pipeline: a [C, H, W] (or [H, W, C])
  // tensor, C = channels(). Inside a dataset's get() (either process); random transforms draw from
  // sample_rng() (std::logic_error outside get()). Throws DecodeError naming `source` (the
  // file or record) and the decoder's reason.
  Tensor operator()(std::span<const std::uint8_t> encoded, std::string_view source = {}) const;
  // An image already decoded (RGB or grey, full size).
  Tensor operator()(const Image& image, std::string_view source = {}) const;

  // The same with an explicit generator (any thread or process), recording the draws in
  // `trace` when given.
  Tensor run(std::span<const std::uint8_t> encoded, Generator& rng, std::string_view source = {},
             Trace* trace = nullptr) const;
  Tensor run(const Image& image, Generator& rng, std::string_view source = {},
             Trace* trace = nullptr) const;

 private:
  void add(Transform transform);
  void set_output(DType dtype, Layout layout);
  const Normalize* normalize() const noexcept;  // the pipeline's Normalize, if any
  const detail::OutputTable& table() const;

  std::vector<Transform> transforms_;
  Mode mode_ = Mode::kExact;
  std::optional<DType> dtype_;
  Layout layout_ = Layout::kCHW;
  std::shared_ptr<const detail::OutputTable> table_;  // rebuilt by the builders; copies share it
};

}  // namespace stoker::vision
