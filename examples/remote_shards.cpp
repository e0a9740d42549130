// WebDataset shards in S3: written here with WebDatasetWriter, uploaded with upload_file() (each
// shard and its .idx), named again with list_shards() (an S3 listing), then streamed by a
// 2-worker DataLoader straight from the bucket. The first epoch downloads each shard once into
// the node-wide cache (both workers share it); the second reads the cache and fetches nothing.
// Any S3 server will do; the test runs it against the loopback s3rver of the remote tests:
//   remote_shards --endpoint http://127.0.0.1:PORT --bucket NAME [--dir DIR]
// Credentials come from the environment as the AWS tools find them (AWS_ACCESS_KEY_ID, ...,
// AWS_PROFILE); with none, requests go unsigned.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <stoker/remote_shards.hpp>
#include <stoker/stoker.hpp>
#include <stoker/webdataset.hpp>

#include "cli.hpp"

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: remote_shards --endpoint URL --bucket NAME [--dir DIR]\n"
                   "  uploads four WebDataset shards to s3://NAME/ on the S3 server at URL and\n"
                   "  streams them back through the cache in DIR (default\n"
                   "  /tmp/stoker-example-remote)");
  const std::string endpoint = cli.text("--endpoint", "");
  const std::string bucket = cli.text("--bucket", "");
  const std::string dir = cli.text("--dir", "/tmp/stoker-example-remote");
  cli.done();
  if (endpoint.empty() || bucket.empty()) {
    std::fprintf(stderr, "remote_shards: --endpoint and --bucket are needed; see --help\n");
    return 2;
  }
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/shards");
  try {
    stoker::ShardOptions options;
    options.remote.endpoint = endpoint;                          // not AWS: a server of your own
    options.remote.addressing = stoker::AddressingStyle::kPath;  // s3rver, MinIO, Ceph...
    options.remote.cache_dir = dir + "/cache";
    options.remote.cache_limit = 64 << 20;  // bytes on disk for the whole machine
    options.remote.read_ahead_shards = 2;   // the next two shards download while one is read

    stoker::WebDatasetWriterOptions wo;
    wo.pattern = dir + "/shards/part-%03d.tar";
    wo.max_samples_per_shard = 250;
    stoker::WebDatasetWriter writer(wo);
    for (int i = 0; i < 1000; ++i) {
      stoker::Sample s;
      s.set("cls", stoker::Tensor::scalar<std::int64_t>(i));
      writer.write(std::to_string(100000 + i), s);
    }
    const std::string prefix = "s3://" + bucket + "/example-remote/";
    for (const std::string& shard : writer.close()) {
      const std::string name = std::filesystem::path(shard).filename().string();
      stoker::upload_file(shard, prefix + name, options.remote);
      stoker::upload_file(shard + ".idx", prefix + name + ".idx", options.remote);
    }

    // The shards by listing (a brace range, "part-{000..003}.tar", names them as well).
    const std::vector<std::string> urls =
        stoker::list_shards(prefix + "part-*.tar", options.remote);
    stoker::StreamOptions so;
    so.shuffle_buffer = 64;
    stoker::LoaderOptions opt;
    opt.batch_size = 50;
    opt.num_workers = 2;
    stoker::DataLoader loader(stoker::WebDatasetShards::stream(urls, so, options), opt);
    bool ok = urls.size() == 4;
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<bool> seen(1000, false);
      std::size_t samples = 0;
      for (const stoker::Batch& batch : loader) {
        const std::int64_t* v = batch["cls"].data<std::int64_t>();
        for (std::size_t k = 0; k < batch.size(); ++k) {
          ok = ok && v[k] >= 0 && v[k] < 1000 && !seen[static_cast<std::size_t>(v[k])];
          seen[static_cast<std::size_t>(v[k])] = true;
        }
        samples += batch.size();
      }
      const stoker::LoaderStats st = loader.stats();
      std::printf(
          "epoch %d: %zu samples from %zu shards; %llu bytes downloaded in %llu requests, "
          "%llu shards from the cache, %llu downloaded\n",
          epoch, samples, urls.size(), static_cast<unsigned long long>(st.remote_bytes_fetched),
          static_cast<unsigned long long>(st.remote_requests),
          static_cast<unsigned long long>(st.remote_cache_hits),
          static_cast<unsigned long long>(st.remote_cache_misses));
      ok = ok && samples == 1000;
      // The first epoch downloads every shard once; the second finds them all in the cache.
      ok = ok && (epoch == 0 ? st.remote_bytes_fetched > 0 : st.remote_bytes_fetched == 0);
    }
    std::filesystem::remove_all(dir);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "remote_shards: %s\n", e.what());
    return 1;
  }
}
