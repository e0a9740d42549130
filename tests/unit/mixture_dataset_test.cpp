// Unit tests for include/stoker/mixture_dataset.hpp and the index permutation under it: exact
// per-epoch counts (largest remainder), every source sample seen before any repeats across
// epochs, a pure function of (seed, epoch, index), and the errors. The same through a
// DataLoader with 0 to 4 workers is in tests/process/composition_loader_test.cpp.
#include "stoker/mixture_dataset.hpp"

#include <catch2/catch.hpp>

#include "support/error_message.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "datasets/index_permutation.hpp"
#include "data/random_state.hpp"
#include "stoker/errors.hpp"
#include "stoker/random.hpp"
#include "stoker/tensor_dataset.hpp"

namespace stoker {
namespace {

using Catch::Contains;
using test::message_of;

// Sample i of source `tag`: "id" = tag * 1'000'000 + i. Its size may be huge: get() builds the
// sample from the index alone.
struct Source {
  std::size_t n = 0;
  std::int64_t tag = 0;
  std::size_t size() const { return n; }
  Sample get(std::size_t i) const {
    return Sample().set(
        "id", Tensor::scalar<std::int64_t>(tag * 1'000'000 + static_cast<std::int64_t>(i)));
  }
};

TEST_CASE("IndexPermutation is a bijection of 0 .. n-1 for any n", "[mixture]") {
  for (const std::uint64_t n : {1U, 2U, 3U, 4U, 5U, 7U, 16U, 17U, 100U, 1000U, 4097U}) {
    CAPTURE(n);
    Generator keys(n);
    const detail::IndexPermutation permutation(n, keys);
    std::vector<bool> seen(n, false);
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint64_t j = permutation(i);
      REQUIRE(j < n);
      REQUIRE(!seen[j]);
      seen[j] = true;
    }
  }
  // Any size: the permutation of 2^40 + 3 values maps its last index into range.
  Generator keys(1);
  const std::uint64_t big = (std::uint64_t{1} << 40) + 3;
  REQUIRE(detail::IndexPermutation(big, keys)(big - 1) < big);
}

TEST_CASE("IndexPermutation spreads each index evenly over its keys", "[mixture]") {
  // Where index 0 goes under 20,000 keys: each of 10 places about 2,000 times (binomial
  // standard deviation 42; the bound is 6 of them).
  std::vector<int> where(10, 0);
  Generator keys(99);
  for (int k = 0; k < 20000; ++k) ++where[detail::IndexPermutation(10, keys)(0)];
  for (const int count : where) REQUIRE(std::abs(count - 2000) < 250);
}

TEST_CASE("mixture counts are the largest-remainder rounding of the weights", "[mixture]") {
  using Counts = std::vector<std::size_t>;
  REQUIRE(detail::mixture_counts(10, {0.7, 0.3}) == Counts{7, 3});
  REQUIRE(detail::mixture_counts(10, {7, 3}) == Counts{7, 3});
  // 3.33 each: the one left over goes to the first (a tie).
  REQUIRE(detail::mixture_counts(10, {1, 1, 1}) == Counts{4, 3, 3});
  // Quotas 3.5, 1.75, 1.75: floors 3, 1, 1; the two left over go to the .75s.
  REQUIRE(detail::mixture_counts(7, {0.5, 0.25, 0.25}) == Counts{3, 2, 2});
  REQUIRE(detail::mixture_counts(5, {0, 1, 0}) == Counts{0, 5, 0});
  REQUIRE(detail::mixture_counts(0, {1, 2}) == Counts{0, 0});
  // 1000 x 1/3 x 3: 333 each and 1 left over.
  REQUIRE(detail::mixture_counts(1000, {1.0 / 3, 1.0 / 3, 1.0 / 3}) == Counts{334, 333, 333});
  for (const std::size_t total : {1U, 99U, 1000U, 123457U}) {
    const Counts c = detail::mixture_counts(total, {0.1, 0.2, 0.3, 0.4});
    REQUIRE(c[0] + c[1] + c[2] + c[3] == total);
  }
  REQUIRE_THAT(message_of<std::invalid_argument>([] {
                 detail::mixture_counts(10, {1, -1});
               }),
               Contains("source 1 has weight -1"));
  REQUIRE_THAT(message_of<std::invalid_argument>([] {
                 detail::mixture_counts(10, {0, 0});
               }),
               Contains("every weight is 0"));
  REQUIRE_THROWS_AS(detail::mixture_counts(10, {}), std::invalid_argument);
}

// How many of an epoch's samples come from each source, and the ids seen.
std::map<std::int64_t, std::size_t> epoch_counts(MixtureDataset& mixture, std::uint64_t epoch,
                                                 std::vector<std::int64_t>* ids = nullptr) {
  std::map<std::int64_t, std::size_t> counts;
  for (std::size_t i = 0; i < mixture.size(); ++i) {
    const std::int64_t id = mixture.get(i, epoch)["id"].item<std::int64_t>();
    ++counts[id / 1'000'000];
    if (ids != nullptr) ids->push_back(id);
  }
  return counts;
}

TEST_CASE("a MixtureDataset has the exact counts in every epoch", "[mixture]") {
  MixtureDataset mixture({{Source{50, 0}, 0.7}, {Source{40, 1}, 0.2}, {Source{8, 2}, 0.1}}, 101, 5);
  REQUIRE(mixture.size() == 101);
  REQUIRE(mixture.num_sources() == 3);
  // Quotas 70.7, 20.2, 10.1: floors 70, 20, 10 and the one left over to the .7.
  REQUIRE(mixture.counts() == std::vector<std::size_t>{71, 20, 10});
  for (std::uint64_t epoch = 0; epoch < 4; ++epoch) {
    const auto counts = epoch_counts(mixture, epoch);
    REQUIRE(counts.at(0) == 71);
    REQUIRE(counts.at(1) == 20);
    REQUIRE(counts.at(2) == 10);
  }
}

TEST_CASE("a MixtureDataset sees every sample of a source before any repeats", "[mixture]") {
  // Source 0: 6 samples, 3 an epoch (epochs 0-1, 2-3, ... each see all six once). Source 1:
  // 2 samples, 5 an epoch (each epoch sees both at least twice).
  MixtureDataset mixture({{Source{6, 0}, 3}, {Source{2, 1}, 5}}, 8, 11);
  REQUIRE(mixture.counts() == std::vector<std::size_t>{3, 5});
  std::vector<std::vector<std::int64_t>> source0;
  for (std::uint64_t epoch = 0; epoch < 6; ++epoch) {
    std::vector<std::int64_t> ids;
    const auto counts = epoch_counts(mixture, epoch, &ids);
    REQUIRE(counts.at(0) == 3);
    std::vector<std::int64_t> zeros;
    std::size_t first = 0;
    for (const std::int64_t id : ids) {
      if (id < 1'000'000) zeros.push_back(id);
      if (id == 1'000'000) ++first;
    }
    REQUIRE((first == 2 || first == 3));
    source0.push_back(zeros);
  }
  std::vector<std::vector<std::int64_t>> cycles;
  for (std::size_t e = 0; e + 1 < source0.size(); e += 2) {
    std::vector<std::int64_t> cycle = source0[e];
    cycle.insert(cycle.end(), source0[e + 1].begin(), source0[e + 1].end());
    std::sort(cycle.begin(), cycle.end());
    REQUIRE(cycle == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5});
    cycles.push_back(source0[e]);
  }
  // Each pass over the source is a new shuffle.
  REQUIRE((cycles[0] != cycles[1] || cycles[1] != cycles[2]));
}

TEST_CASE("a MixtureDataset's mapping depends only on (seed, epoch, index)", "[mixture]") {
  const auto make = [](std::uint64_t seed) {
    return MixtureDataset({{Source{1000, 0}, 1}, {Source{500, 1}, 1}}, 300, seed);
  };
  MixtureDataset a = make(3);
  MixtureDataset b = make(3);
  MixtureDataset other_seed = make(4);
  std::size_t same_as_other_seed = 0;
  std::size_t same_as_next_epoch = 0;
  // Backwards, to show no state carries from one call to the next.
  for (std::size_t i = a.size(); i-- > 0;) {
    REQUIRE(a.locate(i, 2) == b.locate(i, 2));
    same_as_other_seed += a.locate(i, 2) == other_seed.locate(i, 2) ? 1U : 0U;
    same_as_next_epoch += a.locate(i, 2) == a.locate(i, 3) ? 1U : 0U;
  }
  REQUIRE(same_as_other_seed < 10);
  REQUIRE(same_as_next_epoch < 10);
  // The first samples of an epoch interleave the sources (not all of one source first).
  std::set<std::size_t> sources;
  for (std::size_t i = 0; i < 10; ++i) sources.insert(a.locate(i, 0).part);
  REQUIRE(sources.size() == 2);
}

TEST_CASE("a MixtureDataset takes its epoch from the sample being loaded", "[mixture]") {
  MixtureDataset mixture({{Source{10, 0}, 1}, {Source{10, 1}, 1}}, 20, 0);
  REQUIRE_THAT(message_of<std::logic_error>([&] { mixture.get(0); }),
               Contains("called outside a DataLoader's get(), so there is no current epoch; "
                        "call get(i, epoch)"));
  for (const std::uint64_t epoch : {0U, 7U}) {
    detail::begin_sample_rng(1, epoch, 5);  // what the loader does before get(5)
    REQUIRE(current_epoch() == epoch);
    const std::int64_t id = mixture.get(5)["id"].item<std::int64_t>();
    detail::end_sample_rng();
    REQUIRE(id == mixture.get(5, epoch)["id"].item<std::int64_t>());
  }
  REQUIRE_THROWS_AS(current_epoch(), std::logic_error);
}

TEST_CASE("a MixtureDataset maps indices of huge sources without tables", "[mixture]") {
  const std::size_t n = std::size_t{1} << 50;
  MixtureDataset mixture({{Source{n, 0}, 1}, {Source{n, 1}, 3}}, std::size_t{1} << 40, 1);
  for (std::size_t i : {std::size_t{0}, std::size_t{1} << 39, (std::size_t{1} << 40) - 1}) {
    // epoch x count past 64 bits too: the draw number is computed in 128.
    for (const std::uint64_t epoch : {std::uint64_t{1'000'000}, ~std::uint64_t{0}}) {
      const PartIndex at = mixture.locate(i, epoch);
      REQUIRE(at.part < 2);
      REQUIRE(at.index < n);
      REQUIRE(at == mixture.locate(i, epoch));
    }
  }
}

TEST_CASE("MixtureDataset errors name the source and the index", "[mixture]") {
  REQUIRE_THAT(message_of<std::invalid_argument>([] {
                 MixtureDataset({{Source{0, 0}, 1}, {Source{4, 1}, 1}}, 10, 0);
               }),
               Contains("source 0 is empty but has weight 1"));
  MixtureDataset zero_weight_empty({{Source{0, 0}, 0}, {Source{4, 1}, 1}}, 10, 0);
  REQUIRE(zero_weight_empty.counts() == std::vector<std::size_t>{0, 10});
  REQUIRE_THAT(message_of<std::out_of_range>([&] { zero_weight_empty.get(10, 0); }),
               Contains("MixtureDataset::get: index 10 is out of range for a dataset of 10"));

  MixtureDataset fields({{Source{4, 0}, 1}, {TensorDataset{{"y", Tensor::from<float>({1, 2})}}, 1}},
                        6, 0);
  std::string message;
  for (std::size_t i = 0; i < fields.size() && message.empty(); ++i) {
    try {
      fields.get(i, 0);
    } catch (const Error& e) {
      message = e.what();
    }
  }
  REQUIRE_THAT(message, Contains("MixtureDataset: the samples of source") &&
                            Contains("have other fields than those of source"));
}

}  // namespace
}  // namespace stoker
