// The output conversion of a Pipeline (see output.hpp): rows of RGB pixels into an Image or
// straight into the sample's tensor, with the dtype conversion done by per-channel tables that
// hold exactly what torch computes for each of the 256 pixel values.
#include "vision/output.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

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

}  // namespace

void begin(ImageSink& sink) {
  const Placement& at = sink.at;
  sink.out->reset(at.width, at.height, 3);
  if (whole(at)) return;
  std::uint8_t* p = sink.out->pixels.data();
  const std::size_t n = static_cast<std::size_t>(at.width) * static_cast<std::size_t>(at.height);
  for (std::size_t i = 0; i < n; ++i, p += 3) std::memcpy(p, at.fill.data(), 3);
}

void image_row(void* context, int row, const std::uint8_t* pixels) {
  auto& sink = *static_cast<ImageSink*>(context);
  const Placement& at = sink.at;
  std::uint8_t* out = sink.out->row(at.valid.y + row);
  if (!at.flip) {
    std::memcpy(out + static_cast<std::size_t>(at.valid.x) * 3, pixels,
                static_cast<std::size_t>(at.valid.width) * 3);
    return;
  }
  for (int j = 0; j < at.valid.width; ++j) {
    std::memcpy(out + static_cast<std::size_t>(column(at, j)) * 3, pixels + 3 * j, 3);
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
  const int y = at.valid.y + row;
  const std::size_t w = static_cast<std::size_t>(at.width);
  const int n = at.valid.width;
  if (table.layout == Layout::kHWC) {
    T* out = base + static_cast<std::size_t>(y) * w * 3;
    for (int j = 0; j < n; ++j) {
      T* o = out + static_cast<std::size_t>(column(at, j)) * 3;
      for (std::size_t c = 0; c < 3; ++c)
        o[c] = element<T>(table, c, pixels[3 * j + static_cast<int>(c)]);
    }
    return;
  }
  const std::size_t plane = w * static_cast<std::size_t>(at.height);
  int done = 0;  // pixels already written (from the left of the valid part)
  if constexpr (std::is_same_v<T, std::uint8_t>) {
    if (have_avx2()) {
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
  for (std::size_t c = 0; c < 3; ++c) {
    const T v = element<T>(table, c, at.fill[c]);
    if (table.layout == Layout::kHWC) {
      for (std::size_t i = 0; i < plane; ++i) base[i * 3 + c] = v;
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

}  // namespace stoker::vision::detail
