// Elastic resume: a sharded corpus read in ShardShuffle's order. A job on 4 ranks is stopped
// after 3 steps and resumed on 2 ranks from rank 0's saved state; the global batches it then
// delivers are those an uninterrupted run on 1 rank delivers, so the epoch is read exactly
// once. Every "rank" runs in this one process here, one loader each; in a real job each rank
// is its own process and builds its ShardShuffle with from_env() (docs/distributed.md).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <stoker/stoker.hpp>

#include "cli.hpp"

// 12 shards of 50 samples; sample i holds its index (a real corpus: a ShardedDataset).
struct Corpus {
  std::size_t size() const { return 600; }
  stoker::Sample get(std::size_t i) const {
    stoker::Sample s;
    s.set("index", stoker::Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
    return s;
  }
};

using Step = std::vector<std::int64_t>;  // one global batch: every rank's part, in rank order

stoker::ShardShuffle::Options order() {
  stoker::ShardShuffle::Options o;
  o.global_batch_size = 32;    // per step, over all ranks: the same at every world size
  o.canonical_partitions = 4;  // fixed for the run's life
  o.seed = 42;
  return o;
}

// The loader of `rank` among `world`, resumed from `state` when it is not empty.
stoker::DataLoader<Corpus> loader_for(std::size_t world, std::size_t rank,
                                      const std::string& state) {
  const std::vector<std::uint64_t> shard_sizes(12, 50);
  stoker::LoaderOptions opt;
  opt.num_workers = 1;
  opt.batch_sampler = std::make_shared<stoker::ShardShuffle>(shard_sizes, world, rank, order());
  stoker::DataLoader<Corpus> loader(Corpus{}, opt);
  if (!state.empty()) loader.load_state(state);
  return loader;
}

// Runs `world` ranks for at most `steps` steps of the current epoch; rank 0's state after the
// last step goes to `state`.
std::vector<Step> run(std::size_t world, const std::string& resume, std::size_t steps,
                      std::string* state) {
  std::vector<Step> global;
  for (std::size_t rank = 0; rank < world; ++rank) {
    auto loader = loader_for(world, rank, resume);
    std::size_t k = 0;
    for (const stoker::Batch& batch : loader) {
      if (global.size() <= k) global.emplace_back();
      const std::int64_t* v = batch["index"].data<std::int64_t>();
      global[k].insert(global[k].end(), v, v + batch.size());
      if (++k == steps) {
        if (rank == 0 && state != nullptr) *state = loader.state();
        break;
      }
    }
  }
  return global;
}

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: elastic_resume\n  a run on 4 ranks stopped after 3 steps, resumed on "
                   "2 ranks.\n  It takes no arguments.");
  cli.done();
  const std::vector<Step> reference = run(1, "", SIZE_MAX, nullptr);
  std::string state;
  std::vector<Step> steps = run(4, "", 3, &state);
  std::printf("4 ranks, stopped after 3 steps; rank 0 saved (%zu bytes):\n%s", state.size(),
              state.c_str());
  const std::vector<Step> rest = run(2, state, SIZE_MAX, nullptr);
  steps.insert(steps.end(), rest.begin(), rest.end());
  std::printf("resumed on 2 ranks: %zu more steps; %zu steps in all, the 1-rank run has %zu\n",
              rest.size(), steps.size(), reference.size());
  if (steps != reference) {
    std::printf("the global batches differ from the 1-rank run's\n");
    return 1;
  }
  std::printf("every global batch is the 1-rank run's: the epoch was read exactly once\n");
  return 0;
}
