// The pure parts of the shard engine: the epoch split across (rank, worker) with the
// equal-batches policy, and the shard-name brace patterns.
#include <map>
#include <set>

#include <catch2/catch.hpp>

#include "stoker/options.hpp"
#include "stoker/shards.hpp"

using namespace stoker;

TEST_CASE("plan_stream_split: kPad repeats the epoch's first records, kDrop cuts its tail",
          "[shards][split]") {
  const StreamSplit pad = plan_stream_split(100, 3, 2, EqualBatches::kPad);
  REQUIRE(pad.streams == 6);
  REQUIRE(pad.per_stream == 17);  // ceil(100 / 6)
  REQUIRE(pad.repeated == 2);
  REQUIRE(pad.dropped == 0);
  const StreamSplit drop = plan_stream_split(100, 3, 2, EqualBatches::kDrop);
  REQUIRE(drop.per_stream == 16);
  REQUIRE(drop.dropped == 4);
  REQUIRE(drop.repeated == 0);
  // num_workers 0 loads in the main process: one stream per rank.
  REQUIRE(plan_stream_split(10, 2, 0, EqualBatches::kPad).streams == 2);
  REQUIRE_THROWS_AS(plan_stream_split(10, 0, 1, EqualBatches::kPad), std::invalid_argument);
  REQUIRE_THROWS_WITH(plan_stream_split(10, 1, kAuto, EqualBatches::kPad),
                      Catch::Contains("not kAuto"));
}

TEST_CASE("the streams' ranges cover the epoch: each record once, or the padding twice",
          "[shards][split]") {
  const std::uint64_t total = GENERATE(std::uint64_t{1}, std::uint64_t{7}, std::uint64_t{100},
                                       std::uint64_t{101}, std::uint64_t{1000});
  const std::size_t world = GENERATE(std::size_t{1}, std::size_t{3});
  const int workers = GENERATE(0, 1, 4);
  for (const EqualBatches policy : {EqualBatches::kPad, EqualBatches::kDrop}) {
    CAPTURE(total, world, workers, policy == EqualBatches::kPad);
    const StreamSplit s = plan_stream_split(total, world, workers, policy);
    std::map<std::uint64_t, int> seen;
    for (std::size_t q = 0; q < s.streams; ++q) {
      for (std::uint64_t i = 0; i < s.per_stream; ++i) ++seen[(s.first(q) + i) % total];
    }
    std::uint64_t repeats = 0;
    int previous = seen.empty() ? 0 : seen.begin()->second;
    for (const auto& [record, n] : seen) {
      REQUIRE(n <= previous);  // the epoch's first records are the ones seen more often
      REQUIRE(n >= previous - 1);
      previous = n;
      repeats += static_cast<std::uint64_t>(n - 1);
    }
    if (policy == EqualBatches::kPad) {
      REQUIRE(seen.size() == total);
      REQUIRE(repeats == s.repeated);
      if (s.streams <= total) REQUIRE(seen.begin()->second <= 2);  // padding repeats once
    } else {
      REQUIRE(repeats == 0);
      REQUIRE(seen.size() == total - s.dropped);
      if (s.per_stream > 0) REQUIRE(seen.rbegin()->first == total - s.dropped - 1);
    }
  }
}

TEST_CASE("batches per stream and per rank do not depend on the rank", "[shards][split]") {
  const StreamSplit s = plan_stream_split(1003, 3, 2, EqualBatches::kPad);
  REQUIRE(s.per_stream == 168);
  REQUIRE(s.batches_per_stream(10, false) == 17);
  REQUIRE(s.batches_per_stream(10, true) == 16);
  REQUIRE(s.batches_per_stream(200, true) == 0);
  REQUIRE(s.batches_per_stream(0, false) == 0);
  REQUIRE(s.first(0) == 0);
  REQUIRE(s.first(5) == 840);
  // first() stays exact where stream x per_stream does not fit in 64 bits.
  const StreamSplit huge = plan_stream_split(~std::uint64_t{0} - 1, 4, 0, EqualBatches::kDrop);
  REQUIRE(huge.first(3) == 3 * huge.per_stream);
  REQUIRE(huge.first(3) < huge.total);
}

TEST_CASE("expand_shards: ranges keep their width, lists, and several groups", "[shards][split]") {
  REQUIRE(expand_shards("a.tar") == std::vector<std::string>{"a.tar"});
  REQUIRE(expand_shards("d/s-{008..011}.tar") ==
          std::vector<std::string>{"d/s-008.tar", "d/s-009.tar", "d/s-010.tar", "d/s-011.tar"});
  REQUIRE(expand_shards("{train,val}-{0..1}.tar") ==
          std::vector<std::string>{"train-0.tar", "train-1.tar", "val-0.tar", "val-1.tar"});
  REQUIRE(expand_shards("x{7..7}") == std::vector<std::string>{"x7"});
  REQUIRE_THROWS_WITH(expand_shards("s-{000..009.tar"), Catch::Contains("unbalanced"));
  REQUIRE_THROWS_WITH(expand_shards("s-}.tar"), Catch::Contains("without"));
  REQUIRE_THROWS_WITH(expand_shards("s-{9..1}.tar"), Catch::Contains("not a range"));
  REQUIRE_THROWS_WITH(expand_shards("s-{a..b}.tar"), Catch::Contains("not a range"));
}
