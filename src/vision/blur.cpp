// GaussianBlur as torchvision computes it on a PIL image: the image as a float32 tensor, a
// float32 kernel, reflect padding, conv2d, rounding half to even back to 8 bits. To give
// torch's bits, each float32 step is torch's own:
//   - the 1-D kernel: torch.linspace (ATen's kernel: from the start up to half way, from the
//     end after, by fused multiply-adds, 16 values at a time from a vector base on AVX2
//     machines), divided by sigma,
//     squared, times -0.5, torch.exp (SLEEF's expf u10 with fused multiply-adds: libsleef,
//     Debian's libsleef-dev), normalised by torch.sum (ATen's cascade sum: 8 lanes on AVX2,
//     four interleaved accumulators, the tail added in order);
//   - the 2-D kernel: the outer product (one rounding per entry);
//   - conv2d (oneDNN's depthwise kernel): per output value, a float accumulator from 0 and one
//     fused multiply-add per tap, rows of the kernel in order, each row left to right.
// That is torch 1.13 on an AVX2 CPU (what Debian's torch uses on these machines). Where torch
// dispatches otherwise (AVX-512, or no FMA) its own result can differ from this in the last
// bit of rare values; without libsleef the exponential is libm's and the kernel can differ
// in its last bits too (docs/datasets.md says so). Compiled with -ffp-contract=off: every fused
// multiply-add here is written as one.
#include "vision/torch_ops.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "stoker/vision/transforms.hpp"
#include "vision/resample.hpp"

#if STOKER_HAS_SLEEF
// libsleef's scalar u10 expf built for FMA; sleef.h declares it only when compiling for FMA
// (FP_FAST_FMA), and it is called only after checking the CPU for FMA.
extern "C" float Sleef_expf1_u10purecfma(float);
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace stoker::vision::detail {

namespace {

bool have_fma() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  static const bool yes = __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0;
  return yes;
#else
  return false;
#endif
}

float torch_expf(float v) noexcept {
#if STOKER_HAS_SLEEF
  // torch's Vectorized<float>::exp on AVX2 / AVX-512 is SLEEF's u10 expf with FMA; without
  // FMA, torch maps std::exp.
  return have_fma() ? Sleef_expf1_u10purecfma(v) : std::exp(v);
#else
  return std::exp(v);
#endif
}

// ATen's multi_row_sum<T, 4>, T being kLanes floats: `rows` rows of 4 accumulators, row r
// adding values[(r * 4 + k) * kLanes + l] to lane l of accumulator k, in levels of
// 2^level_power rows (ATen's cascade, so that only sums of similar size meet).
template <int kLanes>
struct Lanes {
  float v[4][static_cast<std::size_t>(kLanes)] = {};
};

template <int kLanes>
Lanes<kLanes> multi_row_sum(const float* data, std::int64_t rows) {
  constexpr int kLevels = 4;
  auto ceil_log2 = [](std::int64_t x) -> std::int64_t {
    if (x <= 2) return 1;
    return 64 - __builtin_clzll(static_cast<unsigned long long>(x - 1));
  };
  const std::int64_t level_power = std::max<std::int64_t>(4, ceil_log2(rows) / kLevels);
  const std::int64_t level_step = std::int64_t{1} << level_power;
  const std::int64_t level_mask = level_step - 1;
  Lanes<kLanes> acc[kLevels];
  auto load_add = [&](std::int64_t i) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < kLanes; ++l) acc[0].v[k][l] += data[(i * 4 + k) * kLanes + l];
    }
  };
  std::int64_t i = 0;
  while (i + level_step <= rows) {
    for (std::int64_t j = 0; j < level_step; ++j, ++i) load_add(i);
    for (int j = 1; j < kLevels; ++j) {
      for (int k = 0; k < 4; ++k) {
        for (int l = 0; l < kLanes; ++l) {
          acc[j].v[k][l] += acc[j - 1].v[k][l];
          acc[j - 1].v[k][l] = 0.0f;
        }
      }
      if ((i & (level_mask << (j * level_power))) != 0) break;
    }
  }
  for (; i < rows; ++i) load_add(i);
  for (int j = 1; j < kLevels; ++j) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < kLanes; ++l) acc[0].v[k][l] += acc[j].v[k][l];
    }
  }
  return acc[0];
}

// ATen's row_sum over `n` elements of kLanes floats each (kLanes = 1: scalars): four
// interleaved accumulators over groups of four, the tail into the first, then the four added.
template <int kLanes>
void row_sum(const float* data, std::int64_t n, float* out) {
  const std::int64_t groups = n / 4;
  Lanes<kLanes> partial = multi_row_sum<kLanes>(data, groups);
  for (std::int64_t i = groups * 4; i < n; ++i) {
    for (int l = 0; l < kLanes; ++l) partial.v[0][l] += data[i * kLanes + l];
  }
  for (int k = 1; k < 4; ++k) {
    for (int l = 0; l < kLanes; ++l) partial.v[0][l] += partial.v[k][l];
  }
  for (int l = 0; l < kLanes; ++l) out[l] = partial.v[0][l];
}

}  // namespace

float torch_linspace(float start, float end, int steps, int index) noexcept {
  if (steps == 1) return start;
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int halfway = steps / 2;
  // ATen's AVX2 build contracts `start + step * i` and `end - step * i` into fused
  // multiply-adds (measured against torch: with them every bin matches, without them some do
  // not); a vector's lanes then add j * step to its first value unfused.
  auto from_ends = [&](int i) {
    return i < halfway ? std::fma(step, static_cast<float>(i), start)
                       : std::fma(-step, static_cast<float>(steps - i - 1), end);
  };
  constexpr int kVector = 8;  // AVX2's float lanes
  const int vectorised = steps - steps % (2 * kVector);
  if (index < vectorised) {
    const int base = index - index % kVector;
    return from_ends(base) + static_cast<float>(index - base) * step;
  }
  return from_ends(index);
}

float torch_sum(const float* values, std::int64_t n) noexcept {
  constexpr int kVector = 8;
  float lanes[kVector];
  if (n < kVector) {
    row_sum<1>(values, n, lanes);
    return 0.0f + lanes[0];
  }
  const std::int64_t vectors = n / kVector;
  row_sum<kVector>(values, vectors, lanes);
  float total = 0.0f;
  for (std::int64_t k = vectors * kVector; k < n; ++k) total += values[k];
  for (float lane : lanes) total += lane;
  return 0.0f + total;
}

std::vector<float> gaussian_kernel1d(int size, double sigma) {
  const auto half = static_cast<float>((size - 1) * 0.5);
  const auto s = static_cast<float>(sigma);
  std::vector<float> pdf(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) {
    const float x = torch_linspace(-half, half, size, i) / s;
    pdf[static_cast<std::size_t>(i)] = torch_expf(-0.5f * (x * x));
  }
  const float total = torch_sum(pdf.data(), size);
  for (float& v : pdf) v /= total;
  return pdf;
}

namespace {

// One output row of one channel: acc[x] = sum over the kernel's taps, by fused multiply-adds
// in torch's order; `rows` are the padded input rows y .. y + kernel_y - 1.
void convolve_row_portable(const float* const* rows, const float* kernel, int kernel_x,
                           int kernel_y, int width, float* acc) {
  for (int x = 0; x < width; ++x) acc[x] = 0.0f;
  for (int i = 0; i < kernel_y; ++i) {
    for (int j = 0; j < kernel_x; ++j) {
      const float w = kernel[i * kernel_x + j];
      const float* in = rows[i] + j;
      for (int x = 0; x < width; ++x) acc[x] = std::fma(w, in[x], acc[x]);
    }
  }
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2,fma"))) void convolve_row_fma(const float* const* rows,
                                                          const float* kernel, int kernel_x,
                                                          int kernel_y, int width, float* acc) {
  int x = 0;
  for (; x + 8 <= width; x += 8) {
    __m256 sum = _mm256_setzero_ps();
    for (int i = 0; i < kernel_y; ++i) {
      const float* in = rows[i] + x;
      for (int j = 0; j < kernel_x; ++j) {
        sum =
            _mm256_fmadd_ps(_mm256_set1_ps(kernel[i * kernel_x + j]), _mm256_loadu_ps(in + j), sum);
      }
    }
    _mm256_storeu_ps(acc + x, sum);
  }
  for (; x < width; ++x) {
    float sum = 0.0f;
    for (int i = 0; i < kernel_y; ++i) {
      for (int j = 0; j < kernel_x; ++j)
        sum = std::fma(kernel[i * kernel_x + j], rows[i][x + j], sum);
    }
    acc[x] = sum;
  }
}
#endif

}  // namespace

void gaussian_blur_image(const Image& in, const std::vector<float>& kernel_x_taps,
                         const std::vector<float>& kernel_y_taps, Image& out) {
  const int kx = static_cast<int>(kernel_x_taps.size());
  const int ky = static_cast<int>(kernel_y_taps.size());
  std::vector<float> kernel(static_cast<std::size_t>(kx) * static_cast<std::size_t>(ky));
  for (int i = 0; i < ky; ++i) {
    for (int j = 0; j < kx; ++j) {
      kernel[static_cast<std::size_t>(i * kx + j)] =
          kernel_y_taps[static_cast<std::size_t>(i)] * kernel_x_taps[static_cast<std::size_t>(j)];
    }
  }
  const int w = in.width;
  const int h = in.height;
  const int c = in.channels;
  const int px = kx / 2;
  const int py = ky / 2;
  const int pw = w + 2 * px;
  const int ph = h + 2 * py;
  out.reset(w, h, c);
  std::vector<float> plane(static_cast<std::size_t>(pw) * static_cast<std::size_t>(ph) + 8);
  std::vector<float> acc(static_cast<std::size_t>(w));
  std::vector<const float*> rows(static_cast<std::size_t>(ky));
  std::vector<int> columns(static_cast<std::size_t>(pw));
  for (int x = 0; x < pw; ++x) {
    columns[static_cast<std::size_t>(x)] = pad_index(x - px, w, PaddingMode::kReflect);
  }
  const bool fma = have_fma();
  for (int ch = 0; ch < c; ++ch) {
    for (int y = 0; y < ph; ++y) {
      const std::uint8_t* src = in.row(pad_index(y - py, h, PaddingMode::kReflect));
      float* dst = plane.data() + static_cast<std::size_t>(y) * static_cast<std::size_t>(pw);
      for (int x = 0; x < pw; ++x) {
        dst[x] = static_cast<float>(src[columns[static_cast<std::size_t>(x)] * c + ch]);
      }
    }
    for (int y = 0; y < h; ++y) {
      for (int i = 0; i < ky; ++i) {
        rows[static_cast<std::size_t>(i)] =
            plane.data() + static_cast<std::size_t>(y + i) * static_cast<std::size_t>(pw);
      }
#if defined(__x86_64__) || defined(__i386__)
      if (fma) {
        convolve_row_fma(rows.data(), kernel.data(), kx, ky, w, acc.data());
      } else {
        convolve_row_portable(rows.data(), kernel.data(), kx, ky, w, acc.data());
      }
#else
      (void)fma;
      convolve_row_portable(rows.data(), kernel.data(), kx, ky, w, acc.data());
#endif
      std::uint8_t* o = out.row(y) + ch;
      for (int x = 0; x < w; ++x) {
        // torch.round (half to even), then .to(uint8); the weights sum to about 1, so the
        // value stays within [0, 255].
        const float v = std::nearbyint(acc[static_cast<std::size_t>(x)]);
        o[static_cast<std::size_t>(x) * static_cast<std::size_t>(c)] =
            static_cast<std::uint8_t>(v < 0.0f     ? 0.0f
                                      : v > 255.0f ? 255.0f
                                                   : v);
      }
    }
  }
}

}  // namespace stoker::vision::detail

namespace stoker::vision::functional {

void gaussian_blur(const Image& in, int kernel_x, int kernel_y, double sigma_x, double sigma_y,
                   Image& out) {
  if (in.width < 1 || in.height < 1 || (in.channels != 1 && in.channels != 3) ||
      in.pixels.size() < in.row_bytes() * static_cast<std::size_t>(in.height)) {
    throw std::invalid_argument(fmt::format(
        "vision::functional::gaussian_blur: the image is {} x {} x {} with {} bytes of pixels; "
        "it takes RGB (3) or grey (1) images of at least 1 x 1 with all their bytes",
        in.width, in.height, in.channels, in.pixels.size()));
  }
  if (kernel_x < 1 || kernel_y < 1 || kernel_x % 2 == 0 || kernel_y % 2 == 0) {
    throw std::invalid_argument(fmt::format(
        "vision::functional::gaussian_blur: kernel_size is ({}, {}); both must be odd and "
        "positive",
        kernel_x, kernel_y));
  }
  if (!(sigma_x > 0.0) || !(sigma_y > 0.0) || !std::isfinite(sigma_x) || !std::isfinite(sigma_y)) {
    throw std::invalid_argument(fmt::format(
        "vision::functional::gaussian_blur: sigma is ({}, {}); both must be finite and > 0",
        sigma_x, sigma_y));
  }
  if (kernel_x / 2 >= in.width || kernel_y / 2 >= in.height) {
    throw std::invalid_argument(fmt::format(
        "vision::functional::gaussian_blur: the {} x {} image (width x height) is too small for "
        "a ({}, {}) kernel: reflect padding by half the kernel ({}, {}) needs a width and "
        "height above it, as torch requires; use a smaller kernel_size",
        in.width, in.height, kernel_x, kernel_y, kernel_x / 2, kernel_y / 2));
  }
  if (&in == &out) {
    const Image copy = in;
    return gaussian_blur(copy, kernel_x, kernel_y, sigma_x, sigma_y, out);
  }
  detail::gaussian_blur_image(in, detail::gaussian_kernel1d(kernel_x, sigma_x),
                              detail::gaussian_kernel1d(kernel_y, sigma_y), out);
}

}  // namespace stoker::vision::functional
