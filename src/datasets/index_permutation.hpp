// IndexPermutation: a pseudo-random permutation of 0 .. n-1 evaluated one index at a time, in
// O(1) time and memory (no table of n entries): what MixtureDataset uses to interleave its
// sources and to reshuffle each source, so a worker maps any index without materialising an
// epoch. A Feistel network over the bits that cover n (two halves, one bit longer than the
// other when the count is odd) is a bijection of those bits; applying it again until the value
// falls below n ("cycle walking") keeps it a bijection of 0 .. n-1, in fewer than 2 passes
// through the network on average (4 for n <= 2).
#pragma once

#include <array>
#include <cstdint>

#include "stoker/random.hpp"

namespace stoker::detail {

class IndexPermutation {
 public:
  // A permutation of 0 .. n-1 (n >= 1) whose round keys are drawn from `keys`.
  IndexPermutation(std::uint64_t n, Generator& keys) noexcept;

  // The image of i; i < n.
  std::uint64_t operator()(std::uint64_t i) const noexcept;
  std::uint64_t size() const noexcept { return n_; }

 private:
  static constexpr int kRounds = 4;  // even: the halves are back in place at the end
  std::uint64_t encrypt(std::uint64_t x) const noexcept;

  std::uint64_t n_;
  unsigned high_bits_;  // the left half: 1 to 32 bits
  unsigned low_bits_;   // the right half: high_bits_ or one fewer
  std::array<std::uint64_t, kRounds> keys_{};
};

}  // namespace stoker::detail
