// Pillow's resampling, written here (private to libstoker) because no Debian library offers
// its exact arithmetic, and torchvision's Resize on PIL images is Pillow's resize: a separable
// convolution, horizontal pass then vertical, whose filter support grows with the downscale
// factor (antialiasing), with double-precision weights normalised per output pixel, turned
// into 22-bit fixed point, and rounding and clamping to 8 bits after each pass. Only the
// output pixels asked for are computed, from only the input rows and columns they need.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "stoker/vision/transforms.hpp"

namespace stoker::vision::detail {

inline constexpr int kWeightBits = 22;  // Pillow's PRECISION_BITS for 8-bit images

// The weights of one axis: output pixel i (of `count`) is the weighted sum of input pixels
// [start[i], start[i] + length[i]) with weights[i * taps ...].
struct Axis {
  int count = 0;
  int taps = 0;
  bool identity = false;  // output pixel i is input pixel start[i]: no pass needed
  std::vector<int> start;
  std::vector<int> length;
  std::vector<std::int32_t> weights;
  int first_input() const noexcept { return count == 0 ? 0 : start.front(); }
  int end_input() const noexcept { return count == 0 ? 0 : start.back() + length.back(); }
};

// Output pixels [first, first + count) of Pillow's resize of the span [in0, in1) of an axis of
// in_size input pixels to out_size pixels (in0 = 0, in1 = in_size for a whole image or crop).
void pillow_axis(Axis& axis, int in_size, double in0, double in1, int out_size,
                 Interpolation interpolation, int first, int count);
// Output pixel i is input pixel offset + i.
void identity_axis(Axis& axis, int offset, int count);

// 8-bit pixels: rows of width x channels bytes, `stride` bytes apart; memory is readable up to
// `end` (at least to the end of the last row; vectorised loads read a little past a row).
struct View {
  const std::uint8_t* data = nullptr;
  std::size_t stride = 0;
  int width = 0;
  int height = 0;
  int channels = 0;
  const std::uint8_t* end = nullptr;
};
// The view of an Image's pixels.
View view_of(const Image& image) noexcept;

// Receives output row `row` (columns.count x channels bytes).
using RowSink = void (*)(void* context, int row, const std::uint8_t* pixels);

// Resamples `src` with `columns` (horizontal) then `rows` (vertical); calls sink for each of
// rows.count output rows, in order. The axes' input ranges must lie inside src.
void resample(const View& src, const Axis& columns, const Axis& rows, RowSink sink, void* context);

// The input index that padding maps output index i (of an axis of n pixels) to, as numpy.pad
// (torchvision pads PIL images with it): kEdge repeats the edge, kReflect mirrors without
// repeating it, kSymmetric mirrors repeating it; -1 for kConstant outside [0, n).
int pad_index(int i, int n, PaddingMode mode) noexcept;

}  // namespace stoker::vision::detail
