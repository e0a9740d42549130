// The output conversion of a Pipeline (see output.hpp): rows of RGB pixels into an Image or
// straight into the sample's tensor, with the dtype conversion done by per-channel tables that
// hold exactly what torch computes for each of the 256 pixel values.
#include "vision/output.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "vision/plan.hpp"
#include "vision/resample_simd.hpp"

namespace stoker::vision::detail {

std::uint16_t to_bfloat16(float v) noexcept {
  const auto bits = std::bit_cast<std::uint32_t>(v);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);
  const std::uint32_t bias = 0x7fffu + ((bits >> 16) & 1u);  // ties to even
  return static_cast<std::uint16_t>((bits + bias) >> 16);
}

std::uint16_t to_float16(float v) noexcept {
  const auto bits = std::bit_cast<std::uint32_t>(v);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity, NaN
    return static_cast<std::uint16_t>(sign | (magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u));
  }
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow
  if (magnitude < 0x38800000u) {
    // Below float16's smallest normal: adding 0.5 leaves the subnormal's bits at the bottom
    // of the mantissa, rounded to nearest even by the addition itself.
    const float shifted = std::bit_cast<float>(magnitude) + 0.5f;
    return static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(shifted) - 0x3f000000u));
  }
  // Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even.
  const std::uint32_t odd = (magnitude >> 13) & 1u;
  const std::uint32_t rounded = magnitude + 0xc8000fffu + odd;  // + ((15 - 127) << 23) + 0xfff
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
}

std::shared_ptr<const OutputTable> make_output_table(DType dtype, Layout layout,
                                                     const Normalize* normalize) {
  auto table = std::make_shared<OutputTable>();
  table->dtype = dtype;
  table->layout = layout;
  if (normalize != nullptr) {
    table->mean = normalize->mean;
    table->std = normalize->std;
  }
  for (std::size_t c = 0; c < 3; ++c) {
    for (int p = 0; p < 256; ++p) {
      // ToTensor: img.float().div(255); Normalize: sub_(mean).div_(std), all in float32.
      float v = static_cast<float>(p) / 255.0f;
      if (normalize != nullptr) v = (v - normalize->mean[c]) / normalize->std[c];
      table->f32[c][static_cast<std::size_t>(p)] = v;
      table->f16[c][static_cast<std::size_t>(p)] =
          dtype == DType::kBFloat16 ? to_bfloat16(v) : to_float16(v);
    }
  }
  return table;
}

namespace {

bool whole(const Placement& at) {
  return at.valid.x == 0 && at.valid.y == 0 && at.valid.width == at.width &&
         at.valid.height == at.height;
}

// Output column of the valid region's pixel j.
inline int column(const Placement& at, int j) {
  const int x = at.valid.x + j;
  return at.flip ? at.width - 1 - x : x;
}

// Output row of the valid region's row r.
inline int output_row(const Placement& at, int r) {
  const int y = at.valid.y + r;
  return at.vflip ? at.height - 1 - y : y;
}

}  // namespace

void begin(ImageSink& sink) {
  const Placement& at = sink.at;
  const auto c = static_cast<std::size_t>(at.channels);
  sink.out->reset(at.width, at.height, at.channels);
  if (whole(at)) return;
  std::uint8_t* p = sink.out->pixels.data();
  const std::size_t n = static_cast<std::size_t>(at.width) * static_cast<std::size_t>(at.height);
  for (std::size_t i = 0; i < n; ++i, p += c) std::memcpy(p, at.fill.data(), c);
}

void image_row(void* context, int row, const std::uint8_t* pixels) {
  auto& sink = *static_cast<ImageSink*>(context);
  const Placement& at = sink.at;
  const auto c = static_cast<std::size_t>(at.channels);
  std::uint8_t* out = sink.out->row(output_row(at, row));
  if (!at.flip) {
    std::memcpy(out + static_cast<std::size_t>(at.valid.x) * c, pixels,
                static_cast<std::size_t>(at.valid.width) * c);
    return;
  }
  for (int j = 0; j < at.valid.width; ++j) {
    std::memcpy(out + static_cast<std::size_t>(column(at, j)) * c,
                pixels + c * static_cast<std::size_t>(j), c);
  }
}

namespace {

template <class T>
T element(const OutputTable& table, std::size_t channel, std::uint8_t p) {
  if constexpr (std::is_same_v<T, std::uint8_t>) {
    return p;
  } else if constexpr (std::is_same_v<T, float>) {
    return table.f32[channel][p];
  } else {
    return table.f16[channel][p];
  }
}

// One valid row into the tensor of T elements.
template <class T>
void put_row(const TensorSink& sink, int row, const std::uint8_t* pixels) {
  const Placement& at = sink.at;
  const OutputTable& table = *sink.table;
  T* base = reinterpret_cast<T*>(sink.data);
  const int y = output_row(at, row);
  const std::size_t w = static_cast<std::size_t>(at.width);
  const int n = at.valid.width;
  const auto channels = static_cast<std::size_t>(at.channels);
  if (table.layout == Layout::kHWC) {
    T* out = base + static_cast<std::size_t>(y) * w * channels;
    for (int j = 0; j < n; ++j) {
      T* o = out + static_cast<std::size_t>(column(at, j)) * channels;
      const std::uint8_t* p = pixels + channels * static_cast<std::size_t>(j);
      for (std::size_t c = 0; c < channels; ++c) o[c] = element<T>(table, c, p[c]);
    }
    return;
  }
  const std::size_t plane = w * static_cast<std::size_t>(at.height);
  int done = 0;  // pixels already written (from the left of the valid part)
  if constexpr (std::is_same_v<T, std::uint8_t>) {
    if (channels == 3 && have_avx2()) {
      // Mirrored, the valid part's pixel j goes to column width - 1 - (valid.x + j): the
      // block [width - valid.x - n, width - valid.x) reversed.
      const std::size_t first = at.flip ? static_cast<std::size_t>(at.width - at.valid.x - n)
                                        : static_cast<std::size_t>(at.valid.x);
      std::uint8_t* planes[3];
      for (std::size_t c = 0; c < 3; ++c)
        planes[c] = base + c * plane + static_cast<std::size_t>(y) * w + first;
      done = deinterleave_rgb_avx2(pixels, n, planes, at.flip);
    }
  }
  if (channels == 1) {
    T* out = base + static_cast<std::size_t>(y) * w;
    if (at.flip) {
      T* o = out + (at.width - 1 - at.valid.x);
      for (int j = 0; j < n; ++j) o[-j] = element<T>(table, 0, pixels[j]);
    } else {
      T* o = out + at.valid.x;
      for (int j = 0; j < n; ++j) o[j] = element<T>(table, 0, pixels[j]);
    }
    return;
  }
  for (std::size_t c = 0; c < 3; ++c) {
    T* out = base + c * plane + static_cast<std::size_t>(y) * w;
    const std::uint8_t* in = pixels + c;
    if (at.flip) {
      T* o = out + (at.width - 1 - at.valid.x);
      for (int j = done; j < n; ++j) o[-j] = element<T>(table, c, in[3 * j]);
    } else {
      T* o = out + at.valid.x;
      for (int j = done; j < n; ++j) o[j] = element<T>(table, c, in[3 * j]);
    }
  }
}

template <class T>
void put_fill(const TensorSink& sink) {
  const Placement& at = sink.at;
  const OutputTable& table = *sink.table;
  T* base = reinterpret_cast<T*>(sink.data);
  const std::size_t plane =
      static_cast<std::size_t>(at.width) * static_cast<std::size_t>(at.height);
  const auto channels = static_cast<std::size_t>(at.channels);
  for (std::size_t c = 0; c < channels; ++c) {
    const T v = element<T>(table, c, at.fill[c]);
    if (table.layout == Layout::kHWC) {
      for (std::size_t i = 0; i < plane; ++i) base[i * channels + c] = v;
    } else {
      std::fill_n(base + c * plane, plane, v);
    }
  }
}

}  // namespace

void begin(TensorSink& sink) {
  if (whole(sink.at)) return;
  switch (sink.table->dtype) {
    case DType::kUInt8:
      return put_fill<std::uint8_t>(sink);
    case DType::kFloat32:
      return put_fill<float>(sink);
    default:
      return put_fill<std::uint16_t>(sink);
  }
}

void tensor_row(void* context, int row, const std::uint8_t* pixels) {
  const auto& sink = *static_cast<TensorSink*>(context);
  switch (sink.table->dtype) {
    case DType::kUInt8:
      return put_row<std::uint8_t>(sink, row, pixels);
    case DType::kFloat32:
      return put_row<float>(sink, row, pixels);
    default:
      return put_row<std::uint16_t>(sink, row, pixels);
  }
}

namespace {

// A float value as the tensor's dtype stores it; uint8 as torch's cast does on x86: truncated
// toward zero, then taken modulo 256.
template <class T>
T stored(DType dtype, float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, std::uint16_t>) {
    return dtype == DType::kBFloat16 ? to_bfloat16(v) : to_float16(v);
  } else {
    const float t = std::trunc(std::clamp(v, -1e18f, 1e18f));
    return static_cast<std::uint8_t>(static_cast<std::int64_t>(t));
  }
}

// Writes `box` of a [C, H, W] (kCHW) or [H, W, C] tensor from `values` (1, C, or C x h x w,
// channel first), normalised by `table` when given.
template <class T>
void write_box(Tensor& tensor, Layout layout, const Rect& box, std::span<const float> values,
               const OutputTable* normalise) {
  const Shape& shape = tensor.shape();
  const bool chw = layout == Layout::kCHW;
  const auto channels = static_cast<std::size_t>(chw ? shape[0] : shape[2]);
  const auto height = static_cast<std::size_t>(chw ? shape[1] : shape[0]);
  const auto width = static_cast<std::size_t>(chw ? shape[2] : shape[1]);
  T* data = reinterpret_cast<T*>(tensor.raw_data());
  const bool per_pixel = values.size() > channels;
  for (std::size_t c = 0; c < channels; ++c) {
    for (int y = 0; y < box.height; ++y) {
      for (int x = 0; x < box.width; ++x) {
        const std::size_t k =
            per_pixel ? (c * static_cast<std::size_t>(box.height) + static_cast<std::size_t>(y)) *
                                static_cast<std::size_t>(box.width) +
                            static_cast<std::size_t>(x)
                      : (values.size() == 1 ? 0 : c);
        float v = values[k];
        if (normalise != nullptr) v = (v - normalise->mean[c]) / normalise->std[c];
        const std::size_t yy = static_cast<std::size_t>(box.y + y);
        const std::size_t xx = static_cast<std::size_t>(box.x + x);
        const std::size_t at =
            chw ? (c * height + yy) * width + xx : (yy * width + xx) * channels + c;
        data[at] = stored<T>(tensor.dtype(), v);
      }
    }
  }
}

void write_box_any(Tensor& tensor, Layout layout, const Rect& box, std::span<const float> values,
                   const OutputTable* normalise) {
  switch (tensor.dtype()) {
    case DType::kUInt8:
      return write_box<std::uint8_t>(tensor, layout, box, values, normalise);
    case DType::kFloat32:
      return write_box<float>(tensor, layout, box, values, normalise);
    default:
      return write_box<std::uint16_t>(tensor, layout, box, values, normalise);
  }
}

}  // namespace

void erase_output(Tensor& tensor, const OutputTable& table, const Erasure& erasure) {
  write_box_any(tensor, table.layout, erasure.box, erasure.values,
                erasure.normalised ? &table : nullptr);
}

}  // namespace stoker::vision::detail

namespace stoker::vision::functional {

void erase(Tensor& image, Layout layout, Rect box, std::span<const float> values) {
  const DType dtype = image.dtype();
  if (image.dim() != 3 || (dtype != DType::kUInt8 && dtype != DType::kFloat32 &&
                           dtype != DType::kBFloat16 && dtype != DType::kFloat16)) {
    throw std::invalid_argument(fmt::format(
        "vision::functional::erase: the tensor has {} dimensions of {}; it takes an image "
        "tensor ([C, H, W] or [H, W, C]) of uint8, float32, bfloat16 or float16",
        image.dim(), dtype_name(dtype)));
  }
  const Shape& shape = image.shape();
  const bool chw = layout == Layout::kCHW;
  const auto channels = static_cast<std::int64_t>(chw ? shape[0] : shape[2]);
  const auto height = static_cast<std::int64_t>(chw ? shape[1] : shape[0]);
  const auto width = static_cast<std::int64_t>(chw ? shape[2] : shape[1]);
  if (box.x < 0 || box.y < 0 || box.width < 0 || box.height < 0 ||
      std::int64_t{box.x} + box.width > width || std::int64_t{box.y} + box.height > height) {
    throw std::invalid_argument(fmt::format(
        "vision::functional::erase: the box ({}, {}, {} x {}) is not inside the {} x {} image "
        "(width x height)",
        box.x, box.y, box.width, box.height, width, height));
  }
  const auto n = static_cast<std::int64_t>(values.size());
  if (n != 1 && n != channels && n != channels * box.height * box.width) {
    throw std::invalid_argument(fmt::format(
        "vision::functional::erase: {} values for a {}-channel box of {} x {}; give 1, {} (one "
        "per channel) or {} (channels x height x width)",
        n, channels, box.width, box.height, channels, channels * box.height * box.width));
  }
  detail::write_box_any(image, layout, box, values, nullptr);
}

}  // namespace stoker::vision::functional
