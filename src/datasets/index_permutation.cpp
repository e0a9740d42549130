#include "datasets/index_permutation.hpp"

#include <bit>

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
  const unsigned bits = static_cast<unsigned>(std::bit_width(n > 1 ? n - 1 : 1));
  half_bits_ = (bits + 1) / 2;  // 2 * half_bits_ >= bits: the network covers 0 .. n-1
  mask_ = (std::uint64_t{1} << half_bits_) - 1;
  for (std::uint64_t& key : keys_) key = keys.next();
}

std::uint64_t IndexPermutation::encrypt(std::uint64_t x) const noexcept {
  std::uint64_t left = x >> half_bits_;
  std::uint64_t right = x & mask_;
  for (const std::uint64_t key : keys_) {
    const std::uint64_t f = mix(right ^ key) & mask_;
    const std::uint64_t new_right = left ^ f;
    left = right;
    right = new_right;
  }
  return (left << half_bits_) | right;
}

std::uint64_t IndexPermutation::operator()(std::uint64_t i) const noexcept {
  // Cycle walking: the network permutes 0 .. 4^half_bits_ - 1 (fewer than 4n values), so
  // following i's cycle reaches a value below n again, and distinct i reach distinct values.
  std::uint64_t x = encrypt(i);
  while (x >= n_) x = encrypt(x);
  return x;
}

}  // namespace stoker::detail
