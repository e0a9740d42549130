// One process per GPU, each with its own loader on its shard: run it under a launcher,
//   mpirun -np 4 --oversubscribe --allow-run-as-root build/release/examples/distributed
//   torchrun --nproc_per_node 4 ... / srun -n 4 ...  (any launcher that sets rank variables)
// or alone (one rank). DistributedSampler::from_env() reads the rank and world size the
// launcher set; every rank sees a different quarter of each epoch, and together all samples.
#include <cstdio>
#include <memory>

#include <stoker/stoker.hpp>

#include "cli.hpp"

struct Samples {
  std::size_t size() const { return 1000; }
  stoker::Sample get(std::size_t i) const {
    stoker::Sample s;
    s.set("x", stoker::Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
    return s;
  }
};

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: distributed\n  one loader per rank on its DistributedSampler shard; run "
                   "it under a launcher\n  (mpirun -np 2 distributed, torchrun, srun), or alone as "
                   "rank 0 of 1.\n  It takes no arguments.");
  cli.done();
  const stoker::LaunchInfo launch = stoker::detect_launch();
  stoker::DistributedSampler::Options shard;
  shard.shuffle = true;
  shard.seed = 42;  // the same on every rank, so the shards partition one permutation
  auto sampler = std::make_shared<stoker::DistributedSampler>(
      stoker::DistributedSampler::from_env(Samples{}.size(), shard));
  stoker::LoaderOptions opt;
  opt.batch_size = 32;
  opt.num_workers = 1;  // co-located ranks share the machine's cores
  opt.sampler = sampler;
  stoker::DataLoader loader(Samples{}, opt);
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    loader.set_epoch(epoch);  // the sampler reshuffles with seed + epoch
    long long sum = 0;
    std::size_t samples = 0;
    for (const stoker::Batch& batch : loader) {
      for (std::size_t r = 0; r < batch.size(); ++r) sum += batch["x"].data<std::int64_t>()[r];
      samples += batch.size();
    }
    std::printf("rank %zu of %zu (%s), epoch %llu: %zu samples, sum of indices %lld\n", launch.rank,
                launch.world_size, launch.source.c_str(), static_cast<unsigned long long>(epoch),
                samples, sum);
  }
  return 0;
}
