#include "datasets/index_permutation.hpp"

#include <algorithm>
#include <bit>
#include <utility>

namespace stoker::detail {
namespace {

// SplitMix64's finaliser: every output bit depends on every input bit.
std::uint64_t mix(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

IndexPermutation::IndexPermutation(std::uint64_t n, Generator& keys) noexcept : n_(n) {
  // At least 2 bits, so that neither half is empty.
  const auto bits = std::max(2U, static_cast<unsigned>(std::bit_width(n > 1 ? n - 1 : 1)));
  high_bits_ = (bits + 1) / 2;
  low_bits_ = bits / 2;
  for (std::uint64_t& key : keys_) key = keys.next();
}

std::uint64_t IndexPermutation::encrypt(std::uint64_t x) const noexcept {
  // An unbalanced Feistel network: each round the right half (b bits) becomes the left one,
  // and the left half (a bits), mixed with a function of the right one, becomes the right
  // one, so the halves swap sizes; an even number of rounds puts them back.
  unsigned a = high_bits_;
  unsigned b = low_bits_;
  std::uint64_t left = x >> b;
  std::uint64_t right = x & ((std::uint64_t{1} << b) - 1);
  for (const std::uint64_t key : keys_) {
    const std::uint64_t f = mix(right ^ key) & ((std::uint64_t{1} << a) - 1);
    const std::uint64_t new_right = left ^ f;
    left = right;
    right = new_right;
    std::swap(a, b);
  }
  return (left << b) | right;
}

std::uint64_t IndexPermutation::operator()(std::uint64_t i) const noexcept {
  // Cycle walking: the network permutes 0 .. 2^bits - 1 (fewer than 2n values for n > 2), so
  // following i's cycle reaches a value below n again, and distinct i reach distinct values.
  std::uint64_t x = encrypt(i);
  while (x >= n_) x = encrypt(x);
  return x;
}

}  // namespace stoker::detail
