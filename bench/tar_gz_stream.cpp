// The gzip decoder of streamed .tar.gz shards: CPU seconds to stream every record of one shard
// (4,096 members of 16 KiB of text, 64 MiB, gzip -6) through WebDatasetShards::stream in this
// process, pass after pass, and the median. It uses only the public API and writes its shard
// with GNU tar and gzip, so the same file builds at any commit: build it at two commits and run
// the two binaries interleaved to compare their decoders (docs/benchmarks.md).
//   tar_gz_stream [--dir DIR] [--passes N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "stoker/webdataset.hpp"

namespace {

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

constexpr int kMembers = 4096;
constexpr std::size_t kMemberBytes = 16384;

// DIR/g.tar.gz, written once: text of a few words, which gzip shrinks about 10x.
std::string make_shard(const std::string& dir) {
  const std::string shard = dir + "/g.tar.gz";
  if (std::filesystem::exists(shard)) return shard;
  std::filesystem::create_directories(dir + "/src");
  std::mt19937 random(1);
  const char* words[] = {"loader ", "shard ", "sample ", "batch ", "worker ", "tensor ", "epoch "};
  for (int i = 0; i < kMembers; ++i) {
    std::string text;
    while (text.size() < kMemberBytes) text += words[random() % 7];
    text.resize(kMemberBytes);
    char name[32];
    std::snprintf(name, sizeof name, "/src/%06d.txt", i);
    std::ofstream(dir + name, std::ios::binary) << text;
  }
  const std::string make = "tar -cf " + dir + "/g.tar -C " + dir + "/src . && gzip -6 -f " + dir +
                           "/g.tar && rm -r " + dir + "/src";
  if (std::system(make.c_str()) != 0) {
    std::fprintf(stderr, "tar_gz_stream: '%s' failed\n", make.c_str());
    std::exit(1);
  }
  return shard;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/stoker-tar-gz-bench";
  int passes = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--dir") {
      dir = argv[i + 1];
    } else if (arg == "--passes") {
      passes = std::max(1, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: tar_gz_stream [--dir DIR] [--passes N]\n");
      return 2;
    }
  }
  const std::string shard = make_shard(dir);
  stoker::ShardOptions options;
  options.decoders = stoker::FieldDecoders();  // the bytes as they are
  options.write_index = false;
  stoker::StreamOptions stream_options;
  stream_options.shuffle = false;
  stream_options.sample_counts = {kMembers};
  std::vector<double> seconds;
  for (int p = 0; p < passes; ++p) {
    stoker::ShardedStream stream =
        stoker::WebDatasetShards::stream({shard}, stream_options, options);
    const double start = cpu_seconds();
    std::size_t records = 0;
    std::size_t bytes = 0;
    while (std::optional<stoker::Sample> s = stream.next()) {
      ++records;
      bytes += (*s)["txt"].nbytes();
    }
    seconds.push_back(cpu_seconds() - start);
    std::printf("pass %d: %zu records, %zu bytes, %.3f CPU s, %.0f MB/s\n", p, records, bytes,
                seconds.back(), static_cast<double>(bytes) / seconds.back() / 1e6);
  }
  std::sort(seconds.begin(), seconds.end());
  std::printf("median: %.3f CPU s a pass over %s (%d passes)\n", seconds[seconds.size() / 2],
              shard.c_str(), passes);
  std::printf("reproduce: tar_gz_stream --dir %s --passes %d\n", dir.c_str(), passes);
}
