// The resampler's AVX2 passes (see resample_simd.hpp). Compiled for AVX2 function by function
// (target attribute), so the rest of libstoker keeps the baseline instruction set, and called
// only when the CPU reports AVX2. Other architectures get have_avx2() == false.
#include "vision/resample_simd.hpp"

#include <atomic>

namespace stoker::vision::detail {
namespace {
std::atomic<bool> g_portable{false};
}
void use_portable_loops(bool portable) noexcept { g_portable.store(portable); }
}  // namespace stoker::vision::detail

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#include "vision/resample.hpp"

namespace stoker::vision::detail {

bool have_avx2() noexcept {
  static const bool yes = __builtin_cpu_supports("avx2") != 0;
  return yes && !g_portable.load(std::memory_order_relaxed);
}

__attribute__((target("avx2"))) void horizontal_rgb_avx2(const std::uint8_t* in, const int* start,
                                                         const PackedWeights& w, int n,
                                                         std::uint8_t* out) {
  // Bytes 0..5 of a load hold taps j, j + 1 (R G B R G B); spread them to int16
  // [R_j, R_j+1, G_j, G_j+1, B_j, B_j+1, 0, 0], the same in both 128-bit lanes.
  const __m256i spread = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,
                                          0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
  const __m256i half = _mm256_set1_epi32(1 << (kWeightBits - 1));
  const int pairs = w.tap_pairs;
  const auto* weights = reinterpret_cast<const __m256i*>(w.values.data());
  for (int i = 0; i < n; i += 2) {
    const std::uint8_t* a = in + static_cast<std::ptrdiff_t>(start[i]) * 3;
    const std::uint8_t* b = in + static_cast<std::ptrdiff_t>(start[i + 1]) * 3;
    __m256i high = _mm256_setzero_si256();
    __m256i low = half;
    for (int j = 0; j < pairs; ++j, a += 6, b += 6, weights += 2) {
      const __m128i pa = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a));
      const __m128i pb = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b));
      const __m256i p =
          _mm256_shuffle_epi8(_mm256_inserti128_si256(_mm256_castsi128_si256(pa), pb, 1), spread);
      high = _mm256_add_epi32(high, _mm256_madd_epi16(p, _mm256_loadu_si256(weights)));
      low = _mm256_add_epi32(low, _mm256_madd_epi16(p, _mm256_loadu_si256(weights + 1)));
    }
    __m256i sum = _mm256_add_epi32(_mm256_slli_epi32(high, 11), low);
    sum = _mm256_srai_epi32(sum, kWeightBits);
    sum = _mm256_packs_epi32(sum, sum);   // saturating: what clip8 does below 0 ...
    sum = _mm256_packus_epi16(sum, sum);  // ... and above 255
    const int pixel_a = _mm256_cvtsi256_si32(sum);
    const int pixel_b = _mm_cvtsi128_si32(_mm256_extracti128_si256(sum, 1));
    __builtin_memcpy(out + static_cast<std::ptrdiff_t>(i) * 3, &pixel_a, 4);
    __builtin_memcpy(out + static_cast<std::ptrdiff_t>(i) * 3 + 3, &pixel_b, 4);
  }
}

__attribute__((target("avx2"))) void vertical_avx2(const std::uint8_t* const* rows,
                                                   const std::int32_t* weights, int taps,
                                                   std::size_t width, std::uint8_t* out) {
  const __m256i half = _mm256_set1_epi32(1 << (kWeightBits - 1));
  std::size_t i = 0;
  for (; i + 16 <= width; i += 16) {
    __m256i lo = half;
    __m256i hi = half;
    for (int t = 0; t < taps; ++t) {
      const __m128i p = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[t] + i));
      const __m256i k = _mm256_set1_epi32(weights[t]);
      lo = _mm256_add_epi32(lo, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(p), k));
      hi = _mm256_add_epi32(hi, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(p, 8)), k));
    }
    lo = _mm256_srai_epi32(lo, kWeightBits);
    hi = _mm256_srai_epi32(hi, kWeightBits);
    // packs works within 128-bit lanes: reorder the 64-bit quarters back into value order.
    __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xd8);
    __m256i bytes = _mm256_permute4x64_epi64(_mm256_packus_epi16(words, words), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(bytes));
  }
  for (; i < width; ++i) {
    std::int32_t acc = 1 << (kWeightBits - 1);
    for (int t = 0; t < taps; ++t) acc += rows[t][i] * weights[t];
    const std::int32_t v = acc >> kWeightBits;
    out[i] = static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
  }
}

__attribute__((target("avx2"))) int deinterleave_rgb_avx2(const std::uint8_t* in, int n,
                                                          std::uint8_t* const out[3],
                                                          bool reverse) {
  // For 16 pixels in 48 bytes (three loads a, b, c), channel k's byte of pixel i sits at
  // 3 i + k: in a for 3 i + k < 16, in b below 32, in c above. A mask per (channel, load)
  // moves those bytes to position i (or 15 - i when reversing) and zeroes the rest.
  alignas(16) std::int8_t masks[2][3][3][16];
  for (int rev = 0; rev < 2; ++rev) {
    for (int k = 0; k < 3; ++k) {
      for (int load = 0; load < 3; ++load) {
        for (int i = 0; i < 16; ++i) {
          const int at = 3 * i + k - 16 * load;
          masks[rev][k][load][rev ? 15 - i : i] =
              static_cast<std::int8_t>(at >= 0 && at < 16 ? at : -1);
        }
      }
    }
  }
  const int r = reverse ? 1 : 0;
  __m128i m[3][3];
  for (int k = 0; k < 3; ++k) {
    for (int load = 0; load < 3; ++load) {
      m[k][load] = _mm_load_si128(reinterpret_cast<const __m128i*>(masks[r][k][load]));
    }
  }
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 3 * i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 3 * i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 3 * i + 32));
    const int at = reverse ? n - 16 - i : i;
    for (int k = 0; k < 3; ++k) {
      const __m128i v =
          _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, m[k][0]), _mm_shuffle_epi8(b, m[k][1])),
                       _mm_shuffle_epi8(c, m[k][2]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out[k] + at), v);
    }
  }
  return i;
}

}  // namespace stoker::vision::detail

#else

namespace stoker::vision::detail {

bool have_avx2() noexcept { return false; }
void horizontal_rgb_avx2(const std::uint8_t*, const int*, const PackedWeights&, int,
                         std::uint8_t*) {}
void vertical_avx2(const std::uint8_t* const*, const std::int32_t*, int, std::size_t,
                   std::uint8_t*) {}
int deinterleave_rgb_avx2(const std::uint8_t*, int, std::uint8_t* const[3], bool) { return 0; }

}  // namespace stoker::vision::detail

#endif
