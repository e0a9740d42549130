// Run under a launcher (mpirun): each rank reads WebDataset shards in ShardShuffle's order
// (global batches of 24 from 4 canonical partitions, seed 7) for 2 epochs and writes, one line
// per batch, "<epoch> <batch> <indices...>" to <dir>/<tag>.rank<r>.txt.
//   elastic_ranks <dir> <tag> <num_workers> <stop after N batches | -> <state file | -> <shard>...
// With a stop, it saves loader.state() after its N-th batch to <dir>/<tag>.state<r> and ends
// (mid-epoch); with a state file, it loads that state first and goes on from there.
// tests/mpi/elastic_mpirun_test.cpp runs it on 1, 2, 3 and 4 ranks and checks the files.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "stoker/stoker.hpp"
#include "stoker/webdataset.hpp"

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr,
                 "usage: elastic_ranks <dir> <tag> <num_workers> <stop|-> <state|-> <shard>...\n");
    return 2;
  }
  try {
    const std::string dir = argv[1];
    const std::string tag = argv[2];
    const int workers = std::atoi(argv[3]);
    const std::string stop_text = argv[4];
    const std::string state_file = argv[5];
    const std::vector<std::string> shards(argv + 6, argv + argc);
    const std::size_t stop = stop_text == "-" ? 0 : std::stoul(stop_text);

    stoker::ShardOptions fields;
    fields.fields = {stoker::FieldSpec{"index", "", {}}};
    stoker::WebDatasetShards dataset(shards, fields);
    stoker::ShardShuffle::Options order;
    order.global_batch_size = 24;
    order.canonical_partitions = 4;
    order.shuffle_block = 16;
    order.seed = 7;
    auto shuffle =
        std::make_shared<stoker::ShardShuffle>(stoker::ShardShuffle::from_env(dataset, order));
    const std::size_t rank = shuffle->rank();

    stoker::LoaderOptions opt;
    opt.num_workers = workers;
    opt.batch_sampler = shuffle;
    stoker::DataLoader loader(dataset, opt);
    // A resumed epoch starts at the state's position: its batches are numbered from there.
    std::uint64_t resumed_epoch = 0;
    std::size_t resumed_position = 0;
    if (state_file != "-") {
      std::ifstream in(state_file);
      std::stringstream text;
      text << in.rdbuf();
      loader.load_state(text.str());
      std::istringstream words(text.str());
      for (std::string word; words >> word;) {
        if (word == "epoch") words >> resumed_epoch;
        if (word == "position") words >> resumed_position;
      }
    }
    std::ofstream out(dir + "/" + tag + ".rank" + std::to_string(rank) + ".txt");
    std::size_t seen = 0;
    while (loader.epoch() < 2) {
      const std::uint64_t epoch = loader.epoch();
      std::size_t k = state_file != "-" && epoch == resumed_epoch ? resumed_position : 0;
      auto it = loader.begin();
      for (; it != loader.end(); ++it, ++k) {
        const stoker::Batch& batch = *it;
        out << epoch << " " << k;
        const std::int64_t* v = batch["index"].data<std::int64_t>();
        for (std::size_t r = 0; r < batch.size(); ++r) out << " " << v[r];
        out << "\n";
        if (++seen == stop) {
          std::ofstream(dir + "/" + tag + ".state" + std::to_string(rank)) << loader.state();
          return 0;
        }
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_ranks: %s\n", e.what());
    return 1;
  }
}
