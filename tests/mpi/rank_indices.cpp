// Run under a launcher (mpirun, torchrun, srun): each rank loads its DistributedSampler shard
// of a 103-sample dataset for 2 epochs with 2 workers and writes the indices it received,
// one line per epoch, to <dir>/rank<r>.txt. tests/mpi/mpirun_test.cpp checks the files.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "stoker/stoker.hpp"

namespace {

struct Numbers {
  std::size_t size() const { return 103; }
  stoker::Sample get(std::size_t i) const {
    stoker::Sample s;
    s.set("value", stoker::Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
    return s;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: rank_indices <output directory>\n");
    return 2;
  }
  try {
    const stoker::LaunchInfo launch = stoker::detect_launch();
    stoker::DistributedSampler::Options dist;
    dist.seed = 11;
    auto sampler = std::make_shared<stoker::DistributedSampler>(
        stoker::DistributedSampler::from_env(Numbers{}.size(), dist));
    stoker::LoaderOptions opt;
    opt.batch_size = 5;
    opt.num_workers = 2;
    opt.sampler = sampler;
    stoker::DataLoader loader(Numbers{}, opt);
    std::ofstream out(std::string(argv[1]) + "/rank" + std::to_string(launch.rank) + ".txt");
    out << launch.source << " " << launch.rank << " " << launch.world_size << "\n";
    for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
      loader.set_epoch(epoch);
      for (const stoker::Batch& batch : loader) {
        const std::int64_t* v = batch["value"].data<std::int64_t>();
        for (std::size_t r = 0; r < batch.size(); ++r) out << v[r] << " ";
      }
      out << "\n";
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank_indices: %s\n", e.what());
    return 1;
  }
}
