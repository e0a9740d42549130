// Where a stage's rows go (private to libstoker): into an RGB or grey Image (a stage that feeds
// another) or into the output tensor, converted to its dtype and layout on the way (uint8;
// float32 as ToTensor + Normalize compute it; bfloat16 and float16 rounded to nearest even from
// that float32, as torch's .to() rounds). Both place the rows inside the output window,
// mirrored when flipped, and fill what lies outside the resampled region (padding). Then
// RandomErasing's boxes are written into the tensor.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "stoker/vision/pipeline.hpp"

namespace stoker::vision::detail {

// Per-channel lookup from pixel value to the output element.
struct OutputTable {
  DType dtype = DType::kUInt8;
  Layout layout = Layout::kCHW;
  std::array<std::array<float, 256>, 3> f32{};
  std::array<std::array<std::uint16_t, 256>, 3> f16{};  // bfloat16 or float16 bits
  std::array<float, 3> mean{0.0f, 0.0f, 0.0f};          // Normalize's (else 0 and 1)
  std::array<float, 3> std{1.0f, 1.0f, 1.0f};
};
// normalize: nullptr for plain pixel / 255.
std::shared_ptr<const OutputTable> make_output_table(DType dtype, Layout layout,
                                                     const Normalize* normalize);

std::uint16_t to_bfloat16(float v) noexcept;
std::uint16_t to_float16(float v) noexcept;

// The output is width x height pixels of `channels` (3: RGB, 1: grey); the sink's rows fill
// `valid` (in output coordinates, before mirroring); everything else is `fill`.
struct Placement {
  int width = 0;
  int height = 0;
  int channels = 3;
  Rect valid;
  bool flip = false;
  bool vflip = false;
  std::array<std::uint8_t, 3> fill{0, 0, 0};
};

struct ImageSink {
  Image* out = nullptr;
  Placement at;
};
// Sizes out and writes the fill; then image_row receives the valid rows.
void begin(ImageSink& sink);
void image_row(void* sink, int row, const std::uint8_t* pixels);

struct TensorSink {
  std::byte* data = nullptr;
  const OutputTable* table = nullptr;
  Placement at;
};
void begin(TensorSink& sink);
void tensor_row(void* sink, int row, const std::uint8_t* pixels);

struct Erasure;
// A RandomErasing's box into the pipeline's output tensor (its values normalised first when
// the erasure comes before the Normalize).
void erase_output(Tensor& tensor, const OutputTable& table, const Erasure& erasure);

}  // namespace stoker::vision::detail
