// Run under mpirun by tests/remote/datasets_test.cpp: each rank opens the same WebDataset
// shards on s3rver (map-style, their .idx files beside them) with one cache directory for the
// node, loads its DistributedSampler part of every shard with 2 workers, and writes to
// <dir>/rank<r>.txt its rank, the bytes it fetched (index files, then the shards its workers
// fetched), and the indices it loaded.
// Both ranks need every shard, so a cache that is not shared across the node's processes
// would download each shard twice.
//
//   remote_ranks <output dir> <cache dir> <s3 url>...
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "stoker/stoker.hpp"
#include "support/remote_servers.hpp"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: remote_ranks <output dir> <cache dir> <s3 url>...\n");
    return 2;
  }
  try {
    const stoker::LaunchInfo launch = stoker::detect_launch();
    stoker::ShardOptions options;
    options.remote = stoker::test::RemoteServers::get().s3_options(argv[2]);
    options.remote.part_size = 64 << 10;  // several parts per shard, from both ranks at once
    const std::vector<std::string> urls(argv + 3, argv + argc);
    stoker::WebDatasetShards shards(urls, options);
    stoker::DistributedSampler::Options dist;
    dist.seed = 5;
    stoker::LoaderOptions opt;
    opt.batch_size = 8;
    opt.num_workers = 2;
    opt.timeout = std::chrono::seconds(60);
    opt.sampler = std::make_shared<stoker::DistributedSampler>(
        stoker::DistributedSampler::from_env(shards.size(), dist));
    // The .idx files, read by the constructor in this process.
    const std::uint64_t index_bytes = shards.remote_stats().bytes_fetched;
    std::vector<std::int64_t> seen;
    stoker::DataLoader loader(shards, opt);
    for (const stoker::Batch& batch : loader) {
      const std::int64_t* v = batch["index"].data<std::int64_t>();
      seen.insert(seen.end(), v, v + batch.size());
    }
    // The workers' downloads, counted in this process once the epoch has ended.
    const std::uint64_t shard_bytes = loader.stats().remote_bytes_fetched;
    std::ofstream out(std::string(argv[1]) + "/rank" + std::to_string(launch.rank) + ".txt");
    out << launch.rank << " " << launch.world_size << " " << index_bytes << " " << shard_bytes
        << "\n";
    for (const std::int64_t v : seen) out << v << " ";
    out << "\n";
    return out.good() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "remote_ranks: %s\n", e.what());
    return 1;
  }
}
