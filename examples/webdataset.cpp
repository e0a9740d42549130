// WebDataset tar shards, map-style: write a few shards with WebDatasetWriter (what stoker-shard
// does for an image folder), then read them back through their index with any sampler: here
// a shuffled DataLoader with 2 workers. Each sample is the shard members sharing a key
// ("000000017.bin", "000000017.cls"); fields are decoded by name: "cls" to an int64 scalar,
// "bin" as raw bytes. ShardOptions::fields picks and renames fields.
//   webdataset [--dir DIR]
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include <stoker/stoker.hpp>
#include <stoker/webdataset.hpp>

int main(int argc, char** argv) {
  std::string dir = "/tmp/stoker-example-webdataset";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0) {
      std::printf("usage: webdataset [--dir DIR]  (writes shards into DIR, then reads them)\n");
      return 0;
    } else if (std::strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
      dir = argv[++i];
    } else {
      std::fprintf(stderr, "webdataset: unknown option '%s'; see --help\n", argv[i]);
      return 2;
    }
  }
  std::filesystem::create_directories(dir);
  try {
    // 1000 samples of 8 bytes and a label, in shards of at most 256 KiB, each with its index.
    stoker::WebDatasetWriterOptions wo;
    wo.pattern = dir + "/train-%04d.tar";
    wo.max_shard_bytes = 256 * 1024;
    stoker::WebDatasetWriter writer(wo);
    for (int i = 0; i < 1000; ++i) {
      stoker::Sample s;
      s.set("bin",
            stoker::Tensor::from(std::vector<std::uint8_t>(8, static_cast<std::uint8_t>(i))));
      s.set("cls", stoker::Tensor::scalar<std::int64_t>(i % 10));
      writer.write(std::to_string(100000 + i), s);
    }
    const std::vector<std::string> shards = writer.close();

    stoker::ShardOptions so;
    so.fields = {{"bin", "data", {}}, {"cls", "label", {}}};
    stoker::WebDatasetShards dataset(shards, so);  // main process: loads each shard's index
    stoker::LoaderOptions opt;
    opt.batch_size = 100;
    opt.num_workers = 2;
    opt.shuffle = true;
    stoker::DataLoader loader(dataset, opt);
    std::int64_t label_sum = 0;
    std::size_t samples = 0;
    for (const stoker::Batch& batch : loader) {
      const std::int64_t* label = batch["label"].data<std::int64_t>();
      for (std::size_t r = 0; r < batch.size(); ++r) label_sum += label[r];
      samples += batch.size();
    }
    std::printf("%zu shards, %zu samples read map-style, label sum %lld (expected 4500)\n",
                shards.size(), samples, static_cast<long long>(label_sum));
    std::filesystem::remove_all(dir);
    return samples == 1000 && label_sum == 4500 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "webdataset: %s\n", e.what());
    return 1;
  }
}
