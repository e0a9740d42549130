// Record shards against loose files (bench/shards.sh runs it; docs/benchmarks.md shows it).
//   shard_bench --images DIR --shards PATTERN [--workers N] [--tiny N] [--warm]
// On a cold page cache (echo 3 > /proc/sys/vm/drop_caches before each measurement; said when
// that is not possible), with nothing decoded (each sample's bytes as they are):
//   loose files, in a shuffled and in directory order, through a DataLoader;
//   the same images as WebDataset shards, streamed and map-style (sequential), through a
//   DataLoader; the shard reader's bytes/s against `dd bs=1M` of the same files, in this run;
// and, page cache warm, tiny records (100 bytes) read by index in one process (what one
// worker does), and through a DataLoader with one worker.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <stoker/stoker.hpp>
#include <stoker/webdataset.hpp>

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: shard_bench --images DIR --shards PATTERN [options]\n"
    "  --images DIR      the loose images: DIR/<class>/<file>\n"
    "  --shards PATTERN  the same images as tar shards, e.g. 'out/train-{0000..0011}.tar'\n"
    "  --workers N       DataLoader workers (default 2)\n"
    "  --tiny N          tiny-record shards to write and read: N records of 100 bytes\n"
    "                    (default 200000; 0: skip)\n"
    "  --scratch DIR     where the tiny-record shards go (default /tmp/stoker-bench-shards)\n"
    "  --repeats N       interleaved runs of dd and the reader alone (default 5; medians)\n"
    "  --warm            do not drop the page cache\n";

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "shard_bench: %s\n%s", what.c_str(), kUsage);
  std::exit(2);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool g_cold = true;
std::string g_cold_note;

// Empties the page cache, so the next read comes from the disk. False when it cannot.
void drop_caches() {
  if (!g_cold) return;
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  f << "3\n";
  f.flush();
  if (!f) {
    g_cold = false;
    g_cold_note = "could not write /proc/sys/vm/drop_caches (not root, or a container): WARM cache";
  }
}

std::vector<std::string> list_images(const std::string& root) {
  std::vector<std::string> out;
  std::vector<std::string> classes;
  if (DIR* d = ::opendir(root.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') classes.push_back(e->d_name);
    }
    ::closedir(d);
  }
  std::sort(classes.begin(), classes.end());
  for (const std::string& c : classes) {
    std::vector<std::string> files;
    if (DIR* d = ::opendir((root + "/" + c).c_str())) {
      while (const dirent* e = ::readdir(d)) {
        if (e->d_name[0] != '.') files.push_back(root + "/" + c + "/" + e->d_name);
      }
      ::closedir(d);
    }
    std::sort(files.begin(), files.end());
    out.insert(out.end(), files.begin(), files.end());
  }
  return out;
}

// Loose files, read whole (what a loader of encoded images reads before decoding).
struct LooseFiles {
  std::vector<std::string> paths;
  std::size_t size() const { return paths.size(); }
  stoker::Sample get(std::size_t i) const {
    std::ifstream in(paths[i], std::ios::binary | std::ios::ate);
    const auto n = static_cast<std::size_t>(in.tellg());
    stoker::Tensor t =
        stoker::Tensor::empty(stoker::DType::kUInt8, stoker::Shape{static_cast<std::int64_t>(n)});
    in.seekg(0);
    in.read(reinterpret_cast<char*>(t.raw_data()), static_cast<std::streamsize>(n));
    stoker::Sample s;
    s.set("data", std::move(t));
    return s;
  }
};

struct Run {
  std::size_t samples = 0;
  std::uint64_t bytes = 0;
  double seconds = 0;
};

template <class D>
Run run_epoch(D dataset, const stoker::LoaderOptions& opt) {
  stoker::DataLoader loader(std::move(dataset), opt);
  drop_caches();
  Run r;
  const auto start = Clock::now();
  for (const stoker::Batch& b : loader) {
    r.samples += b.size();
    r.bytes += b["data"].nbytes();
  }
  r.seconds = seconds_since(start);
  return r;
}

Run median_run(std::vector<Run> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const Run& a, const Run& b) { return a.seconds < b.seconds; });
  return runs[runs.size() / 2];
}

void print_run(const char* what, const Run& r) {
  std::printf("  %-44s %8.0f samples/s  %8.1f MiB/s  (%zu samples, %.2f s)\n", what,
              static_cast<double>(r.samples) / r.seconds,
              static_cast<double>(r.bytes) / r.seconds / (1 << 20), r.samples, r.seconds);
}

}  // namespace

int main(int argc, char** argv) {
  std::string images;
  std::string pattern;
  int workers = 2;
  std::size_t tiny = 200000;
  std::string scratch = "/tmp/stoker-bench-shards";
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (flag == "--images") {
      images = value();
    } else if (flag == "--shards") {
      pattern = value();
    } else if (flag == "--workers") {
      workers = std::atoi(value().c_str());
    } else if (flag == "--tiny") {
      tiny = static_cast<std::size_t>(std::atol(value().c_str()));
    } else if (flag == "--repeats") {
      repeats = std::max(1, std::atoi(value().c_str()));
    } else if (flag == "--scratch") {
      scratch = value();
    } else if (flag == "--warm") {
      g_cold = false;
      g_cold_note = "--warm: page cache kept";
    } else {
      usage_error("unknown option '" + flag + "'");
    }
  }
  if (images.empty() || pattern.empty()) usage_error("--images and --shards are required");
  try {
    const std::vector<std::string> shards = stoker::expand_shards(pattern);
    LooseFiles loose{list_images(images)};
    stoker::ShardOptions raw;
    raw.decoders = stoker::FieldDecoders();  // nothing decoded
    raw.fields = {stoker::FieldSpec{"jpg;jpeg;png;webp", "data", {}}};
    stoker::WebDatasetShards map(shards, raw);  // indexes loaded before any timing
    std::uint64_t shard_bytes = 0;
    for (const std::string& s : shards) {
      struct stat st {};
      ::stat(s.c_str(), &st);
      shard_bytes += static_cast<std::uint64_t>(st.st_size);
    }
    drop_caches();
    std::printf("shards benchmark: %zu loose images, %zu shards (%.1f MiB), %d workers; %s\n",
                loose.size(), shards.size(), static_cast<double>(shard_bytes) / (1 << 20), workers,
                g_cold ? "cold page cache before each run" : g_cold_note.c_str());

    stoker::LoaderOptions opt;
    opt.batch_size = 64;
    opt.num_workers = workers;
    opt.collate = stoker::collate_ragged({"data"});
    opt.check_memory = false;

    stoker::LoaderOptions shuffled = opt;
    shuffled.shuffle = true;
    stoker::StreamOptions so;
    so.shuffle_buffer = 256;
    // Every measurement `repeats` times, interleaved (a virtual disk's speed wanders): the
    // medians. The reader alone runs in this process (no DataLoader, no batches). Rates in
    // bytes/s are the files' bytes over the time, as dd's is.
    std::vector<double> dd_rates;
    std::vector<double> stream_rates;
    std::vector<double> map_rates;
    std::vector<Run> loose_shuffled;
    std::vector<Run> loose_sequential;
    std::vector<Run> streamed;
    std::vector<Run> mapped;
    std::vector<Run> mapped_shuffled;
    for (int rep = 0; rep < repeats; ++rep) {
      drop_caches();
      auto start = Clock::now();
      for (const std::string& s : shards) {
        const std::string command = "dd if=" + s + " of=/dev/null bs=1M status=none";
        if (std::system(command.c_str()) != 0) throw stoker::Error("dd failed on " + s);
      }
      dd_rates.push_back(static_cast<double>(shard_bytes) / seconds_since(start));
      drop_caches();
      start = Clock::now();
      {
        stoker::ShardedStream alone = stoker::WebDatasetShards::stream(shards, so, raw);
        while (alone.next()) {
        }
      }
      stream_rates.push_back(static_cast<double>(shard_bytes) / seconds_since(start));
      drop_caches();
      start = Clock::now();
      {
        stoker::WebDatasetShards alone(shards, raw);
        for (std::size_t i = 0; i < alone.size(); ++i) (void)alone.get(i);
      }
      map_rates.push_back(static_cast<double>(shard_bytes) / seconds_since(start));
      loose_shuffled.push_back(run_epoch(loose, shuffled));
      loose_sequential.push_back(run_epoch(loose, opt));
      streamed.push_back(run_epoch(stoker::WebDatasetShards::stream(shards, so, raw), opt));
      mapped.push_back(run_epoch(map, opt));
      mapped_shuffled.push_back(run_epoch(map, shuffled));
    }
    const double dd_rate = median(dd_rates);
    const double stream_alone = median(stream_rates);
    const double map_alone = median(map_rates);
    std::printf("  medians of %d interleaved runs:\n", repeats);
    print_run("loose files, shuffled", median_run(loose_shuffled));
    print_run("loose files, directory order", median_run(loose_sequential));
    print_run("tar shards, streamed (shuffle buffer 256)", median_run(streamed));
    print_run("tar shards, map-style, sequential", median_run(mapped));
    print_run("tar shards, map-style, shuffled", median_run(mapped_shuffled));
    const double stream_file_rate = static_cast<double>(shard_bytes) / median_run(streamed).seconds;
    const double map_file_rate = static_cast<double>(shard_bytes) / median_run(mapped).seconds;
    std::printf("  dd bs=1M of the shard files: %.1f MiB/s\n", dd_rate / (1 << 20));
    std::printf(
        "  shard reader alone (one process): streamed %.1f MiB/s (%.0f%% of dd), "
        "map-style sequential %.1f MiB/s (%.0f%% of dd)\n",
        stream_alone / (1 << 20), 100 * stream_alone / dd_rate, map_alone / (1 << 20),
        100 * map_alone / dd_rate);
    std::printf(
        "  through the DataLoader (%d workers): streamed %.1f MiB/s (%.0f%% of dd), "
        "map-style sequential %.1f MiB/s (%.0f%% of dd)\n",
        workers, stream_file_rate / (1 << 20), 100 * stream_file_rate / dd_rate,
        map_file_rate / (1 << 20), 100 * map_file_rate / dd_rate);
    const Run st = median_run(streamed);
    const Run ls = median_run(loose_shuffled);
    std::printf("  streamed shards vs shuffled loose files: %.2fx the samples/s\n",
                (static_cast<double>(st.samples) / st.seconds) /
                    (static_cast<double>(ls.samples) / ls.seconds));

    if (tiny > 0) {
      std::system(("mkdir -p " + scratch).c_str());
      stoker::WebDatasetWriterOptions wo;
      wo.pattern = scratch + "/tiny-%04d.tar";
      wo.max_shard_bytes = 64 << 20;
      std::vector<std::string> tiny_shards;
      {
        stoker::WebDatasetWriter writer(wo);
        std::vector<std::byte> record(100);
        for (std::size_t i = 0; i < tiny; ++i) {
          for (std::size_t k = 0; k < record.size(); ++k) {
            record[k] = static_cast<std::byte>((i + k) & 0xff);
          }
          const std::pair<std::string, std::span<const std::byte>> fields[] = {{"bin", record}};
          char key[24];
          std::snprintf(key, sizeof key, "%09zu", i);
          writer.write(key, fields);
        }
        tiny_shards = writer.close();
      }
      stoker::ShardOptions bin;
      bin.fields = {stoker::FieldSpec{"bin", "data", {}}};
      stoker::WebDatasetShards ds(tiny_shards, bin);
      for (std::size_t i = 0; i < ds.size(); ++i) (void)ds.get(i);  // warm the page cache
      auto start = Clock::now();
      std::uint64_t sum = 0;
      for (std::size_t i = 0; i < ds.size(); ++i) {
        sum += ds.get(i)["data"].data<std::uint8_t>()[7];
      }
      const double in_process = static_cast<double>(ds.size()) / seconds_since(start);
      stoker::Generator rng(1);
      std::vector<std::size_t> order(ds.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      rng.shuffle(order.begin(), order.end());
      start = Clock::now();
      for (const std::size_t i : order) sum += ds.get(i)["data"].data<std::uint8_t>()[7];
      const double in_process_random = static_cast<double>(ds.size()) / seconds_since(start);
      stoker::LoaderOptions one;
      one.batch_size = 256;
      one.num_workers = 1;
      one.check_memory = false;
      one.persistent_workers = true;  // forked once, by the untimed begin()
      stoker::DataLoader loader(ds, one);
      (void)loader.begin();  // fork the worker before timing
      start = Clock::now();
      std::size_t n = 0;
      for (const stoker::Batch& b : loader) n += b.size();
      const double one_worker = static_cast<double>(n) / seconds_since(start);
      std::printf(
          "tiny records (100 B, %zu in %zu shards, page cache warm): by index in one "
          "process %.2f M records/s (sequential), %.2f M records/s (random order); "
          "DataLoader with 1 worker %.2f M records/s (checksum %llu)\n",
          ds.size(), tiny_shards.size(), in_process / 1e6, in_process_random / 1e6,
          one_worker / 1e6, static_cast<unsigned long long>(sum));
      std::system(("rm -rf " + scratch).c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shard_bench: %s\n", e.what());
    return 1;
  }
}
