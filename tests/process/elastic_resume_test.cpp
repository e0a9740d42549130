// Elastic resume through the DataLoader, every rank's loader in this one process: with
// ShardShuffle as the batch sampler, global batch k (the ranks' batches k in rank order) is the
// same for 1, 2, 3, 4 and 8 ranks and any num_workers; a state saved on one world size mid-epoch
// resumes on another and the batches that follow are the uninterrupted run's; states that
// cannot continue (out-of-order batches on another world size, another order, a
// DistributedSampler's state on another world size) are refused with the reason.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "support/datasets.hpp"
#include "support/error_message.hpp"

using namespace stoker;
using stoker::test::message_of;

namespace {

using Batches = std::vector<std::vector<std::int64_t>>;  // [global batch] -> indices

// 9 shards, 250 samples; 4 partitions; global batches of 24 (10 full, one padded).
const std::vector<std::uint64_t> kShardSizes = {31, 17, 40, 0, 25, 33, 29, 45, 30};

std::shared_ptr<ShardShuffle> shuffle_for(std::size_t world, std::size_t rank) {
  ShardShuffle::Options o;
  o.global_batch_size = 24;
  o.canonical_partitions = 4;
  o.shuffle_block = 16;
  o.seed = 7;
  return std::make_shared<ShardShuffle>(kShardSizes, world, rank, o);
}

LoaderOptions options_for(std::size_t world, std::size_t rank, int workers) {
  LoaderOptions opt;
  opt.num_workers = workers;
  opt.batch_sampler = shuffle_for(world, rank);
  return opt;
}

// One rank's batches from its loader's current position to the end of `epochs` epochs,
// stopping early (with its state in `state`) after `stop_after` batches when that is set.
struct RankRun {
  Batches batches;
  std::string state;
};

RankRun run_rank(std::size_t world, std::size_t rank, int workers, const std::string& resume,
                 int epochs, std::size_t stop_after = SIZE_MAX) {
  DataLoader loader(test::IndexDataset{250, {}}, options_for(world, rank, workers));
  if (!resume.empty()) loader.load_state(resume);
  RankRun run;
  // Up to the end of epoch `epochs` - 1, wherever a resumed state starts.
  while (loader.epoch() < static_cast<std::uint64_t>(epochs)) {
    for (const Batch& batch : loader) {
      run.batches.push_back(test::batch_indices(batch));
      if (run.batches.size() == stop_after) {
        run.state = loader.state();
        return run;
      }
    }
  }
  return run;
}

// Global batches from every rank's run: batch k is the ranks' batches k in rank order.
Batches join(const std::vector<RankRun>& ranks) {
  Batches global(ranks.at(0).batches.size());
  for (const RankRun& r : ranks) {
    REQUIRE(r.batches.size() == global.size());  // equal batches on every rank
    for (std::size_t k = 0; k < global.size(); ++k) {
      global[k].insert(global[k].end(), r.batches[k].begin(), r.batches[k].end());
    }
  }
  return global;
}

Batches run_world(std::size_t world, int workers, const std::string& resume, int epochs,
                  std::size_t stop_after = SIZE_MAX, std::string* state = nullptr) {
  std::vector<RankRun> ranks;
  for (std::size_t r = 0; r < world; ++r) {
    ranks.push_back(run_rank(world, r, workers, resume, epochs, stop_after));
  }
  if (state != nullptr) {
    *state = ranks[0].state;
    // In order, every rank's state says the same but for its rank line.
    for (std::size_t r = 1; r < world; ++r) {
      REQUIRE(ranks[r].state.substr(0, ranks[r].state.rfind("rank ")) ==
              ranks[0].state.substr(0, ranks[0].state.rfind("rank ")));
    }
  }
  return join(ranks);
}

}  // namespace

TEST_CASE("elastic: global batches are the same on 1, 2, 3, 4 and 8 ranks, any num_workers",
          "[elastic]") {
  const Batches one = run_world(1, 2, "", 2);
  REQUIRE(one.size() == 22);  // 11 global batches an epoch
  for (const Batches::value_type& b : one) REQUIRE(b.size() == 24);
  CHECK(run_world(2, 0, "", 2) == one);
  CHECK(run_world(3, 1, "", 2) == one);
  CHECK(run_world(4, 2, "", 2) == one);
  CHECK(run_world(8, 1, "", 2) == one);
  // Each epoch's first 250 positions are every sample once.
  for (std::size_t epoch = 0; epoch < 2; ++epoch) {
    std::map<std::int64_t, int> seen;
    for (std::size_t k = 0; k < 11; ++k) {
      for (std::size_t j = 0; j < 24 && k * 24 + j < 250; ++j) ++seen[one[epoch * 11 + k][j]];
    }
    REQUIRE(seen.size() == 250);
    for (const auto& [index, count] : seen) REQUIRE(count == 1);
  }
}

TEST_CASE("elastic: a state saved mid-epoch on one world size resumes on another", "[elastic]") {
  const Batches expected = run_world(1, 0, "", 2);
  const auto [saved_on, resumed_on, stop] = GENERATE(table<std::size_t, std::size_t, std::size_t>(
      {{4, 2, 5}, {2, 4, 3}, {4, 3, 7}, {1, 4, 10}, {3, 1, 1}, {8, 2, 6}, {4, 8, 13}}));
  CAPTURE(saved_on, resumed_on, stop);
  std::string state;
  const Batches before = run_world(saved_on, 2, "", 2, stop, &state);
  INFO(state);
  REQUIRE(before.size() == stop);
  REQUIRE(state.size() < 400);
  const Batches after = run_world(resumed_on, 1, state, 2);
  REQUIRE(before.size() + after.size() == expected.size());
  Batches whole = before;
  whole.insert(whole.end(), after.begin(), after.end());
  CHECK(whole == expected);
}

TEST_CASE("elastic: states that cannot continue here are refused", "[elastic]") {
  SECTION("out-of-order batches, resumed on another world size") {
    // What rank 0 of 4 saves with in_order = false when batch 8 came before 6 and 7.
    std::string state = run_rank(4, 0, 0, "", 1, 6).state;
    const std::size_t done = state.find("\ndone\n");
    REQUIRE(done != std::string::npos);
    state.replace(done, 6, "\ndone 8\n");
    INFO(state);
    DataLoader other(test::IndexDataset{250, {}}, options_for(2, 0, 0));
    CHECK(message_of<std::invalid_argument>([&] { other.load_state(state); }) ==
          "DataLoader::load_state: the state has 1 batch handed out of order (in_order = "
          "false) by rank 0 of 4, which other ranks may not have had; this is rank 0 of 2: "
          "resume each rank from its own state on the same world size, or save states with "
          "in_order = true");
    DataLoader rank1(test::IndexDataset{250, {}}, options_for(4, 1, 0));
    CHECK_THROWS_AS(rank1.load_state(state), std::invalid_argument);
    // The rank that saved it takes it, and loads each remaining batch once.
    DataLoader same(test::IndexDataset{250, {}}, options_for(4, 0, 2));
    same.load_state(state);
    std::size_t batches = 0;
    for (const Batch& batch : same) {
      (void)batch;
      ++batches;
    }
    CHECK(batches == 11 - 6 - 1);
  }
  SECTION("another order") {
    const std::string state = run_rank(2, 0, 0, "", 1, 3).state;
    ShardShuffle::Options o = shuffle_for(2, 0)->options();
    o.seed = 8;
    LoaderOptions opt;
    opt.batch_sampler = std::make_shared<ShardShuffle>(kShardSizes, 2, 0, o);
    DataLoader loader(test::IndexDataset{250, {}}, opt);
    CHECK_THAT(message_of<std::invalid_argument>([&] { loader.load_state(state); }),
               Catch::StartsWith("DataLoader::load_state: the state was saved under the order "
                                 "'shard-shuffle/1 seed=7 ") &&
                   Catch::Contains("but this loader's sampler gives 'shard-shuffle/1 seed=8 "));
  }
  SECTION("a DistributedSampler's state on another world size") {
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.sampler = std::make_shared<DistributedSampler>(250, 4, 0, DistributedSampler::Options{});
    DataLoader loader(test::IndexDataset{250, {}}, opt);
    auto it = loader.begin();
    ++it;
    const std::string state = loader.state();
    LoaderOptions two = opt;
    two.sampler = std::make_shared<DistributedSampler>(250, 2, 0, DistributedSampler::Options{});
    DataLoader other(test::IndexDataset{250, {}}, two);
    CHECK(message_of<std::invalid_argument>([&] { other.load_state(state); }) ==
          "DataLoader::load_state: the state was saved under the order 'distributed/1 seed=0 "
          "shuffle=1 drop_last=0 replicas=4 samples=250', but this loader's sampler gives "
          "'distributed/1 seed=0 shuffle=1 drop_last=0 replicas=2 samples=250'; resume with the "
          "sampler built as it was (the same shards, seed and options; with ShardShuffle only "
          "the world size may change)");
    // Another rank of the same world size continues from the same step.
    LoaderOptions rank3 = opt;
    rank3.sampler = std::make_shared<DistributedSampler>(250, 4, 3, DistributedSampler::Options{});
    DataLoader third(test::IndexDataset{250, {}}, rank3);
    CHECK_NOTHROW(third.load_state(state));
  }
}
