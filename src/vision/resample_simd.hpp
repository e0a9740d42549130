// The resampler's AVX2 passes (private to libstoker; resample.cpp calls them when the CPU has
// AVX2, and otherwise runs its portable loops). They compute exactly what the portable loops
// compute: each sum is the same integer, only gathered in another order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stoker::vision::detail {

// The horizontal weights of an axis laid out for the AVX2 pass: per pair of output pixels
// (i, i + 1) and pair of taps (j, j + 1), one 256-bit vector of each weight's high part
// (weight >> 11) and one of its low 11 bits, as int16 [w_j, w_j+1] x 3 colours, then 0, 0;
// pixel i in the low 128 bits, i + 1 in the high. Splitting the 22-bit weights keeps every
// product within pmaddwd's 16 x 16 -> 32 bits, and the sum of high parts shifted by 11 plus
// the sum of low parts is the full sum exactly.
struct PackedWeights {
  int tap_pairs = 0;
  std::vector<std::int16_t> values;  // (count / 2) x tap_pairs x 2 vectors of 16 int16
};

// True when the CPU has AVX2 and use_portable_loops(true) was not called.
bool have_avx2() noexcept;
// For tests: run the portable loops even where AVX2 is available (per process).
void use_portable_loops(bool portable) noexcept;

// Output pixels [0, n) (n even) of one RGB row: in points at the row, out at the output row.
// Reads up to in[(start[i] + 2 * tap_pairs) * 3 + 1] for each pixel i; writes one byte past
// the 3 n output bytes.
void horizontal_rgb_avx2(const std::uint8_t* in, const int* start, const PackedWeights& w, int n,
                         std::uint8_t* out);

// out[i] = clip8((2^21 + sum_t rows[t][i] * weights[t]) >> 22) for i < width.
void vertical_avx2(const std::uint8_t* const* rows, const std::int32_t* weights, int taps,
                   std::size_t width, std::uint8_t* out);

// n RGB pixels into three planes (out[0] R, out[1] G, out[2] B); reversed (pixel i to
// index n - 1 - i) when `reverse`. Returns the pixels done (a multiple of 16; the caller does
// the rest).
int deinterleave_rgb_avx2(const std::uint8_t* in, int n, std::uint8_t* const out[3], bool reverse);

}  // namespace stoker::vision::detail
