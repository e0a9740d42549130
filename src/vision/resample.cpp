// Pillow's resample (see resample.hpp for why it is written here). The weights follow
// Pillow's arithmetic step by step, in double precision in the same order, so that each
// fixed-point weight, and so each output pixel, is Pillow's; the passes are integer sums,
// which any evaluation order gives exactly. Nearest is Pillow's affine scaling: the input
// position accumulated from the left edge, truncated.
#include "vision/resample.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "vision/resample_simd.hpp"

namespace stoker::vision::detail {
namespace {

double triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

double cubic(double x) {  // Keys' kernel with a = -0.5, as Pillow's BICUBIC
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

std::int32_t fixed_point(double w) {
  constexpr double one = static_cast<double>(1 << kWeightBits);
  return static_cast<std::int32_t>(w < 0 ? -0.5 + w * one : 0.5 + w * one);
}

void nearest_axis(Axis& axis, int in_size, double in0, double in1, int out_size, int first,
                  int count) {
  axis.taps = 1;
  axis.start.resize(static_cast<std::size_t>(count));
  axis.length.assign(static_cast<std::size_t>(count), 1);
  axis.weights.assign(static_cast<std::size_t>(count), std::int32_t{1} << kWeightBits);
  const double step =
      static_cast<double>(static_cast<float>(in1) - static_cast<float>(in0)) / out_size;
  double position = in0 + step * 0.5;
  for (int x = 0; x < first + count; ++x) {
    if (x >= first) {
      const int at = position < 0.0 ? 0 : static_cast<int>(position);
      axis.start[static_cast<std::size_t>(x - first)] = std::min(at, in_size - 1);
    }
    position += step;
  }
}

}  // namespace

void identity_axis(Axis& axis, int offset, int count) {
  axis.count = count;
  axis.taps = 1;
  axis.identity = true;
  axis.start.resize(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) axis.start[static_cast<std::size_t>(i)] = offset + i;
  axis.length.assign(static_cast<std::size_t>(count), 1);
  axis.weights.assign(static_cast<std::size_t>(count), std::int32_t{1} << kWeightBits);
}

void pillow_axis(Axis& axis, int in_size, double in0, double in1, int out_size,
                 Interpolation interpolation, int first, int count) {
  axis.count = count;
  axis.identity = false;
  if (out_size == in_size && in0 == 0.0 && in1 == in_size) {
    identity_axis(axis, first, count);  // Pillow skips this pass; it would be the identity
    return;
  }
  if (interpolation == Interpolation::kNearest) {
    nearest_axis(axis, in_size, in0, in1, out_size, first, count);
    return;
  }
  double (*filter)(double) = interpolation == Interpolation::kBicubic ? cubic : triangle;
  const double filter_support = interpolation == Interpolation::kBicubic ? 2.0 : 1.0;
  // Pillow passes the box as floats; the difference is taken in float.
  const double scale =
      static_cast<double>(static_cast<float>(in1) - static_cast<float>(in0)) / out_size;
  const double filter_scale = scale < 1.0 ? 1.0 : scale;
  const double support = filter_support * filter_scale;
  const int taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  axis.taps = taps;
  axis.start.resize(static_cast<std::size_t>(count));
  axis.length.resize(static_cast<std::size_t>(count));
  axis.weights.assign(static_cast<std::size_t>(count) * static_cast<std::size_t>(taps), 0);
  std::vector<double> w(static_cast<std::size_t>(taps));
  const double inverse = 1.0 / filter_scale;
  for (int i = 0; i < count; ++i) {
    const int xx = first + i;
    const double center = in0 + (xx + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double total = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double v = filter((x + xmin - center + 0.5) * inverse);
      w[static_cast<std::size_t>(x)] = v;
      total += v;
    }
    std::int32_t* out =
        axis.weights.data() + static_cast<std::size_t>(i) * static_cast<std::size_t>(taps);
    for (int x = 0; x < xmax; ++x) {
      double v = w[static_cast<std::size_t>(x)];
      if (total != 0.0) v /= total;
      out[x] = fixed_point(v);
    }
    axis.start[static_cast<std::size_t>(i)] = xmin;
    axis.length[static_cast<std::size_t>(i)] = std::max(xmax, 0);
  }
}

View view_of(const Image& image) noexcept {
  return View{image.pixels.data(), image.row_bytes(), image.width,
              image.height,        image.channels,    image.pixels.data() + image.pixels.size()};
}

namespace {

inline std::uint8_t clip8(std::int32_t acc) {
  const std::int32_t v = acc >> kWeightBits;
  return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Per thread, reused: the horizontal pass's rows, the vertical accumulators, one output row.
struct Scratch {
  std::vector<std::uint8_t> columns;
  std::vector<std::int32_t> sums;
  std::vector<std::uint8_t> row;
  std::vector<const std::uint8_t*> taps;
  PackedWeights packed;
};
thread_local Scratch t_scratch;

void pack_weights(const Axis& axis, PackedWeights& packed) {
  const int longest = *std::max_element(axis.length.begin(), axis.length.end());
  const int pairs = (longest + 1) / 2;
  packed.tap_pairs = pairs;
  const std::size_t count = static_cast<std::size_t>(axis.count / 2);
  packed.values.assign(count * static_cast<std::size_t>(pairs) * 32, 0);
  std::int16_t* v = packed.values.data();
  for (std::size_t p = 0; p < count; ++p) {
    for (int j = 0; j < pairs; ++j, v += 32) {
      for (std::size_t half = 0; half < 2; ++half) {  // pixel 2p in the low lane, 2p + 1 high
        const std::size_t i = 2 * p + half;
        const std::int32_t* k = axis.weights.data() + i * static_cast<std::size_t>(axis.taps);
        for (int t = 0; t < 2; ++t) {
          const int tap = 2 * j + t;
          const std::int32_t w = tap < axis.length[i] ? k[tap] : 0;
          for (int c = 0; c < 3; ++c) {
            v[half * 8 + static_cast<std::size_t>(2 * c + t)] = static_cast<std::int16_t>(w >> 11);
            v[16 + half * 8 + static_cast<std::size_t>(2 * c + t)] =
                static_cast<std::int16_t>(w & 0x7ff);
          }
        }
      }
    }
  }
}

// The portable horizontal pass, output pixels [first, axis.count).
void horizontal_row(const std::uint8_t* in, const Axis& axis, int channels, int first,
                    std::uint8_t* out) {
  constexpr std::int32_t kHalf = std::int32_t{1} << (kWeightBits - 1);
  out += static_cast<std::ptrdiff_t>(first) * channels;
  for (int i = first; i < axis.count; ++i) {
    const std::size_t ii = static_cast<std::size_t>(i);
    const std::uint8_t* p = in + static_cast<std::ptrdiff_t>(axis.start[ii]) * channels;
    const std::int32_t* k = axis.weights.data() + ii * static_cast<std::size_t>(axis.taps);
    const int n = axis.length[ii];
    if (channels == 3) {
      std::int32_t r = kHalf;
      std::int32_t g = kHalf;
      std::int32_t b = kHalf;
      for (int t = 0; t < n; ++t, p += 3) {
        r += p[0] * k[t];
        g += p[1] * k[t];
        b += p[2] * k[t];
      }
      out[0] = clip8(r);
      out[1] = clip8(g);
      out[2] = clip8(b);
      out += 3;
    } else {
      for (int c = 0; c < channels; ++c) {
        std::int32_t acc = kHalf;
        for (int t = 0; t < n; ++t) acc += p[t * channels + c] * k[t];
        *out++ = clip8(acc);
      }
    }
  }
}

void vertical_row(const std::uint8_t* const* in, const std::int32_t* k, int n, std::size_t width,
                  std::int32_t* sums, std::uint8_t* out) {
  constexpr std::int32_t kHalf = std::int32_t{1} << (kWeightBits - 1);
  for (std::size_t i = 0; i < width; ++i) sums[i] = kHalf;
  for (int t = 0; t < n; ++t) {
    const std::uint8_t* row = in[t];
    const std::int32_t w = k[t];
    for (std::size_t i = 0; i < width; ++i) sums[i] += row[i] * w;
  }
  for (std::size_t i = 0; i < width; ++i) out[i] = clip8(sums[i]);
}

}  // namespace

void resample(const View& src, const Axis& columns, const Axis& rows, RowSink sink, void* context) {
  Scratch& s = t_scratch;
  const int channels = src.channels;
  const std::size_t out_width =
      static_cast<std::size_t>(columns.count) * static_cast<std::size_t>(channels);
  if (rows.count == 0 || columns.count == 0) return;
  // The horizontal pass over the input rows the vertical pass reads (all of them when the
  // vertical axis is the identity).
  const int row0 = rows.first_input();
  const int row1 = rows.end_input();
  const std::uint8_t* base = nullptr;  // row r of the horizontal result: base + (r - row0) * step
  std::size_t step = 0;
  if (columns.identity) {
    base = src.data + static_cast<std::size_t>(row0) * src.stride +
           static_cast<std::size_t>(columns.start.front()) * static_cast<std::size_t>(channels);
    step = src.stride;
  } else {
    s.columns.resize(out_width * static_cast<std::size_t>(row1 - row0) + 16);
    const bool simd = channels == 3 && have_avx2() && columns.count >= 2;
    if (simd) pack_weights(columns, s.packed);
    for (int r = row0; r < row1; ++r) {
      const std::uint8_t* in = src.data + static_cast<std::size_t>(r) * src.stride;
      std::uint8_t* out = s.columns.data() + static_cast<std::size_t>(r - row0) * out_width;
      int done = 0;
      if (simd) {
        // The vector loads of pixel i reach byte (start + 2 pairs) * 3 + 1 of the row.
        const std::ptrdiff_t room = src.end - in;
        int n = columns.count & ~1;
        while (n > 0 &&
               (static_cast<std::ptrdiff_t>(columns.start[static_cast<std::size_t>(n - 1)]) +
                2 * s.packed.tap_pairs) *
                           3 +
                       2 >
                   room) {
          n -= 2;
        }
        horizontal_rgb_avx2(in, columns.start.data(), s.packed, n, out);
        done = n;
      }
      horizontal_row(in, columns, channels, done, out);
    }
    base = s.columns.data();
    step = out_width;
  }
  if (rows.identity) {
    for (int y = 0; y < rows.count; ++y) {
      sink(context, y,
           base + static_cast<std::size_t>(rows.start[static_cast<std::size_t>(y)] - row0) * step);
    }
    return;
  }
  s.sums.resize(out_width);
  s.row.resize(out_width);
  s.taps.resize(static_cast<std::size_t>(rows.taps));
  const bool simd = have_avx2();
  for (int y = 0; y < rows.count; ++y) {
    const std::size_t yy = static_cast<std::size_t>(y);
    const int first = rows.start[yy];
    const int n = rows.length[yy];
    for (int t = 0; t < n; ++t) {
      s.taps[static_cast<std::size_t>(t)] =
          base + static_cast<std::size_t>(first + t - row0) * step;
    }
    const std::int32_t* k = rows.weights.data() + yy * static_cast<std::size_t>(rows.taps);
    if (simd) {
      vertical_avx2(s.taps.data(), k, n, out_width, s.row.data());
    } else {
      vertical_row(s.taps.data(), k, n, out_width, s.sums.data(), s.row.data());
    }
    sink(context, y, s.row.data());
  }
}

}  // namespace stoker::vision::detail
