// The order of an epoch's samples: 0..n-1, or a permutation that depends only on (seed, epoch),
// the same on every machine and for any num_workers (no std:: distribution, whose results are
// implementation-defined).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stoker::detail {

// xoshiro256** seeded through SplitMix64: small, fast, and good enough for shuffling.
class Xoshiro256 {
 public:
  explicit Xoshiro256(std::uint64_t seed) noexcept;
  std::uint64_t next() noexcept;
  // Uniform in [0, range), without modulo bias (Lemire's method). range > 0.
  std::uint64_t below(std::uint64_t range) noexcept;

 private:
  std::uint64_t s_[4];
};

// Mixes several 64-bit values into one seed.
std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b) noexcept;

std::vector<std::size_t> epoch_order(std::size_t n, bool shuffle, std::uint64_t seed,
                                     std::uint64_t epoch);

}  // namespace stoker::detail
