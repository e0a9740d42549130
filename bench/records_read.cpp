// records_read: how fast the record readers serve tiny records (100-byte TFRecord Examples and
// MDS samples), the case where per-record overhead, not I/O, sets the speed. Writes the files
// into a temporary directory (page cache warm), then times, each over every record:
//   tfrecord frames    index walk + CRC32C check of each record's data (no Example parse)
//   tfrecord get()     TFRecordDataset::get(i) in index order: read, CRC, parse, Sample
//   tfrecord get() shuffled   the same in a random order
//   mds get()          MdsDataset::get(i) in index order, then shuffled
//   tfrecord get() + fstat   get(i) and one fstat() of the file: what checking the file's
//                      size on every read (instead of the mapping guard) would cost
//   token get()        TokenDataset::get(i) of 64-token uint16 windows (views), shuffled
//   npy get()          NpyDataset::get(i) of 64-byte rows (views), shuffled
//   tfrecord loader    a DataLoader with 1 worker (batch 256), records/s at the consumer, in
//                      index order, then with shuffle = true (a new order each pass)
// and prints records/s for each.
//
//   build/release/bench/records_read [--records 2000000] [--repeat 3] [--only 'mds get']
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "datasets/records/crc32c.hpp"
#include "datasets/records/example_proto.hpp"
#include "datasets/records/tfrecord.hpp"
#include "os/mapped_file.hpp"
#include "os/posix.hpp"
#include "stoker/mds_dataset.hpp"
#include "stoker/stoker.hpp"
#include "stoker/tfrecord_dataset.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Record k: an Example of "id" (int64) and "data" (bytes), about 100 bytes framed.
std::vector<std::byte> example(std::size_t k) {
  using stoker::detail::ExampleValue;
  using stoker::detail::FeatureKind;
  return stoker::detail::serialize_example(
      {{"id", FeatureKind::kInt64, {}, {}, {static_cast<std::int64_t>(k)}},
       {"data", FeatureKind::kBytes, {std::string(64, static_cast<char>('a' + k % 26))}, {}, {}}});
}

void write_bytes(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

// An MDS shard of `n` samples with columns data (bytes, 80) and id (int), and its index.json.
void write_mds(const std::string& dir, std::size_t n) {
  const std::string config = "{}";
  std::vector<std::byte> shard(4 + 4 * (n + 1) + config.size());
  const auto put32 = [&](std::size_t at, std::uint32_t v) { std::memcpy(&shard[at], &v, 4); };
  put32(0, static_cast<std::uint32_t>(n));
  std::memcpy(&shard[4 + 4 * (n + 1)], config.data(), config.size());
  for (std::size_t k = 0; k < n; ++k) {
    put32(4 + 4 * k, static_cast<std::uint32_t>(shard.size()));
    const std::uint32_t size = 80;
    const auto id = static_cast<std::int64_t>(k);
    const std::size_t at = shard.size();
    shard.resize(at + 4 + size + 8);
    std::memcpy(&shard[at], &size, 4);
    std::memset(&shard[at + 4], 'a' + static_cast<int>(k % 26), size);
    std::memcpy(&shard[at + 4 + size], &id, 8);
  }
  put32(4 + 4 * n, static_cast<std::uint32_t>(shard.size()));
  write_bytes(dir + "/shard.00000.mds", shard);
  std::ofstream(dir + "/index.json") << fmt::format(
      R"({{"version": 2, "shards": [{{"column_encodings": ["bytes", "int"], "column_names": )"
      R"(["data", "id"], "column_sizes": [null, 8], "compression": null, "format": "mds", )"
      R"("hashes": [], "raw_data": {{"basename": "shard.00000.mds", "bytes": {}, "hashes": {{}}}}, )"
      R"("samples": {}, "size_limit": null, "version": 2, "zip_data": null}}]}})",
      shard.size(), n);
}

template <class F>
double best_rate(std::size_t records, int repeat, F&& run) {
  double best = 0;
  for (int r = 0; r < repeat; ++r) {
    const auto start = Clock::now();
    run();
    best = std::max(best, static_cast<double>(records) / seconds(start));
  }
  return best;
}

void report(std::string_view what, double rate) {
  std::printf("%-36s %8.2f M records/s\n", std::string(what).c_str(), rate / 1e6);
}

std::string g_only;  // --only: the rows whose name holds it (empty: all)

}  // namespace

int main(int argc, char** argv) {
  std::size_t records = 2'000'000;
  int repeat = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::puts(
          "usage: records_read [--records N] [--repeat R] [--only TEXT]\n"
          "Times the TFRecord and MDS readers over N tiny (100-byte) records, best of R;\n"
          "--only runs the rows whose name holds TEXT.");
      return 0;
    }
    if (arg == "--only" && i + 1 < argc) {
      g_only = argv[++i];
      continue;
    }
    if ((arg == "--records" || arg == "--repeat") && i + 1 < argc) {
      const long v = std::strtol(argv[++i], nullptr, 10);
      if (v <= 0) {
        std::fprintf(stderr, "records_read: %s needs a positive number\n", argv[i - 1]);
        return 2;
      }
      if (arg == "--records") {
        records = static_cast<std::size_t>(v);
      } else {
        repeat = static_cast<int>(v);
      }
      continue;
    }
    std::fprintf(stderr, "records_read: unknown argument %s (try --help)\n", argv[i]);
    return 2;
  }
  const auto measure = [&](std::string_view what, auto&& run) {
    if (what.find(g_only) == std::string_view::npos) return;
    report(what, best_rate(records, repeat, run));
  };
  char templ[] = "/tmp/stoker-records-bench-XXXXXX";
  const std::string dir = ::mkdtemp(templ);
  const std::string file = dir + "/tiny.tfrecord";
  {
    std::vector<std::byte> bytes;
    for (std::size_t k = 0; k < records; ++k) stoker::detail::append_tfrecord(bytes, example(k));
    write_bytes(file, bytes);
    std::printf("records_read: %zu records, %.1f bytes each framed, CRC32C via %s\n", records,
                static_cast<double>(bytes.size()) / static_cast<double>(records),
                std::string(stoker::detail::crc32c_implementation()).c_str());
  }
  write_mds(dir, records);

  {
    const auto mapped = stoker::detail::MappedFile::open(file, "records_read");
    std::size_t total = 0;
    measure("tfrecord frames", [&] {
      const auto index = stoker::detail::index_tfrecords(mapped->bytes(), true);
      for (std::size_t k = 0; k < index.entries.size(); ++k) {
        total +=
            stoker::detail::tfrecord_data(mapped->bytes(), index.entries[k], true, file, k).size();
      }
    });
    if (total == 0 && std::string_view("tfrecord frames").find(g_only) != std::string_view::npos) {
      return 1;
    }
  }
  stoker::TFRecordOptions options;
  options.scalar_features = {"id"};
  options.index_dir = dir;
  stoker::TFRecordDataset tf({file}, options);
  std::int64_t sum = 0;
  measure("tfrecord get()", [&] {
    for (std::size_t k = 0; k < records; ++k) sum += tf.get(k)["id"].item<std::int64_t>();
  });
  std::vector<std::size_t> order(records);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(1));
  measure("tfrecord get() shuffled", [&] {
    for (const std::size_t k : order) sum += tf.get(k)["id"].item<std::int64_t>();
  });
  {
    const int fd = stoker::detail::posix::open_read(file.c_str());
    measure("tfrecord get() shuffled + fstat", [&] {
      for (const std::size_t k : order) {
        sum += tf.get(k)["id"].item<std::int64_t>() + stoker::detail::posix::file_size(fd);
      }
    });
    stoker::detail::posix::close_fd(fd);
  }
  {
    // Token and .npy views: 64 uint16 tokens a window, 64-byte rows.
    std::vector<std::uint16_t> tokens(records * 8 + 65);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(i);
    std::ofstream(dir + "/tokens.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()),
               static_cast<std::streamsize>(tokens.size() * 2));
    stoker::TokenDataset tok({dir + "/tokens.bin"},
                             {.context = 64, .stride = 8, .dtype = stoker::DType::kUInt16});
    measure("token get() shuffled", [&] {
      for (const std::size_t k : order) {
        sum += tok.get(k)["input"].data<std::uint16_t>()[0];
      }
    });
    const std::vector<std::int64_t> shape = {static_cast<std::int64_t>(records), 64};
    std::vector<std::byte> npy = stoker::make_npy_header(stoker::DType::kUInt8, shape);
    npy.resize(npy.size() + records * 64, std::byte{1});
    write_bytes(dir + "/rows.npy", npy);
    stoker::NpyDataset rows(dir + "/rows.npy");
    measure("npy get() shuffled", [&] {
      for (const std::size_t k : order) sum += rows.get(k)["data"].data<std::uint8_t>()[0];
    });
  }
  stoker::MdsDataset mds(dir);
  measure("mds get()", [&] {
    for (std::size_t k = 0; k < records; ++k) sum += mds.get(k)["id"].item<std::int64_t>();
  });
  measure("mds get() shuffled", [&] {
    for (const std::size_t k : order) sum += mds.get(k)["id"].item<std::int64_t>();
  });
  stoker::LoaderOptions opt;
  opt.batch_size = 256;
  opt.num_workers = 1;
  opt.persistent_workers = true;
  stoker::DataLoader loader(stoker::TFRecordDataset({file}, options), opt);
  measure("tfrecord loader, 1 worker", [&] {
    for (const stoker::Batch& batch : loader) sum += batch["id"].data<std::int64_t>()[0];
  });
  opt.shuffle = true;
  stoker::DataLoader shuffled(stoker::TFRecordDataset({file}, options), opt);
  measure("tfrecord loader shuffled, 1 worker", [&] {
    for (const stoker::Batch& batch : shuffled) sum += batch["id"].data<std::int64_t>()[0];
  });
  (void)!std::system(("rm -rf " + dir).c_str());
  return sum == 42 ? 3 : 0;  // keeps the reads from being optimised away
}
