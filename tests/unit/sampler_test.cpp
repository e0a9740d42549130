// Unit tests for include/stoker/sampler.hpp and the Generator of include/stoker/random.hpp:
// each built-in sampler against hand-computed expectations (PyTorch's semantics), their
// argument errors, and the statistics of the generator they are built on.
#include "stoker/sampler.hpp"
#include "stoker/random.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace stoker {
namespace {

using Indices = std::vector<std::size_t>;

// Matches an exception whose what() contains every one of `parts`.
class MessageContains final : public Catch::MatcherBase<std::exception> {
 public:
  MessageContains(std::initializer_list<std::string> parts) : parts_(parts) {}
  bool match(const std::exception& e) const override {
    const std::string what = e.what();
    return std::all_of(parts_.begin(), parts_.end(), [&](const std::string& part) {
      return what.find(part) != std::string::npos;
    });
  }
  std::string describe() const override {
    std::string out = "has a message containing";
    for (const std::string& part : parts_) out += " \"" + part + "\"";
    return out;
  }

 private:
  std::vector<std::string> parts_;
};

Indices iota_vec(std::size_t n) {
  Indices v(n);
  std::iota(v.begin(), v.end(), std::size_t{0});
  return v;
}

Indices sorted(Indices v) {
  std::sort(v.begin(), v.end());
  return v;
}

// True when `v` holds each of 0..n-1 exactly once.
bool is_permutation_of_range(const Indices& v, std::size_t n) {
  return v.size() == n && sorted(v) == iota_vec(n);
}

// How often each of 0..n-1 occurs in `v`; REQUIREs every value to be below n.
std::vector<std::size_t> count_values(const Indices& v, std::size_t n) {
  std::vector<std::size_t> counts(n, 0);
  for (const std::size_t i : v) {
    REQUIRE(i < n);
    ++counts[i];
  }
  return counts;
}

double fraction(std::size_t part, std::size_t whole) {
  return static_cast<double>(part) / static_cast<double>(whole);
}

// ---- SequentialSampler ----

TEST_CASE("SequentialSampler: 0..n-1 in order, every epoch", "[sampler]") {
  SequentialSampler five(5);
  REQUIRE(five.indices(0) == Indices{0, 1, 2, 3, 4});
  REQUIRE(five.indices(7) == Indices{0, 1, 2, 3, 4});
  SequentialSampler one(1);
  REQUIRE(one.indices(0) == Indices{0});
  SequentialSampler empty(0);
  REQUIRE(empty.indices(0).empty());
  REQUIRE(empty.indices(3).empty());
}

// ---- RandomSampler ----

TEST_CASE("RandomSampler: without replacement, a permutation of 0..n-1 each epoch", "[sampler]") {
  const std::size_t n = 50;
  RandomSampler sampler(n, {.replacement = false, .num_samples = std::nullopt, .seed = 11});
  REQUIRE(sampler.num_samples() == n);
  std::set<Indices> distinct;
  for (std::uint64_t epoch = 0; epoch < 6; ++epoch) {
    const Indices order = sampler.indices(epoch);
    INFO("epoch " << epoch);
    REQUIRE(is_permutation_of_range(order, n));
    REQUIRE(order != iota_vec(n));
    distinct.insert(order);
  }
  REQUIRE(distinct.size() == 6);  // every epoch a new order
}

TEST_CASE("RandomSampler: the order is a function of (seed, epoch) only", "[sampler]") {
  const std::size_t n = 40;
  RandomSampler a(n, {.replacement = false, .num_samples = std::nullopt, .seed = 5});
  RandomSampler b(n, {.replacement = false, .num_samples = std::nullopt, .seed = 5});
  RandomSampler other_seed(n, {.replacement = false, .num_samples = std::nullopt, .seed = 6});
  // Asked in different orders, the same (seed, epoch) gives the same indices.
  const Indices a3 = a.indices(3);
  const Indices a1 = a.indices(1);
  REQUIRE(b.indices(1) == a1);
  REQUIRE(b.indices(3) == a3);
  REQUIRE(a.indices(3) == a3);
  REQUIRE(a1 != a3);
  REQUIRE(other_seed.indices(3) != a3);
  REQUIRE(other_seed.indices(1) != a1);

  RandomSampler with_replacement(n, {.replacement = true, .num_samples = 100, .seed = 5});
  const Indices r = with_replacement.indices(2);
  REQUIRE(with_replacement.indices(2) == r);
  REQUIRE(with_replacement.indices(4) != r);
}

TEST_CASE("RandomSampler: num_samples > n takes consecutive permutations", "[sampler]") {
  const std::size_t n = 7;
  const std::size_t num_samples = 25;  // 3 full permutations and 4 of a fourth
  RandomSampler sampler(n, {.replacement = false, .num_samples = num_samples, .seed = 3});
  REQUIRE(sampler.num_samples() == num_samples);
  for (std::uint64_t epoch = 0; epoch < 4; ++epoch) {
    INFO("epoch " << epoch);
    const Indices order = sampler.indices(epoch);
    REQUIRE(order.size() == num_samples);
    std::set<Indices> blocks;
    for (std::size_t start = 0; start + n <= num_samples; start += n) {
      const Indices block(order.begin() + static_cast<std::ptrdiff_t>(start),
                          order.begin() + static_cast<std::ptrdiff_t>(start + n));
      INFO("block at " << start);
      REQUIRE(is_permutation_of_range(block, n));
      blocks.insert(block);
    }
    REQUIRE(blocks.size() > 1);  // not one permutation repeated
    const Indices tail(order.begin() + 21, order.end());
    REQUIRE(std::set<std::size_t>(tail.begin(), tail.end()).size() == 4);  // distinct
    // Every index 25 / 7 = 3 or 4 times; 25 - 3 * 7 = 4 of them 4 times.
    const std::vector<std::size_t> counts = count_values(order, n);
    std::size_t fours = 0;
    for (const std::size_t c : counts) {
      REQUIRE((c == 3 || c == 4));
      if (c == 4) ++fours;
    }
    REQUIRE(fours == 4);
  }
}

TEST_CASE("RandomSampler: num_samples < n takes distinct indices, a prefix of the permutation",
          "[sampler]") {
  const std::size_t n = 20;
  RandomSampler few(n, {.replacement = false, .num_samples = 6, .seed = 9});
  RandomSampler all(n, {.replacement = false, .num_samples = std::nullopt, .seed = 9});
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    INFO("epoch " << epoch);
    const Indices order = few.indices(epoch);
    REQUIRE(order.size() == 6);
    REQUIRE(std::set<std::size_t>(order.begin(), order.end()).size() == 6);
    for (const std::size_t i : order) REQUIRE(i < n);
    const Indices full = all.indices(epoch);
    REQUIRE(order == Indices(full.begin(), full.begin() + 6));
  }
}

TEST_CASE("RandomSampler: with replacement, independent uniform draws", "[sampler]") {
  const std::size_t n = 10;
  const std::size_t draws = 100000;
  RandomSampler sampler(n, {.replacement = true, .num_samples = draws, .seed = 1});
  REQUIRE(sampler.num_samples() == draws);
  const Indices order = sampler.indices(0);
  REQUIRE(order.size() == draws);
  const std::vector<std::size_t> counts = count_values(order, n);
  for (std::size_t i = 0; i < n; ++i) {
    INFO("index " << i << " drawn " << counts[i] << " times");
    // Expected 10000, standard deviation ~95.
    REQUIRE(std::abs(fraction(counts[i], draws) - 0.1) < 0.005);
  }
  // num_samples defaults to n; n draws from n values repeat some (50 of 50 without a repeat
  // has probability 50! / 50^50 ~ 3e-21).
  RandomSampler small(50, {.replacement = true, .num_samples = std::nullopt, .seed = 1});
  const Indices drawn = small.indices(0);
  REQUIRE(drawn.size() == 50);
  REQUIRE(std::set<std::size_t>(drawn.begin(), drawn.end()).size() < 50);
}

TEST_CASE("RandomSampler: an empty dataset", "[sampler]") {
  SECTION("n = 0 with num_samples > 0 is an error naming the count") {
    REQUIRE_THROWS_MATCHES(
        RandomSampler(0, {.replacement = false, .num_samples = 3, .seed = 0}),
        std::invalid_argument,
        Catch::Matchers::Message("RandomSampler: cannot draw 3 samples from an empty dataset"));
    REQUIRE_THROWS_WITH(
        RandomSampler(0, {.replacement = true, .num_samples = 5, .seed = 0}),
        Catch::Contains("cannot draw 5 samples") && Catch::Contains("empty dataset"));
  }
  SECTION("n = 0 with the default num_samples is an empty epoch") {
    RandomSampler sampler(0);
    REQUIRE(sampler.num_samples() == 0);
    REQUIRE(sampler.indices(0).empty());
    RandomSampler with_replacement(0, {.replacement = true, .num_samples = 0, .seed = 0});
    REQUIRE(with_replacement.indices(1).empty());
  }
}

// ---- SubsetRandomSampler ----

TEST_CASE("SubsetRandomSampler: a permutation of exactly the subset", "[sampler]") {
  const Indices subset{3, 7, 7, 100, 42, 0, 9, 15, 8, 21, 22, 5};  // 7 twice
  SubsetRandomSampler sampler(subset, 4);
  std::set<Indices> orders;
  for (std::uint64_t epoch = 0; epoch < 4; ++epoch) {
    const Indices order = sampler.indices(epoch);
    INFO("epoch " << epoch);
    REQUIRE(sorted(order) == sorted(subset));  // duplicates kept
    orders.insert(order);
  }
  REQUIRE(orders.size() == 4);
  REQUIRE(SubsetRandomSampler(subset, 4).indices(2) == sampler.indices(2));
  REQUIRE(SubsetRandomSampler(subset, 5).indices(2) != sampler.indices(2));
  REQUIRE(SubsetRandomSampler({}, 4).indices(0).empty());
  REQUIRE(SubsetRandomSampler({6}, 4).indices(3) == Indices{6});
}

// ---- WeightedRandomSampler ----

TEST_CASE("WeightedRandomSampler: with replacement, frequencies follow the weights", "[sampler]") {
  const std::size_t draws = 100000;
  WeightedRandomSampler sampler({1, 3, 0, 6}, draws, true, 2);
  const Indices order = sampler.indices(0);
  REQUIRE(order.size() == draws);
  const std::vector<std::size_t> counts = count_values(order, 4);
  INFO("counts " << counts[0] << " " << counts[1] << " " << counts[2] << " " << counts[3]);
  REQUIRE(counts[2] == 0);
  REQUIRE(std::abs(fraction(counts[0], draws) - 0.1) < 0.01);
  REQUIRE(std::abs(fraction(counts[1], draws) - 0.3) < 0.01);
  REQUIRE(std::abs(fraction(counts[3], draws) - 0.6) < 0.01);
  // Weights need not sum to 1: scaled weights give the same frequencies.
  WeightedRandomSampler scaled({10, 30, 0, 60}, draws, true, 3);
  const std::vector<std::size_t> scaled_counts = count_values(scaled.indices(0), 4);
  REQUIRE(scaled_counts[2] == 0);
  REQUIRE(std::abs(fraction(scaled_counts[3], draws) - 0.6) < 0.01);
  // Another epoch, another draw.
  REQUIRE(sampler.indices(1) != order);
  REQUIRE(sampler.indices(0) == order);
}

TEST_CASE("WeightedRandomSampler: zero-weight indices are never drawn", "[sampler]") {
  // Zeros first, last and in a run, around weights of very different sizes.
  const std::vector<double> weights{0, 2, 0, 0, 1e-9, 5, 0};
  const std::set<std::size_t> positive{1, 4, 5};
  WeightedRandomSampler with_replacement(weights, 20000, true, 7);
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    for (const std::size_t i : with_replacement.indices(epoch)) REQUIRE(positive.count(i) == 1);
  }
  WeightedRandomSampler without(weights, 3, false, 7);
  for (std::uint64_t epoch = 0; epoch < 50; ++epoch) {
    const Indices order = without.indices(epoch);
    REQUIRE(std::set<std::size_t>(order.begin(), order.end()) == positive);
  }
}

TEST_CASE("WeightedRandomSampler: without replacement, no repeats, heavier indices first",
          "[sampler]") {
  const std::vector<double> weights{1, 3, 0, 6};
  SECTION("num_samples distinct indices of positive weight") {
    WeightedRandomSampler two(weights, 2, false, 1);
    for (std::uint64_t epoch = 0; epoch < 200; ++epoch) {
      const Indices order = two.indices(epoch);
      REQUIRE(order.size() == 2);
      REQUIRE(order[0] != order[1]);
      for (const std::size_t i : order) REQUIRE((i == 0 || i == 1 || i == 3));
    }
    WeightedRandomSampler three(weights, 3, false, 1);
    REQUIRE(sorted(three.indices(0)) == Indices{0, 1, 3});
  }
  SECTION("the first and second picks follow successive sampling (torch.multinomial)") {
    // First pick: w / 10. Second pick, e.g. of index 0: P(first 1) 1/7 + P(first 3) 1/4 =
    // 0.3 / 7 + 0.6 / 4 = 0.192857; of 1: 0.1 * 3/9 + 0.6 * 3/4 = 0.483333; of 3:
    // 0.1 * 6/9 + 0.3 * 6/7 = 0.323810.
    WeightedRandomSampler sampler(weights, 3, false, 12);
    const std::size_t epochs = 20000;
    std::vector<std::size_t> first(4, 0);
    std::vector<std::size_t> second(4, 0);
    for (std::uint64_t epoch = 0; epoch < epochs; ++epoch) {
      const Indices order = sampler.indices(epoch);
      REQUIRE(order.size() == 3);
      ++first[order[0]];
      ++second[order[1]];
    }
    INFO("first " << first[0] << " " << first[1] << " " << first[3]);
    INFO("second " << second[0] << " " << second[1] << " " << second[3]);
    REQUIRE(first[3] > first[1]);
    REQUIRE(first[1] > first[0]);
    REQUIRE(std::abs(fraction(first[0], epochs) - 0.1) < 0.015);
    REQUIRE(std::abs(fraction(first[1], epochs) - 0.3) < 0.015);
    REQUIRE(std::abs(fraction(first[3], epochs) - 0.6) < 0.015);
    REQUIRE(std::abs(fraction(second[0], epochs) - 0.192857) < 0.015);
    REQUIRE(std::abs(fraction(second[1], epochs) - 0.483333) < 0.015);
    REQUIRE(std::abs(fraction(second[3], epochs) - 0.323810) < 0.015);
  }
}

TEST_CASE("WeightedRandomSampler: argument errors name the problem", "[sampler]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  REQUIRE_THROWS_MATCHES(WeightedRandomSampler({1, -2, 3}, 4), std::invalid_argument,
                         Catch::Matchers::Message("WeightedRandomSampler: weight 1 is -2; weights "
                                                  "must be finite and >= 0"));
  REQUIRE_THROWS_WITH(WeightedRandomSampler({1, 2, nan}, 4),
                      Catch::Contains("weight 2 is nan") && Catch::Contains("finite and >= 0"));
  REQUIRE_THROWS_AS(WeightedRandomSampler({1, 2, nan}, 4), std::invalid_argument);
  REQUIRE_THROWS_WITH(WeightedRandomSampler({inf, 1}, 4),
                      Catch::Contains("weight 0 is inf") && Catch::Contains("finite and >= 0"));
  REQUIRE_THROWS_WITH(WeightedRandomSampler({1, -inf}, 4), Catch::Contains("weight 1 is -inf"));
  REQUIRE_THROWS_MATCHES(
      WeightedRandomSampler({0, 0, 0}, 4), std::invalid_argument,
      MessageContains({"every weight is zero", "at least one must be positive"}));
  REQUIRE_THROWS_WITH(WeightedRandomSampler({}, 1), Catch::Contains("every weight is zero"));
  REQUIRE_THROWS_MATCHES(
      WeightedRandomSampler({1, 2}, 0), std::invalid_argument,
      Catch::Matchers::Message("WeightedRandomSampler: num_samples must be at least 1"));
  REQUIRE_THROWS_MATCHES(WeightedRandomSampler({1, 0, 2}, 3, false), std::invalid_argument,
                         MessageContains({"3 samples without replacement",
                                          "only 2 weights are positive", "lower num_samples"}));
  // The same counts are fine with replacement, or when there are enough positive weights.
  REQUIRE_NOTHROW(WeightedRandomSampler({1, 0, 2}, 3, true));
  REQUIRE_NOTHROW(WeightedRandomSampler({1, 0, 2}, 2, false));
}

// Each weight is finite but their sum overflows to inf: every draw once landed on the last
// index, here one of weight 0. Weights are now scaled by the largest before summing.
TEST_CASE("WeightedRandomSampler: weights whose sum overflows", "[sampler][regression]") {
  std::optional<WeightedRandomSampler> sampler;
  try {
    sampler.emplace(std::vector<double>{1e308, 1e308, 0}, 10000, true, 0);
  } catch (const std::invalid_argument& e) {
    SUCCEED("rejected: " << e.what());
    return;
  }
  const std::vector<std::size_t> counts = count_values(sampler->indices(0), 3);
  INFO("counts " << counts[0] << " " << counts[1] << " " << counts[2]);
  REQUIRE(counts[2] == 0);
  REQUIRE(std::abs(fraction(counts[0], 10000) - 0.5) < 0.03);
}

// ---- DistributedSampler ----

std::vector<Indices> all_ranks(std::size_t n, std::size_t replicas,
                               DistributedSampler::Options options, std::uint64_t epoch) {
  std::vector<Indices> ranks;
  for (std::size_t r = 0; r < replicas; ++r) {
    DistributedSampler sampler(n, replicas, r, options);
    ranks.push_back(sampler.indices(epoch));
  }
  return ranks;
}

// The epoch's global order the ranks were cut from: rank r holds positions r, r + R, ...
Indices interleave(const std::vector<Indices>& ranks) {
  Indices global;
  const std::size_t per_rank = ranks.empty() ? 0 : ranks[0].size();
  for (std::size_t k = 0; k < per_rank; ++k) {
    for (const Indices& rank : ranks) {
      REQUIRE(rank.size() == per_rank);
      global.push_back(rank[k]);
    }
  }
  return global;
}

TEST_CASE("DistributedSampler: sizes, coverage, padding and interleaving", "[sampler]") {
  const std::size_t n = GENERATE(10u, 11u, 12u, 13u, 3u);
  const bool drop_last = GENERATE(false, true);
  const bool shuffle = GENERATE(false, true);
  const std::size_t replicas = 4;
  CAPTURE(n, drop_last, shuffle);
  const DistributedSampler::Options options{.shuffle = shuffle, .seed = 17, .drop_last = drop_last};
  const std::size_t expected_per_rank =
      drop_last && n % replicas != 0 ? n / replicas : (n + replicas - 1) / replicas;
  const std::size_t total = expected_per_rank * replicas;

  for (std::size_t r = 0; r < replicas; ++r) {
    const DistributedSampler sampler(n, replicas, r, options);
    REQUIRE(sampler.num_samples() == expected_per_rank);
    REQUIRE(sampler.total_size() == total);
    REQUIRE(sampler.num_replicas() == replicas);
    REQUIRE(sampler.rank() == r);
  }
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    CAPTURE(epoch);
    const std::vector<Indices> ranks = all_ranks(n, replicas, options, epoch);
    for (const Indices& rank : ranks) REQUIRE(rank.size() == expected_per_rank);
    const Indices global = interleave(ranks);
    REQUIRE(global.size() == total);
    // The first min(n, total) positions are distinct dataset indices: the ranks are disjoint
    // there, and without drop_last they cover the dataset.
    const std::size_t distinct_part = std::min(n, total);
    const Indices head(global.begin(), global.begin() + static_cast<std::ptrdiff_t>(distinct_part));
    REQUIRE(std::set<std::size_t>(head.begin(), head.end()).size() == distinct_part);
    for (const std::size_t i : global) REQUIRE(i < n);
    if (!drop_last) REQUIRE(is_permutation_of_range(head, n));
    // Padding repeats the epoch's order from its start.
    for (std::size_t p = n; p < total; ++p) {
      CAPTURE(p);
      REQUIRE(global[p] == global[p - n]);
    }
    if (!shuffle) {
      Indices expected;
      for (std::size_t p = 0; p < total; ++p) expected.push_back(p % n);
      REQUIRE(global == expected);
    } else if (n >= 10) {
      REQUIRE(head != iota_vec(distinct_part));
    }
  }
}

TEST_CASE("DistributedSampler: the exact shards without shuffle", "[sampler]") {
  const DistributedSampler::Options in_order{.shuffle = false, .seed = 0, .drop_last = false};
  const DistributedSampler::Options dropping{.shuffle = false, .seed = 0, .drop_last = true};
  // 10 over 4: 12 positions, the last two repeat 0 and 1.
  REQUIRE(all_ranks(10, 4, in_order, 0) ==
          std::vector<Indices>{{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}});
  REQUIRE(all_ranks(10, 4, dropping, 5) == std::vector<Indices>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  REQUIRE(all_ranks(13, 4, in_order, 0) ==
          std::vector<Indices>{{0, 4, 8, 12}, {1, 5, 9, 0}, {2, 6, 10, 1}, {3, 7, 11, 2}});
  REQUIRE(all_ranks(13, 4, dropping, 0) ==
          std::vector<Indices>{{0, 4, 8}, {1, 5, 9}, {2, 6, 10}, {3, 7, 11}});
  REQUIRE(all_ranks(12, 4, dropping, 0) ==
          std::vector<Indices>{{0, 4, 8}, {1, 5, 9}, {2, 6, 10}, {3, 7, 11}});
  REQUIRE(all_ranks(3, 4, in_order, 0) == std::vector<Indices>{{0}, {1}, {2}, {0}});
  REQUIRE(all_ranks(3, 4, dropping, 0) == std::vector<Indices>{{}, {}, {}, {}});
  // More padding than data: the order repeats as often as needed.
  REQUIRE(all_ranks(3, 8, in_order, 0) ==
          std::vector<Indices>{{0}, {1}, {2}, {0}, {1}, {2}, {0}, {1}});
  REQUIRE(all_ranks(0, 4, in_order, 0) == std::vector<Indices>{{}, {}, {}, {}});
  REQUIRE(all_ranks(7, 1, in_order, 0) == std::vector<Indices>{{0, 1, 2, 3, 4, 5, 6}});
}

TEST_CASE("DistributedSampler: with shuffle, the exact padding of the shuffled order",
          "[sampler]") {
  // The ranks of 10 over 4 are cut from one shuffled order o: [o0 o4 o8] [o1 o5 o9] [o2 o6 o0]
  // [o3 o7 o1].
  const std::vector<Indices> ranks =
      all_ranks(10, 4, {.shuffle = true, .seed = 21, .drop_last = false}, 2);
  REQUIRE(ranks[2][2] == ranks[0][0]);
  REQUIRE(ranks[3][2] == ranks[1][0]);
  Indices all;
  for (const Indices& rank : ranks) all.insert(all.end(), rank.begin(), rank.end());
  const std::vector<std::size_t> counts = count_values(all, 10);
  for (std::size_t i = 0; i < 10; ++i) {
    CAPTURE(i);
    const bool padded = i == ranks[0][0] || i == ranks[1][0];
    REQUIRE(counts[i] == (padded ? 2u : 1u));
  }
}

TEST_CASE("DistributedSampler: epochs and seeds", "[sampler]") {
  const std::size_t n = 100;
  auto shard = [&](std::uint64_t seed, std::uint64_t epoch, std::size_t rank) {
    DistributedSampler sampler(n, 4, rank, {.shuffle = true, .seed = seed, .drop_last = false});
    return sampler.indices(epoch);
  };
  SECTION("set_epoch, then indices(), equals indices(epoch)") {
    DistributedSampler sampler(n, 4, 1, {.shuffle = true, .seed = 3, .drop_last = false});
    REQUIRE(sampler.indices() == sampler.indices(0));  // epoch 0 by default
    sampler.set_epoch(5);
    REQUIRE(sampler.indices() == sampler.indices(5));
    REQUIRE(sampler.indices() == shard(3, 5, 1));
    REQUIRE(sampler.indices() != sampler.indices(0));
    sampler.set_epoch(0);
    REQUIRE(sampler.indices() == shard(3, 0, 1));
  }
  SECTION("the shuffle is seeded with seed + epoch, as in PyTorch") {
    for (std::size_t rank = 0; rank < 4; ++rank) {
      CAPTURE(rank);
      REQUIRE(shard(1, 1, rank) == shard(0, 2, rank));
      REQUIRE(shard(0, 1, rank) != shard(0, 2, rank));
      REQUIRE(shard(0, 1, rank) == shard(0, 1, rank));
      REQUIRE(shard(7, 0, rank) != shard(8, 0, rank));
    }
  }
  SECTION("without shuffle, every epoch is the same") {
    DistributedSampler sampler(n, 4, 2, {.shuffle = false, .seed = 3, .drop_last = false});
    REQUIRE(sampler.indices(0) == sampler.indices(9));
  }
}

TEST_CASE("DistributedSampler: argument errors", "[sampler]") {
  REQUIRE_THROWS_MATCHES(
      DistributedSampler(10, 0, 0), std::invalid_argument,
      Catch::Matchers::Message("DistributedSampler: num_replicas must be at least 1"));
  REQUIRE_THROWS_MATCHES(
      DistributedSampler(10, 4, 4), std::invalid_argument,
      MessageContains({"rank 4 is not below num_replicas 4", "ranks count from 0"}));
  REQUIRE_THROWS_WITH(DistributedSampler(10, 2, 9),
                      Catch::Contains("rank 9") && Catch::Contains("num_replicas 2"));
  REQUIRE_NOTHROW(DistributedSampler(10, 4, 3));
}

// ---- BatchSampler ----

// Records the epochs it is asked for; returns a fixed list.
class RecordingSampler final : public Sampler {
 public:
  explicit RecordingSampler(Indices order) : order_(std::move(order)) {}
  Indices indices(std::uint64_t epoch) override {
    epochs_.push_back(epoch);
    return order_;
  }
  const std::vector<std::uint64_t>& epochs() const { return epochs_; }

 private:
  Indices order_;
  std::vector<std::uint64_t> epochs_;
};

TEST_CASE("BatchSampler: batches of batch_size, the last short or dropped", "[sampler]") {
  using Batches = std::vector<Indices>;
  auto sequential = std::make_shared<SequentialSampler>(10);
  REQUIRE(BatchSampler(sequential, 3, false).batches(0) ==
          Batches{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}});
  REQUIRE(BatchSampler(sequential, 3, true).batches(0) == Batches{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}});
  REQUIRE(BatchSampler(sequential, 5, true).batches(0) ==
          Batches{{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}});
  REQUIRE(BatchSampler(sequential, 10, false).batches(0) ==
          Batches{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}});
  REQUIRE(BatchSampler(sequential, 11, false).batches(0) ==
          Batches{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}});
  REQUIRE(BatchSampler(sequential, 11, true).batches(0).empty());
  REQUIRE(BatchSampler(sequential, 1, true).batches(0).size() == 10);
  REQUIRE(BatchSampler(std::make_shared<SequentialSampler>(0), 4, false).batches(0).empty());

  // The sampler's order, repeats included, with the epoch passed through.
  auto recording = std::make_shared<RecordingSampler>(Indices{9, 2, 2, 7, 0});
  BatchSampler pairs(recording, 2, false);
  REQUIRE(pairs.batches(4) == Batches{{9, 2}, {2, 7}, {0}});
  REQUIRE(BatchSampler(recording, 2, true).batches(6) == Batches{{9, 2}, {2, 7}});
  REQUIRE(recording->epochs() == std::vector<std::uint64_t>{4, 6});

  auto random = std::make_shared<RandomSampler>(
      23, RandomSampler::Options{.replacement = false, .num_samples = std::nullopt, .seed = 8});
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    Indices flat;
    const Batches batches = BatchSampler(random, 4, false).batches(epoch);
    REQUIRE(batches.size() == 6);
    for (const Indices& b : batches) flat.insert(flat.end(), b.begin(), b.end());
    REQUIRE(flat == random->indices(epoch));
  }
}

TEST_CASE("BatchSampler: argument errors", "[sampler]") {
  REQUIRE_THROWS_MATCHES(BatchSampler(nullptr, 4, false), std::invalid_argument,
                         Catch::Matchers::Message("BatchSampler: the sampler is null"));
  REQUIRE_THROWS_MATCHES(BatchSampler(std::make_shared<SequentialSampler>(4), 0, false),
                         std::invalid_argument,
                         Catch::Matchers::Message("BatchSampler: batch_size must be >= 1"));
}

// ---- Generator and sample_rng() ----

TEST_CASE("sample_rng: outside a dataset's get() it throws std::logic_error", "[sampler][random]") {
  REQUIRE_THROWS_MATCHES(
      sample_rng(), std::logic_error,
      MessageContains({"called outside a dataset's get()", "(seed, epoch, index)"}));
}

TEST_CASE("Generator: uniform from 0 up to 1, and from low up to high", "[sampler][random]") {
  Generator rng(42);
  const std::size_t draws = 100000;
  double sum = 0;
  double low = 1;
  double high = 0;
  std::vector<std::size_t> deciles(10, 0);
  for (std::size_t k = 0; k < draws; ++k) {
    const double u = rng.uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    sum += u;
    low = std::min(low, u);
    high = std::max(high, u);
    ++deciles[static_cast<std::size_t>(u * 10)];
  }
  REQUIRE(std::abs(sum / static_cast<double>(draws) - 0.5) < 0.005);
  REQUIRE(low < 0.001);
  REQUIRE(high > 0.999);
  for (const std::size_t d : deciles) REQUIRE(std::abs(fraction(d, draws) - 0.1) < 0.005);
  for (std::size_t k = 0; k < 1000; ++k) {
    const double v = rng.uniform(-3.0, 5.0);
    REQUIRE(v >= -3.0);
    REQUIRE(v < 5.0);
  }
  for (std::size_t k = 0; k < 1000; ++k) REQUIRE(rng.below(7) < 7);
}

TEST_CASE("Generator: normal() has mean 0 and variance 1", "[sampler][random]") {
  Generator rng(7);
  const std::size_t draws = 100000;
  double sum = 0;
  double sum_sq = 0;
  std::size_t within_one = 0;
  for (std::size_t k = 0; k < draws; ++k) {
    const double x = rng.normal();
    REQUIRE(std::isfinite(x));
    sum += x;
    sum_sq += x * x;
    if (std::abs(x) < 1.0) ++within_one;
  }
  const double mean = sum / static_cast<double>(draws);
  const double variance = sum_sq / static_cast<double>(draws) - mean * mean;
  INFO("mean " << mean << ", variance " << variance);
  REQUIRE(std::abs(mean) < 0.02);            // standard error 0.0032
  REQUIRE(std::abs(variance - 1.0) < 0.03);  // standard error 0.0045
  REQUIRE(std::abs(fraction(within_one, draws) - 0.6827) < 0.01);
}

TEST_CASE("Generator: shuffle is a permutation, the same for the same seed", "[sampler][random]") {
  Generator rng(3);
  Indices v = iota_vec(100);
  rng.shuffle(v.begin(), v.end());
  REQUIRE(is_permutation_of_range(v, 100));
  REQUIRE(v != iota_vec(100));
  Indices again = iota_vec(100);
  Generator(3).shuffle(again.begin(), again.end());
  REQUIRE(again == v);
  Indices one{5};
  rng.shuffle(one.begin(), one.end());
  REQUIRE(one == Indices{5});
  Indices none;
  rng.shuffle(none.begin(), none.end());
  REQUIRE(none.empty());

  Generator a = Generator::from({1, 2, 3});
  Generator b = Generator::from({1, 2, 3});
  Generator c = Generator::from({1, 2, 4});
  const std::uint64_t first = a.next();
  REQUIRE(b.next() == first);
  REQUIRE(c.next() != first);
  REQUIRE(a.next() != first);
}

}  // namespace
}  // namespace stoker
