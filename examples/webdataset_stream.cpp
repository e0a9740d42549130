// WebDataset shards streamed: shards read front to back (what .tar.gz / .tar.zst shards and
// "pipe:<command>" shards need), in a new shard order each epoch and through a shuffle buffer,
// split across (rank, worker) so every rank gets the same number of batches (EqualBatches).
// A stream has its own resume state: saved after a batch (with the loader options), loaded
// into a fresh stream, it makes the epoch go on with exactly the batches that were to come.
//   webdataset_stream [--dir DIR]
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <stoker/stoker.hpp>
#include <stoker/webdataset.hpp>

namespace {

std::vector<std::int64_t> read_epoch(stoker::DataLoader<stoker::ShardedStream>& loader,
                                     std::size_t stop_after, std::string* state) {
  std::vector<std::int64_t> seen;
  std::size_t batches = 0;
  for (const stoker::Batch& batch : loader) {
    const std::int64_t* v = batch["cls"].data<std::int64_t>();
    seen.insert(seen.end(), v, v + batch.size());
    if (++batches == stop_after) {
      // What a training loop saves beside its checkpoint (DataLoader::state() is for
      // map-style datasets; a stream's position is its own).
      *state = loader.dataset().state(/*epoch=*/0, batches, loader.options());
      break;
    }
  }
  return seen;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/stoker-example-webdataset-stream";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0) {
      std::printf("usage: webdataset_stream [--dir DIR]  (writes shards into DIR, streams them)\n");
      return 0;
    } else if (std::strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
      dir = argv[++i];
    } else {
      std::fprintf(stderr, "webdataset_stream: unknown option '%s'; see --help\n", argv[i]);
      return 2;
    }
  }
  std::filesystem::create_directories(dir);
  try {
    stoker::WebDatasetWriterOptions wo;
    wo.pattern = dir + "/part-%03d.tar";
    wo.max_samples_per_shard = 150;
    stoker::WebDatasetWriter writer(wo);
    for (int i = 0; i < 1000; ++i) {
      stoker::Sample s;
      s.set("cls", stoker::Tensor::scalar<std::int64_t>(i));  // the sample's number, as a label
      writer.write(std::to_string(100000 + i), s);
    }
    const std::vector<std::string> shards = writer.close();

    stoker::StreamOptions so;
    so.seed = 7;
    so.shuffle_buffer = 64;
    const stoker::LaunchInfo launch = stoker::detect_launch();  // rank 0 of 1 when run alone
    so.rank = launch.rank;
    so.world_size = launch.world_size;
    stoker::LoaderOptions opt;
    opt.batch_size = 32;
    opt.num_workers = 2;

    stoker::DataLoader whole(stoker::WebDatasetShards::stream(shards, so), opt);
    std::string unused;
    const std::vector<std::int64_t> all = read_epoch(whole, 0, &unused);

    stoker::DataLoader first(stoker::WebDatasetShards::stream(shards, so), opt);
    std::string state;
    const std::vector<std::int64_t> head = read_epoch(first, 10, &state);

    stoker::DataLoader resumed(stoker::WebDatasetShards::stream(shards, so), opt);
    resumed.dataset().load_state(state);  // before the first begin(): the workers inherit it
    const std::vector<std::int64_t> rest = read_epoch(resumed, 0, &unused);

    std::vector<std::int64_t> joined = head;
    joined.insert(joined.end(), rest.begin(), rest.end());
    const stoker::StreamSplit split = whole.dataset().split(opt.num_workers);
    std::printf(
        "%zu shards streamed: %zu samples (%llu per worker stream, %llu batches per "
        "rank); resumed after 10 batches: %zu + %zu samples, %s\n",
        shards.size(), all.size(), static_cast<unsigned long long>(split.per_stream),
        static_cast<unsigned long long>(split.batches_per_stream(32, false) * 2), head.size(),
        rest.size(), joined == all ? "the same epoch" : "DIFFERENT");
    std::filesystem::remove_all(dir);
    return joined == all && all.size() == 1000 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "webdataset_stream: %s\n", e.what());
    return 1;
  }
}
