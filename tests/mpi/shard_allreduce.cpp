// Run under mpirun: every rank reads the same WebDataset shards of unequal sizes, map-style
// (DistributedSampler) and streamed (the shard split), with each equal-batches policy, for 2
// epochs, and calls MPI_Allreduce after every batch. A rank with fewer batches would meet the
// others' per-batch all-reduce with its end-of-epoch one: the sums say so (and, past the last
// batch, the others would wait forever: the test runs this under a timeout). Each rank writes
// the indices it received to <out>/rank<r>.txt, one line per (mode, policy, epoch), for
// tests/mpi/shard_mpirun_test.cpp to check.
#include <mpi.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "stoker/stoker.hpp"
#include "stoker/webdataset.hpp"

namespace {

constexpr int kPerBatch = 1;
constexpr int kEndOfEpoch = 1000;

// The sum of `value` over the ranks must be value x world size: every rank made the same call.
bool all_agree(int value, int world) {
  int sum = 0;
  MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return sum == value * world;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (argc < 3) {
    std::fprintf(stderr, "usage: shard_allreduce <output directory> <shard>...\n");
    MPI_Finalize();
    return 2;
  }
  const std::vector<std::string> shards(argv + 2, argv + argc);
  int status = 0;
  try {
    std::ofstream out(std::string(argv[1]) + "/rank" + std::to_string(rank) + ".txt");
    stoker::ShardOptions fields;
    fields.fields = {stoker::FieldSpec{"index", "", {}}};
    stoker::LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = 2;
    opt.persistent_workers = true;  // forked once: MPI_Init has started threads by now
    for (const char* mode : {"map", "stream"}) {
      for (const stoker::EqualBatches policy :
           {stoker::EqualBatches::kPad, stoker::EqualBatches::kDrop}) {
        const bool drop = policy == stoker::EqualBatches::kDrop;
        std::unique_ptr<stoker::DataLoader<stoker::WebDatasetShards>> map_loader;
        std::unique_ptr<stoker::DataLoader<stoker::ShardedStream>> stream_loader;
        if (std::string(mode) == "map") {
          stoker::WebDatasetShards ds(shards, fields);
          stoker::LoaderOptions o = opt;
          o.sampler = std::make_shared<stoker::DistributedSampler>(
              ds.size(), static_cast<std::size_t>(world), static_cast<std::size_t>(rank),
              stoker::DistributedSampler::Options{true, 17, drop});
          map_loader = std::make_unique<stoker::DataLoader<stoker::WebDatasetShards>>(ds, o);
        } else {
          stoker::StreamOptions so;
          so.seed = 17;
          so.shuffle_buffer = 8;
          so.rank = static_cast<std::size_t>(rank);
          so.world_size = static_cast<std::size_t>(world);
          so.equal_batches = policy;
          stream_loader = std::make_unique<stoker::DataLoader<stoker::ShardedStream>>(
              stoker::WebDatasetShards::stream(shards, so, fields), opt);
        }
        for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
          std::vector<std::int64_t> seen;
          std::size_t batches = 0;
          auto consume = [&](const stoker::Batch& batch) {
            const std::int64_t* v = batch["index"].data<std::int64_t>();
            seen.insert(seen.end(), v, v + batch.size());
            ++batches;
            if (!all_agree(kPerBatch, world)) {
              throw std::runtime_error("rank " + std::to_string(rank) + " batch " +
                                       std::to_string(batches) +
                                       ": another rank had already finished its epoch");
            }
          };
          if (map_loader) {
            map_loader->set_epoch(epoch);
            for (const stoker::Batch& batch : *map_loader) consume(batch);
          } else {
            stream_loader->set_epoch(epoch);
            for (const stoker::Batch& batch : *stream_loader) consume(batch);
          }
          if (!all_agree(kEndOfEpoch, world)) {
            throw std::runtime_error("rank " + std::to_string(rank) + ": epoch " +
                                     std::to_string(epoch) + " ended after " +
                                     std::to_string(batches) +
                                     " batches while another rank still had batches");
          }
          out << mode << " " << (drop ? "drop" : "pad") << " " << epoch << " " << batches;
          for (const std::int64_t v : seen) out << " " << v;
          out << "\n";
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shard_allreduce: %s\n", e.what());
    status = 1;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
