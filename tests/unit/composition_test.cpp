// Unit tests for include/stoker/composition.hpp: the index mapping of Subset, ConcatDataset,
// ChainDataset and StackDataset against hand-computed expectations (empty parts and the
// boundaries included), random_split's lengths against PyTorch's, transform(), and the errors.
// No DataLoader here: tests/process/composition_loader_test.cpp runs them through one.
#include "stoker/composition.hpp"

#include <catch2/catch.hpp>

#include "support/error_message.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "data/random_state.hpp"
#include "stoker/cached_dataset.hpp"
#include "stoker/errors.hpp"
#include "stoker/random.hpp"
#include "stoker/tensor_dataset.hpp"

namespace stoker {
namespace {

using Catch::Contains;
using test::message_of;

// Sample i: "id" = tag * 1000 + i (int64), "x" = float32 [2].
struct Numbers {
  std::size_t n = 0;
  std::int64_t tag = 0;
  std::size_t size() const { return n; }
  Sample get(std::size_t i) const {
    if (i >= n) throw std::out_of_range("Numbers::get");
    Sample s;
    s.set("id", Tensor::scalar<std::int64_t>(tag * 1000 + static_cast<std::int64_t>(i)));
    s.set("x", Tensor::from<float>({static_cast<float>(i), 0.5f}));
    return s;
  }
};

// Another type with the same fields, set in the other order.
struct OtherNumbers {
  std::size_t n = 0;
  std::int64_t tag = 0;
  std::size_t size() const { return n; }
  Sample get(std::size_t i) {
    Sample s;
    s.set("x", Tensor::from<float>({static_cast<float>(i), 1.5f}));
    s.set("id", Tensor::scalar<std::int64_t>(tag * 1000 + static_cast<std::int64_t>(i)));
    return s;
  }
};

// The same names, but "id" is int32.
struct Int32Ids {
  std::size_t n = 0;
  std::size_t size() const { return n; }
  Sample get(std::size_t i) {
    Sample s;
    s.set("id", Tensor::scalar<std::int32_t>(static_cast<std::int32_t>(i)));
    s.set("x", Tensor::from<float>({0.0f, 0.0f}));
    return s;
  }
};

std::int64_t id_of(const Sample& s) { return s["id"].item<std::int64_t>(); }

// An iterable stream of `n` samples tagged `tag`; with `Restart`, start_epoch() rewinds it.
template <bool Restart>
struct Stream {
  std::size_t n = 0;
  std::int64_t tag = 0;
  std::size_t position = 0;
  std::vector<std::uint64_t>* epochs = nullptr;  // records the start_epoch() calls
  std::optional<Sample> next() {
    if (position >= n) return std::nullopt;
    Sample s;
    s.set("id", Tensor::scalar<std::int64_t>(tag * 1000 + static_cast<std::int64_t>(position++)));
    return s;
  }
  void start_epoch(std::uint64_t epoch) requires Restart {
    position = 0;
    if (epochs != nullptr) epochs->push_back(epoch);
  }
};

template <class D>
std::vector<std::int64_t> drain(D& stream) {
  std::vector<std::int64_t> ids;
  while (std::optional<Sample> s = stream.next()) ids.push_back(id_of(*s));
  return ids;
}

static_assert(MapDataset<Subset<Numbers>>);
static_assert(MapDataset<ConcatDataset>);
static_assert(MapDataset<StackDataset>);
static_assert(IterableDataset<ChainDataset> && RestartableDataset<ChainDataset>);
static_assert(!MapDataset<ChainDataset>);

TEST_CASE("Subset maps index i to indices[i] and checks every index", "[composition]") {
  Subset subset(Numbers{10, 0}, {7, 2, 2, 9, 0});
  REQUIRE(subset.size() == 5);
  const std::vector<std::int64_t> expected = {7, 2, 2, 9, 0};
  for (std::size_t i = 0; i < subset.size(); ++i) REQUIRE(id_of(subset.get(i)) == expected[i]);
  REQUIRE_THAT(message_of<std::out_of_range>([&] { subset.get(5); }),
               Contains("Subset::get: index 5 is out of range for a dataset of 5 samples"));
  REQUIRE_THAT(message_of<std::out_of_range>([] {
                 Subset(Numbers{10, 0}, {1, 10, 3});
               }),
               Contains("index 10 (position 1 of 3) is out of range for a dataset of 10"));
  Subset<Numbers> empty(Numbers{10, 0}, {});
  REQUIRE(empty.size() == 0);
  REQUIRE_THROWS_AS(empty.get(0), std::out_of_range);
}

TEST_CASE("Subsets built from one shared_ptr share the dataset", "[composition]") {
  auto numbers = std::make_shared<Numbers>(Numbers{4, 0});
  Subset a(numbers, {0, 1});
  Subset b(numbers, {3});
  REQUIRE(&a.dataset() == &b.dataset());
  numbers->tag = 5;  // seen through both
  REQUIRE(id_of(a.get(1)) == 5001);
  REQUIRE(id_of(b.get(0)) == 5003);
}

TEST_CASE("random_split gives PyTorch's lengths for fractions", "[composition]") {
  struct Case {
    std::size_t n;
    std::vector<double> fractions;
    std::vector<std::size_t> lengths;  // torch.utils.data.random_split (torch 1.13)
  };
  const std::vector<Case> cases = {
      {10, {0.3, 0.3, 0.4}, {3, 3, 4}},
      {11, {0.3, 0.3, 0.4}, {4, 3, 4}},
      {7, {0.5, 0.5}, {4, 3}},
      {5, {0.1, 0.1, 0.8}, {1, 0, 4}},
      {1000, {0.7, 0.2, 0.1}, {700, 200, 100}},
      {3, {0.25, 0.25, 0.25, 0.25}, {1, 1, 1, 0}},
      {101, {1.0 / 3, 1.0 / 3, 1.0 / 3}, {34, 34, 33}},
      {9, {0.0, 1.0}, {0, 9}},
      {0, {0.5, 0.5}, {0, 0}},
      {12345, {0.123, 0.456, 0.421}, {1519, 5629, 5197}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.n, c.fractions);
    REQUIRE(detail::split_lengths(c.n, c.fractions) == c.lengths);
    const std::vector<Subset<Numbers>> pieces = random_split(Numbers{c.n, 0}, c.fractions, 42);
    REQUIRE(pieces.size() == c.lengths.size());
    for (std::size_t k = 0; k < pieces.size(); ++k) REQUIRE(pieces[k].size() == c.lengths[k]);
  }
}

TEST_CASE("random_split's pieces are disjoint, cover the dataset and depend on the seed",
          "[composition]") {
  const std::size_t n = 1000;
  auto pieces = random_split(Numbers{n, 0}, {600, 300, 100}, 7);
  std::vector<std::size_t> all;
  for (const auto& piece : pieces)
    all.insert(all.end(), piece.indices().begin(), piece.indices().end());
  REQUIRE(all.size() == n);
  std::sort(all.begin(), all.end());
  for (std::size_t i = 0; i < n; ++i) REQUIRE(all[i] == i);
  // The pieces share one dataset, and get() goes through the permutation.
  REQUIRE(&pieces[0].dataset() == &pieces[2].dataset());
  REQUIRE(static_cast<std::size_t>(id_of(pieces[1].get(5))) == pieces[1].indices()[5]);

  const auto again = random_split(Numbers{n, 0}, {600, 300, 100}, 7);
  const auto other = random_split(Numbers{n, 0}, {600, 300, 100}, 8);
  REQUIRE(again[0].indices() == pieces[0].indices());
  REQUIRE(other[0].indices() != pieces[0].indices());
  // Shuffled, not a prefix of 0..n-1.
  REQUIRE(!std::is_sorted(pieces[0].indices().begin(), pieces[0].indices().end()));

  const auto by_fraction = random_split(Numbers{n, 0}, {0.6, 0.3, 0.1}, 7);
  REQUIRE(by_fraction[1].indices() == pieces[1].indices());
}

TEST_CASE("random_split refuses lengths and fractions that do not fit", "[composition]") {
  REQUIRE_THAT(message_of<std::invalid_argument>([] {
                 random_split(Numbers{10, 0}, {3, 3}, 0);
               }),
               Contains("the lengths sum to 6 but the dataset has 10 samples"));
  REQUIRE_THAT(message_of<std::invalid_argument>([] {
                 random_split(Numbers{10, 0}, {0.5, 0.6}, 0);
               }),
               Contains("the fractions sum to 1.1, not 1"));
  REQUIRE_THAT(message_of<std::invalid_argument>([] {
                 random_split(Numbers{10, 0}, {1.5, -0.5}, 0);
               }),
               Contains("fraction 0 is 1.5, not between 0 and 1"));
  REQUIRE_THAT(message_of<std::invalid_argument>([] {
                 random_split(Numbers{10, 0}, {12, -2}, 0);
               }),
               Contains("length 1 is negative"));
  REQUIRE_THROWS_AS(random_split(Numbers{10, 0}, std::vector<double>{}, 0), std::invalid_argument);
}

TEST_CASE("ConcatDataset finds each index's part by binary search, skipping empty parts",
          "[composition]") {
  // Parts of sizes 3, 0, 2, 0, 4 (two types); ends 3, 3, 5, 5, 9.
  ConcatDataset concat(Numbers{3, 1}, Numbers{0, 2}, OtherNumbers{2, 3}, OtherNumbers{0, 4},
                       Numbers{4, 5});
  REQUIRE(concat.size() == 9);
  REQUIRE(concat.num_parts() == 5);
  REQUIRE(concat.cumulative_sizes() == std::vector<std::size_t>{3, 3, 5, 5, 9});
  const std::vector<PartIndex> expected = {{0, 0}, {0, 1}, {0, 2}, {2, 0}, {2, 1},
                                           {4, 0}, {4, 1}, {4, 2}, {4, 3}};
  const std::vector<std::int64_t> ids = {1000, 1001, 1002, 3000, 3001, 5000, 5001, 5002, 5003};
  for (std::size_t i = 0; i < concat.size(); ++i) {
    CAPTURE(i);
    REQUIRE(concat.locate(i) == expected[i]);
    REQUIRE(id_of(concat.get(i)) == ids[i]);
  }
  REQUIRE_THAT(message_of<std::out_of_range>([&] { concat.get(9); }),
               Contains("ConcatDataset::get: index 9 is out of range for a dataset of 9 samples"));
  REQUIRE_THAT(message_of<std::out_of_range>([&] { concat.get(static_cast<std::size_t>(-1)); }),
               Contains("index 18446744073709551615 (-1) is out of range"));
}

TEST_CASE("ConcatDataset takes a vector of parts, nests, and may be empty", "[composition]") {
  std::vector<Numbers> parts = {{2, 1}, {0, 2}, {1, 3}};
  ConcatDataset concat(parts);
  REQUIRE(concat.size() == 3);
  REQUIRE(id_of(concat.get(2)) == 3000);

  ConcatDataset nested(concat, Numbers{2, 9});
  REQUIRE(nested.size() == 5);
  REQUIRE(id_of(nested.get(3)) == 9000);
  ConcatDataset copy(nested);  // a copy, not a one-part nesting
  REQUIRE(copy.num_parts() == 2);

  ConcatDataset empty(Numbers{0, 0}, Numbers{0, 0});
  REQUIRE(empty.size() == 0);
  REQUIRE_THROWS_AS(empty.get(0), std::out_of_range);
  REQUIRE_THAT(message_of<std::invalid_argument>([] { ConcatDataset(std::vector<Numbers>{}); }),
               Contains("ConcatDataset: no parts given"));
}

TEST_CASE("ConcatDataset names the parts whose samples have other fields", "[composition]") {
  ConcatDataset dtypes(Numbers{2, 0}, Int32Ids{2});
  REQUIRE(id_of(dtypes.get(0)) == 0);
  REQUIRE_THAT(message_of<Error>([&] { dtypes.get(2); }),
               Contains("ConcatDataset: the samples of part 1 have other fields than those of "
                        "part 0: id (int32), x (float32) against id (int64), x (float32)"));
  // The first part loaded sets the reference, whichever it is.
  ConcatDataset names(TensorDataset{{"y", Tensor::from<float>({1.0f, 2.0f})}}, Numbers{2, 0});
  REQUIRE(id_of(names.get(3)) == 1);
  REQUIRE_THAT(message_of<Error>([&] { names.get(0); }),
               Contains("the samples of part 0 have other fields than those of part 1"));
}

TEST_CASE("ChainDataset reads its parts in turn and restarts them each epoch", "[composition]") {
  std::vector<std::uint64_t> restarts;
  Stream<true> first{3, 1, 0, &restarts};
  Stream<false> second{2, 2};  // no start_epoch: it carries on where it stopped
  ChainDataset chain(first, Stream<true>{0, 3}, second);
  REQUIRE(chain.num_parts() == 3);
  REQUIRE(drain(chain) == std::vector<std::int64_t>{1000, 1001, 1002, 2000, 2001});
  REQUIRE(restarts.empty());  // no epoch was started: parts are not restarted

  chain.start_epoch(4);
  REQUIRE(drain(chain) == std::vector<std::int64_t>{1000, 1001, 1002});  // the second has ended
  REQUIRE(restarts == std::vector<std::uint64_t>{4});
  chain.start_epoch(5);
  REQUIRE(chain.next().has_value());
  REQUIRE(restarts == std::vector<std::uint64_t>{4, 5});

  std::vector<Stream<true>> parts = {{1, 1}, {1, 2}};
  ChainDataset from_vector(parts);
  from_vector.start_epoch(0);
  REQUIRE(drain(from_vector) == std::vector<std::int64_t>{1000, 2000});
}

TEST_CASE("ChainDataset names the part whose samples have other fields", "[composition]") {
  struct Other {
    bool done = false;
    std::optional<Sample> next() {
      if (done) return std::nullopt;
      done = true;
      return Sample().set("text", Tensor::from<std::uint8_t>({1, 2}));
    }
  };
  ChainDataset chain(Stream<true>{1, 1}, Other{});
  REQUIRE(chain.next().has_value());
  REQUIRE_THAT(message_of<Error>([&] { chain.next(); }),
               Contains("ChainDataset: the samples of part 1 have other fields than those of "
                        "part 0: text (uint8) against id (int64)"));
}

TEST_CASE("StackDataset puts aligned samples side by side", "[composition]") {
  SECTION("named parts prefix their fields") {
    StackDataset stack({{"a", Numbers{3, 1}}, {"b", OtherNumbers{3, 2}}});
    REQUIRE(stack.size() == 3);
    const Sample s = stack.get(2);
    REQUIRE(s.size() == 4);
    REQUIRE(s["a.id"].item<std::int64_t>() == 1002);
    REQUIRE(s["b.id"].item<std::int64_t>() == 2002);
    REQUIRE(s["b.x"].data<float>()[1] == 1.5f);
    REQUIRE_THROWS_AS(stack.get(3), std::out_of_range);
  }
  SECTION("unnamed parts keep their names, and a clash is an error") {
    StackDataset stack(Numbers{2, 1}, TensorDataset{{"label", Tensor::from<std::int64_t>({7, 8})}});
    const Sample s = stack.get(1);
    REQUIRE(s.size() == 3);
    REQUIRE(s["label"].item<std::int64_t>() == 8);
    StackDataset clash(Numbers{2, 1}, OtherNumbers{2, 2});
    REQUIRE_THAT(message_of<Error>([&] { clash.get(0); }),
                 Contains("StackDataset::get(0): part 1 has a field 'x' and an earlier part "
                          "already gave a field of that name"));
  }
  SECTION("sizes must agree and names differ") {
    REQUIRE_THAT(message_of<std::invalid_argument>([] {
                   StackDataset({{"a", Numbers{3, 1}}, {"b", Numbers{2, 2}}});
                 }),
                 Contains("StackDataset: part 1 ('b') has 2 samples but part 0 ('a') has 3"));
    REQUIRE_THAT(message_of<std::invalid_argument>([] {
                   StackDataset({{"a", Numbers{3, 1}}, {"a", Numbers{3, 2}}});
                 }),
                 Contains("parts 0 and 1 are both named 'a'"));
  }
}

TEST_CASE("transform() applies its function to map-style and iterable datasets", "[composition]") {
  auto doubled = transform(Numbers{4, 0}, [](Sample s) {
    const std::int64_t id = s["id"].item<std::int64_t>();
    s.set("id", Tensor::scalar<std::int64_t>(2 * id));
    return s;
  });
  static_assert(MapDataset<decltype(doubled)> && !IterableDataset<decltype(doubled)>);
  REQUIRE(doubled.size() == 4);
  REQUIRE(id_of(doubled.get(3)) == 6);

  int calls = 0;  // a stateful function: each copy of the dataset keeps its own
  auto counted = transform(Stream<true>{3, 1}, [&calls](Sample s) {
    ++calls;
    return s.set("call", Tensor::scalar<std::int32_t>(calls));
  });
  static_assert(IterableDataset<decltype(counted)> && RestartableDataset<decltype(counted)>);
  REQUIRE(drain(counted) == std::vector<std::int64_t>{1000, 1001, 1002});
  counted.start_epoch(1);
  REQUIRE(counted.next()->find("call")->item<std::int32_t>() == 4);
  REQUIRE(calls == 4);
}

TEST_CASE("wrappers pass a CachedDataset's counters through", "[composition]") {
  auto cached = std::make_shared<CachedDataset<Numbers>>(Numbers{4, 0}, 1 << 16);
  auto augmented = transform(cached, [](Sample s) { return s; });
  Subset subset(cached, {1, 2});
  ConcatDataset concat(subset, Numbers{2, 0});
  REQUIRE(augmented.get(1).size() == 2);
  REQUIRE(augmented.get(1).size() == 2);
  REQUIRE(augmented.cache_stats().hits == 1);
  REQUIRE(augmented.cache_stats().misses == 1);
  REQUIRE(subset.cache_stats().budget_bytes == cached->cache_stats().budget_bytes);
  REQUIRE(concat.cache_stats().budget_bytes == cached->cache_stats().budget_bytes);
  REQUIRE(ConcatDataset(Numbers{1, 0}).cache_stats().budget_bytes == 0);
}

TEST_CASE("sample_rng() inside a wrapped get() is the generator of the loader's index",
          "[composition]") {
  // What the loader does before each get(): seed sample_rng() from (seed, epoch, index).
  auto noisy = transform(Subset(Numbers{10, 0}, {9, 8, 7}), [](Sample s) {
    return s.set("noise", Tensor::scalar<std::uint64_t>(sample_rng().next()));
  });
  detail::begin_sample_rng(42, 3, 2);
  const Sample s = noisy.get(2);
  detail::end_sample_rng();
  REQUIRE(id_of(s) == 7);
  REQUIRE(s["noise"].item<std::uint64_t>() == Generator::from({42, 3, 2}).next());
}

}  // namespace
}  // namespace stoker
