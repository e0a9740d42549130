// Unit tests for src/order.hpp: the epoch order (identity, or a permutation that depends only on
// seed and epoch) and the Generator generator behind it.
#include "loader/epoch_order.hpp"
#include "stoker/random.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <numeric>
#include <vector>

namespace stoker::detail {
namespace {

std::vector<std::size_t> identity(std::size_t n) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  return order;
}

bool is_permutation_of_indices(const std::vector<std::size_t>& order) {
  std::vector<int> seen(order.size(), 0);
  for (const std::size_t i : order) {
    if (i >= order.size() || seen[i] != 0) return false;
    seen[i] = 1;
  }
  return true;
}

// Pearson's chi-square statistic of `counts` against a uniform expectation.
double chi_square(const std::vector<std::size_t>& counts, std::size_t draws) {
  const double expected = static_cast<double>(draws) / static_cast<double>(counts.size());
  double chi2 = 0;
  for (const std::size_t c : counts) {
    const double d = static_cast<double>(c) - expected;
    chi2 += d * d / expected;
  }
  return chi2;
}

TEST_CASE("epoch_order: without shuffle, the identity for any seed and epoch", "[order]") {
  for (const std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{17}, std::size_t{1000}}) {
    INFO("n = " << n);
    REQUIRE(epoch_order(n, false, 0, 0) == identity(n));
    REQUIRE(epoch_order(n, false, 12345, 7) == identity(n));
  }
}

TEST_CASE("epoch_order: with shuffle, a permutation of 0..n-1", "[order]") {
  for (const std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{17}, std::size_t{1000}}) {
    for (std::uint64_t epoch = 0; epoch < 5; ++epoch) {
      const std::vector<std::size_t> order = epoch_order(n, true, 42, epoch);
      INFO("n = " << n << ", epoch = " << epoch);
      REQUIRE(order.size() == n);
      REQUIRE(is_permutation_of_indices(order));
    }
  }
}

TEST_CASE("epoch_order: with shuffle, the order actually changes", "[order]") {
  const std::vector<std::size_t> order = epoch_order(1000, true, 42, 0);
  REQUIRE(order != identity(1000));
  std::size_t fixed_points = 0;
  for (std::size_t i = 0; i < order.size(); ++i)
    if (order[i] == i) ++fixed_points;
  // A random permutation has one fixed point on average.
  REQUIRE(fixed_points < 10);
}

TEST_CASE("epoch_order: the same (seed, epoch) gives the same order", "[order]") {
  for (const std::size_t n : {std::size_t{2}, std::size_t{17}, std::size_t{1000}}) {
    INFO("n = " << n);
    REQUIRE(epoch_order(n, true, 7, 3) == epoch_order(n, true, 7, 3));
    REQUIRE(epoch_order(n, true, 0, 0) == epoch_order(n, true, 0, 0));
  }
}

TEST_CASE("epoch_order: another epoch or seed gives another order", "[order]") {
  const std::vector<std::size_t> base = epoch_order(1000, true, 7, 3);
  REQUIRE(epoch_order(1000, true, 7, 4) != base);
  REQUIRE(epoch_order(1000, true, 7, 2) != base);
  REQUIRE(epoch_order(1000, true, 8, 3) != base);
  REQUIRE(epoch_order(1000, true, 3, 7) != base);  // seed and epoch are not interchangeable
  REQUIRE(epoch_order(1000, true, 0, 0) != epoch_order(1000, true, 0, 1));
  REQUIRE(epoch_order(1000, true, 0, 0) != epoch_order(1000, true, 1, 0));
}

TEST_CASE("epoch_order: is the same on every machine", "[order]") {
  // Pinned output: the order is part of reproducibility across machines and releases.
  // Computed independently, by a Python transcription of SplitMix64, xoshiro256**,
  // Generator::from, Lemire's bounded draw and Fisher-Yates.
  REQUIRE(epoch_order(10, true, 42, 0) == std::vector<std::size_t>{2, 0, 3, 4, 7, 9, 6, 5, 1, 8});
  REQUIRE(epoch_order(10, true, 42, 1) == std::vector<std::size_t>{6, 0, 1, 9, 2, 3, 4, 8, 7, 5});
}

TEST_CASE("epoch_order: every permutation of 3 is about equally likely", "[order]") {
  // Fisher-Yates with a biased swap range (below(i) rather than below(i + 1)) gives only some
  // permutations, or some more often than others.
  constexpr std::size_t kEpochs = 6000;
  std::map<std::vector<std::size_t>, std::size_t> seen;
  for (std::uint64_t epoch = 0; epoch < kEpochs; ++epoch) ++seen[epoch_order(3, true, 9, epoch)];
  REQUIRE(seen.size() == 6);
  std::vector<std::size_t> counts;
  for (const auto& [order, count] : seen) counts.push_back(count);
  // 5 degrees of freedom: P(chi2 > 30) < 1e-5.
  REQUIRE(chi_square(counts, kEpochs) < 30.0);
}

TEST_CASE("epoch_order: each index lands in each position about equally often", "[order]") {
  constexpr std::size_t kN = 10;
  constexpr std::size_t kEpochs = 10000;
  std::vector<std::size_t> first_position(kN, 0);
  for (std::uint64_t epoch = 0; epoch < kEpochs; ++epoch) {
    ++first_position[epoch_order(kN, true, 1234, epoch)[0]];
  }
  // 9 degrees of freedom: P(chi2 > 40) < 1e-5.
  REQUIRE(chi_square(first_position, kEpochs) < 40.0);
}

TEST_CASE("Generator: the same seed gives the same sequence", "[order][rng]") {
  Generator a(99);
  Generator b(99);
  Generator c(100);
  std::size_t equal_to_c = 0;
  for (int i = 0; i < 100; ++i) {
    const std::uint64_t x = a.next();
    REQUIRE(x == b.next());
    if (x == c.next()) ++equal_to_c;
  }
  REQUIRE(equal_to_c == 0);
}

TEST_CASE("Generator: seed 0 does not give an all-zero state", "[order][rng]") {
  Generator rng(0);
  std::uint64_t any = 0;
  for (int i = 0; i < 4; ++i) any |= rng.next();
  REQUIRE(any != 0);
}

TEST_CASE("Generator::below stays in range", "[order][rng]") {
  Generator rng(2024);
  for (const std::uint64_t range :
       {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{3}, std::uint64_t{10}, std::uint64_t{17},
        std::uint64_t{1000}, std::uint64_t{1} << 32, (std::uint64_t{1} << 63) + 1,
        ~std::uint64_t{0}}) {
    INFO("range = " << range);
    for (int i = 0; i < 2000; ++i) REQUIRE(rng.below(range) < range);
  }
  for (int i = 0; i < 100; ++i) REQUIRE(rng.below(1) == 0);
}

TEST_CASE("Generator::below is roughly uniform over 10 buckets", "[order][rng]") {
  constexpr std::size_t kDraws = 100000;
  Generator rng(7);
  std::vector<std::size_t> counts(10, 0);
  for (std::size_t i = 0; i < kDraws; ++i) ++counts[static_cast<std::size_t>(rng.below(10))];
  for (const std::size_t c : counts) REQUIRE(c > 0);
  // 9 degrees of freedom: the 99.9th percentile is 27.9; 40 is loose.
  REQUIRE(chi_square(counts, kDraws) < 40.0);
}

TEST_CASE("Generator::below has no modulo bias for a large range", "[order][rng]") {
  // With range about 2/3 of 2^64, next() % range would land in the lower half of the range with
  // probability 2/3; an unbiased draw does so with probability 1/2.
  constexpr std::uint64_t kRange = ~std::uint64_t{0} / 3 * 2;
  constexpr std::size_t kDraws = 100000;
  Generator rng(11);
  std::size_t low = 0;
  for (std::size_t i = 0; i < kDraws; ++i)
    if (rng.below(kRange) < kRange / 2) ++low;
  const double fraction = static_cast<double>(low) / static_cast<double>(kDraws);
  REQUIRE(fraction > 0.49);
  REQUIRE(fraction < 0.51);
}

TEST_CASE("Generator::from: depends on every key and their order", "[order][rng]") {
  auto first = [](std::initializer_list<std::uint64_t> keys) {
    return Generator::from(keys).next();
  };
  REQUIRE(first({1, 2}) == first({1, 2}));
  REQUIRE(first({1, 2}) != first({2, 1}));
  REQUIRE(first({1, 2}) != first({1, 3}));
  REQUIRE(first({0, 0}) != first({0, 1}));
  REQUIRE(first({0, 0, 0}) != first({0, 0}));
}

}  // namespace
}  // namespace stoker::detail
