// Remote shards against local ones (bench/remote/run.sh runs it; docs/remote.md shows it).
//   remote_bench --shards PATTERN --servers FILE --proxy PATH [options]
// The same WebDataset image shards, each image decoded and cut to 224 x 224 (Resize 256,
// CenterCrop 224) by a 2-worker DataLoader, read five ways, one epoch each, interleaved:
//   local      the files themselves (the page cache warm)
//   s3, http   stoker's remote shards from s3rver and nginx, through tests/remote/fault_proxy
//              at each --latencies round trip; the cache emptied before each epoch (warm
//              servers, cold cache: every byte comes over the network)
//   record     one ranged GET per record (DALI's way with S3), at each latency
//   shard      one sequential GET of a whole shard at a time per worker, read once it is in
//              (WebDataset's whole-shard download)
// It prints, per run: samples/s over the epoch and after its first batch (the rate of a long
// epoch once started), MB/s (shard bytes per second), the time from making the dataset to the
// first batch, and the bytes downloaded in the epoch.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "datasets/shards/byte_source.hpp"
#include "datasets/shards/tar_index.hpp"
#include "datasets/shards/tar_reader.hpp"
#include "os/net/object_store.hpp"
#include "stoker/stoker.hpp"
#include "stoker/vision.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using stoker::detail::net::ObjectStore;
using stoker::detail::net::TransferCounters;

constexpr const char* kUsage =
    "usage: remote_bench --shards PATTERN --servers FILE --proxy PATH [options]\n"
    "  --shards PATTERN   local WebDataset image shards with their .idx, e.g.\n"
    "                     'data/train-{0000..0003}.tar'\n"
    "  --servers FILE     servers.env of tests/remote/servers.sh (nginx and s3rver ports)\n"
    "  --proxy PATH       the fault_proxy program (build/release/tests/fault_proxy)\n"
    "  --workers N        DataLoader workers (default 2)\n"
    "  --batch N          batch size (default 32)\n"
    "  --latencies LIST   round trips in ms (default 0,20,100)\n"
    "  --record-samples N samples the one-GET-per-record client reads (default 512)\n"
    "  --clients LIST     of local,s3,http,record,shard (default all)\n"
    "  --scratch DIR      the cache directory (default /tmp/stoker-remote-bench)\n"
    "  --trace DIR        each proxy's request timeline (fault_proxy --trace) into DIR\n"
    "  --part-sizes LIST  RemoteOptions::part_size values in MiB to sweep (default: the default)\n"
    "  --parts-in-flight LIST  RemoteOptions::parts_in_flight values to sweep (default: the\n"
    "                     default); s3 and http run once for each pair of the two lists\n";

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "remote_bench: %s\n%s", what.c_str(), kUsage);
  std::exit(2);
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::map<std::string, std::string> read_env(const std::string& path) {
  std::map<std::string, std::string> kv;
  std::ifstream in(path);
  if (!in) usage_error("cannot read " + path);
  for (std::string line; std::getline(in, line);) {
    const std::size_t eq = line.find('=');
    if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return kv;
}

// tests/remote/fault_proxy in front of a server, with a round-trip latency; ends with this.
class Proxy {
 public:
  Proxy(const std::string& program, int upstream, int latency_ms, const std::string& trace) {
    int in[2];
    int out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) std::exit(1);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], STDIN_FILENO);
      ::dup2(out[1], STDOUT_FILENO);
      const std::string up = fmt::format("127.0.0.1:{}", upstream);
      const std::string latency = std::to_string(latency_ms);
      if (trace.empty()) {
        ::execl(program.c_str(), program.c_str(), "--upstream", up.c_str(), "--latency-ms",
                latency.c_str(), static_cast<char*>(nullptr));
      } else {
        ::execl(program.c_str(), program.c_str(), "--upstream", up.c_str(), "--latency-ms",
                latency.c_str(), "--trace", trace.c_str(), static_cast<char*>(nullptr));
      }
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    FILE* f = ::fdopen(out[0], "r");
    if (f == nullptr || std::fscanf(f, "port %d", &port_) != 1) {
      std::fprintf(stderr, "remote_bench: %s did not start\n", program.c_str());
      std::exit(1);
    }
    out_ = f;
    started_ = Clock::now();
  }
  ~Proxy() {
    ::close(stdin_);
    ::waitpid(pid_, nullptr, 0);
    std::fclose(out_);
  }
  int port() const { return port_; }
  // Milliseconds since the proxy started (about its --trace file's clock).
  double ms() const {
    return std::chrono::duration<double, std::milli>(Clock::now() - started_).count();
  }

 private:
  pid_t pid_ = 0;
  int stdin_ = -1;
  int port_ = 0;
  FILE* out_ = nullptr;
  Clock::time_point started_;
};

struct Result {
  std::string client;
  int latency_ms = 0;
  std::uint64_t samples = 0;
  double seconds = 0;
  double first_batch = 0;
  std::uint64_t first_samples = 0;  // in the first batch
  std::uint64_t shard_bytes = 0;    // bytes of the shards the epoch covered
  std::uint64_t downloaded = 0;
};

stoker::vision::Pipeline image_pipeline() {
  return stoker::vision::Pipeline{stoker::vision::Resize(256), stoker::vision::CenterCrop(224)};
}

stoker::ShardOptions shard_options() {
  stoker::ShardOptions o;
  o.fields = {{"jpg", "image", {}}, {"cls", "label", {}}};
  o.decoders.images(stoker::image_field(image_pipeline()));
  return o;
}

stoker::LoaderOptions loader_options(int workers, std::size_t batch) {
  stoker::LoaderOptions lo;
  lo.batch_size = batch;
  lo.num_workers = workers;
  lo.timeout = std::chrono::seconds(300);
  return lo;
}

// One epoch of `loader`: samples, seconds from `made`, and when its first batch came.
template <class Loader>
void epoch(Loader& loader, Clock::time_point made, Result& r, std::uint64_t limit = 0) {
  bool first = true;
  for (const stoker::Batch& b : loader) {
    if (first) {
      r.first_batch = seconds_since(made);
      r.first_samples = b.size();
      first = false;
    }
    r.samples += b.size();
    if (limit != 0 && r.samples >= limit) break;
  }
  r.seconds = seconds_since(made);
}

// ---- the naive clients ------------------------------------------------------------------

// Bytes both clients download, counted by every worker (memory shared before fork()).
TransferCounters* shared_counters() {
  void* p = ::mmap(nullptr, sizeof(TransferCounters), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::exit(1);
  return new (p) TransferCounters();
}

stoker::Sample decode_sample(const stoker::detail::TarSample& s, std::span<const std::byte> bytes,
                             const stoker::vision::Pipeline& pipeline) {
  stoker::Sample out;
  for (const auto& m : s.members) {
    const auto* data = reinterpret_cast<const std::uint8_t*>(bytes.data() + m.stored_at);
    if (m.field == "jpg") {
      out.set("image", pipeline(std::span<const std::uint8_t>(data, m.size)));
    } else if (m.field == "cls") {
      out.set("label",
              stoker::decode_int_field(std::span<const std::uint8_t>(data, m.size), "cls"));
    }
  }
  return out;
}

bool wants_all(const void*, std::string_view) { return true; }

// One ranged GET per record (the record's members, from the shard's index): DALI's reader of
// TFRecord/tar files on S3. Map-style.
class RecordClient {
 public:
  struct Record {
    std::size_t shard;
    std::uint64_t begin;
    std::uint64_t end;
  };
  RecordClient(std::vector<std::string> urls, std::vector<Record> records,
               stoker::RemoteOptions options, TransferCounters* counters)
      : urls_(std::move(urls)),
        records_(std::move(records)),
        options_(std::move(options)),
        counters_(counters),
        pipeline_(image_pipeline()) {}
  RecordClient(const RecordClient& o)
      : urls_(o.urls_),
        records_(o.records_),
        options_(o.options_),
        counters_(o.counters_),
        pipeline_(o.pipeline_) {}

  std::size_t size() const { return records_.size(); }
  stoker::Sample get(std::size_t i) {
    if (store_ == nullptr) store_ = std::make_unique<ObjectStore>(options_, counters_);
    const Record& r = records_[i];
    std::string bytes(r.end - r.begin, '\0');
    std::promise<std::exception_ptr> done;
    store_->fetch_range(
        urls_[r.shard], r.begin, r.end, "",
        [&](std::uint64_t at, std::span<const std::byte> b, std::string&) {
          std::memcpy(bytes.data() + (at - r.begin), b.data(), b.size());
          return true;
        },
        [&](std::exception_ptr e) { done.set_value(e); });
    if (auto e = done.get_future().get()) std::rethrow_exception(e);
    // The record's tar members, parsed from its own bytes (offsets relative to its start).
    const auto view = std::as_bytes(std::span<const char>(bytes.data(), bytes.size()));
    auto source = stoker::detail::memory_source(view);
    stoker::detail::TarSampleReader reader(*source, 0, &wants_all, nullptr);
    stoker::detail::TarSample s;
    if (!reader.next(s, true)) throw stoker::Error("record client: an empty record");
    return decode_sample(s, s.storage, pipeline_);
  }

 private:
  std::vector<std::string> urls_;
  std::vector<Record> records_;
  stoker::RemoteOptions options_;
  TransferCounters* counters_;
  stoker::vision::Pipeline pipeline_;
  std::unique_ptr<ObjectStore> store_;  // per process, made on first use
};

// A whole shard per GET, read once it is all in; worker w takes shards w, w + W, ...: the
// whole-shard download of WebDataset-style readers. Iterable.
class ShardClient {
 public:
  ShardClient(std::vector<std::string> urls, stoker::RemoteOptions options,
              TransferCounters* counters)
      : urls_(std::move(urls)),
        options_(std::move(options)),
        counters_(counters),
        pipeline_(image_pipeline()) {}
  ShardClient(const ShardClient& o)
      : urls_(o.urls_), options_(o.options_), counters_(o.counters_), pipeline_(o.pipeline_) {}

  void start_epoch(std::uint64_t) {
    const stoker::WorkerInfo* info = stoker::worker_info();
    worker_ = info != nullptr ? info->id : 0;
    workers_ = info != nullptr ? info->num_workers : 1;
    next_shard_ = worker_;
    reader_.reset();
    source_.reset();
  }
  std::optional<stoker::Sample> next() {
    for (;;) {
      if (reader_ != nullptr) {
        stoker::detail::TarSample s;
        if (reader_->next(s, true)) return decode_sample(s, s.storage, pipeline_);
        reader_.reset();
      }
      if (next_shard_ >= urls_.size()) return std::nullopt;
      if (store_ == nullptr) store_ = std::make_unique<ObjectStore>(options_, counters_);
      shard_ = *store_->get(urls_[next_shard_], std::uint64_t{1} << 32, false, counters_);
      next_shard_ += workers_;
      source_ = stoker::detail::memory_source(
          std::as_bytes(std::span<const char>(shard_.data(), shard_.size())));
      reader_ = std::make_unique<stoker::detail::TarSampleReader>(*source_, 0, &wants_all, nullptr);
    }
  }

 private:
  std::vector<std::string> urls_;
  stoker::RemoteOptions options_;
  TransferCounters* counters_;
  stoker::vision::Pipeline pipeline_;
  std::size_t worker_ = 0;
  std::size_t workers_ = 1;
  std::size_t next_shard_ = 0;
  std::string shard_;
  std::unique_ptr<stoker::detail::StreamSource> source_;
  std::unique_ptr<stoker::detail::TarSampleReader> reader_;
  std::unique_ptr<ObjectStore> store_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string pattern;
  std::string servers_file;
  std::string proxy;
  int workers = 2;
  std::size_t batch = 32;
  std::vector<int> latencies = {0, 20, 100};
  std::uint64_t record_samples = 512;
  std::vector<std::string> clients = {"local", "s3", "http", "record", "shard"};
  std::string scratch = "/tmp/stoker-remote-bench";
  std::string trace_dir;
  std::vector<std::uint64_t> part_sizes = {stoker::RemoteOptions{}.part_size};
  std::vector<std::size_t> parts_in_flight = {stoker::RemoteOptions{}.parts_in_flight};
  bool sweep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--shards") {
      pattern = value();
    } else if (flag == "--servers") {
      servers_file = value();
    } else if (flag == "--proxy") {
      proxy = value();
    } else if (flag == "--workers") {
      workers = std::atoi(value().c_str());
    } else if (flag == "--batch") {
      batch = static_cast<std::size_t>(std::atoi(value().c_str()));
    } else if (flag == "--latencies") {
      latencies.clear();
      for (const std::string& l : split(value(), ',')) latencies.push_back(std::atoi(l.c_str()));
    } else if (flag == "--record-samples") {
      record_samples = std::strtoull(value().c_str(), nullptr, 10);
    } else if (flag == "--clients") {
      clients = split(value(), ',');
    } else if (flag == "--scratch") {
      scratch = value();
    } else if (flag == "--trace") {
      trace_dir = value();
    } else if (flag == "--part-sizes") {
      part_sizes.clear();
      for (const std::string& v : split(value(), ',')) {
        part_sizes.push_back(static_cast<std::uint64_t>(std::atof(v.c_str()) * (1 << 20)));
      }
      sweep = true;
    } else if (flag == "--parts-in-flight") {
      parts_in_flight.clear();
      for (const std::string& v : split(value(), ',')) {
        parts_in_flight.push_back(static_cast<std::size_t>(std::atoi(v.c_str())));
      }
      sweep = true;
    } else {
      usage_error("unknown option " + flag);
    }
  }
  if (pattern.empty() || servers_file.empty() || proxy.empty()) {
    usage_error("--shards, --servers and --proxy are required");
  }
  auto wanted = [&](const char* c) {
    return std::find(clients.begin(), clients.end(), c) != clients.end();
  };
  try {
    const std::vector<std::string> local = stoker::expand_shards(pattern);
    const auto env = read_env(servers_file);
    const int s3_port = std::stoi(env.at("S3_PORT"));
    const int http_port = std::stoi(env.at("HTTP_PORT"));
    const std::string bucket = env.at("BUCKET");
    const std::string www = env.at("WWW");
    ::setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);

    // The shards on both servers (s3rver: uploaded; nginx: copied into its root), with their
    // index files.
    stoker::RemoteOptions base;
    base.endpoint = fmt::format("http://127.0.0.1:{}", s3_port);
    base.addressing = stoker::AddressingStyle::kPath;
    std::uint64_t shard_bytes = 0;
    fs::create_directories(www + "/bench");
    for (const std::string& p : local) {
      const std::string leaf = fs::path(p).filename().string();
      shard_bytes += fs::file_size(p);
      for (const std::string& file : {p, p + ".idx"}) {
        const std::string name = fs::path(file).filename().string();
        stoker::upload_file(file, fmt::format("s3://{}/bench/{}", bucket, name), base);
        fs::copy_file(file, www + "/bench/" + name, fs::copy_options::overwrite_existing);
      }
    }
    // The records' byte ranges, for the one-GET-per-record client.
    std::vector<RecordClient::Record> records;
    for (std::size_t s = 0; s < local.size(); ++s) {
      auto src = stoker::detail::open_stream_source(local[s], 0, "remote_bench");
      const stoker::detail::TarIndex ix = stoker::detail::build_tar_index(*src);
      for (const auto& r : ix.records) {
        const auto& last = ix.members[r.first_member + r.members - 1];
        records.push_back({s, r.offset, (last.data_offset + last.size + 511) / 512 * 512});
      }
    }
    std::printf(
        "remote_bench: %zu shards, %.1f MiB, %zu samples; %d workers, batch %zu; "
        "%s\n",
        local.size(), static_cast<double>(shard_bytes) / (1 << 20), records.size(), workers, batch,
        "Resize(256) + CenterCrop(224) per image");
    std::vector<Result> results;
    auto report = [&](const Result& r) {
      // After the first batch: the rate a long epoch would see once the loader has started.
      const double steady =
          r.seconds > r.first_batch
              ? static_cast<double>(r.samples - r.first_samples) / (r.seconds - r.first_batch)
              : 0.0;
      std::printf(
          "  %-6s %4d ms  %8.1f samples/s  %8.1f after the first batch  %7.1f MB/s  "
          "first batch %6.3f s  downloaded %8.1f MiB  (%llu samples in %.2f s)\n",
          r.client.c_str(), r.latency_ms, static_cast<double>(r.samples) / r.seconds, steady,
          static_cast<double>(r.shard_bytes) / 1e6 / r.seconds, r.first_batch,
          static_cast<double>(r.downloaded) / (1 << 20), static_cast<unsigned long long>(r.samples),
          r.seconds);
      std::fflush(stdout);
      results.push_back(r);
    };

    stoker::StreamOptions so;
    so.shuffle_buffer = 64;
    auto run_local = [&] {
      Result r{"local", 0};
      const auto made = Clock::now();
      stoker::DataLoader loader(stoker::WebDatasetShards::stream(local, so, shard_options()),
                                loader_options(workers, batch));
      epoch(loader, made, r);
      r.shard_bytes = shard_bytes;
      report(r);
    };
    auto run_stoker = [&](const std::string& client, const std::vector<std::string>& urls,
                          stoker::RemoteOptions options, int latency) {
      Result r{client, latency};
      fs::remove_all(scratch);
      options.cache_dir = scratch;
      stoker::ShardOptions o = shard_options();
      o.remote = options;
      const auto made = Clock::now();
      stoker::DataLoader loader(stoker::WebDatasetShards::stream(urls, so, o),
                                loader_options(workers, batch));
      epoch(loader, made, r);
      r.shard_bytes = shard_bytes;
      r.downloaded = loader.dataset().remote_stats().bytes_fetched;
      report(r);
    };

    if (wanted("local")) run_local();
    for (const int latency : latencies) {
      auto trace = [&](const char* server) {
        return trace_dir.empty() ? std::string()
                                 : fmt::format("{}/{}-{}ms.log", trace_dir, server, latency);
      };
      Proxy s3(proxy, s3_port, latency, trace("s3"));
      Proxy http(proxy, http_port, latency, trace("http"));
      stoker::RemoteOptions s3o = base;
      s3o.endpoint = fmt::format("http://127.0.0.1:{}", s3.port());
      std::vector<std::string> s3_urls;
      std::vector<std::string> http_urls;
      for (const std::string& p : local) {
        const std::string leaf = fs::path(p).filename().string();
        s3_urls.push_back(fmt::format("s3://{}/bench/{}", bucket, leaf));
        http_urls.push_back(fmt::format("http://127.0.0.1:{}/bench/{}", http.port(), leaf));
      }
      for (const std::uint64_t part_size : part_sizes) {
        for (const std::size_t in_flight : parts_in_flight) {
          stoker::RemoteOptions s3p = s3o;
          stoker::RemoteOptions httpp = base;
          s3p.part_size = httpp.part_size = part_size;
          s3p.parts_in_flight = httpp.parts_in_flight = in_flight;
          if (sweep) {
            std::printf("  parts of %.2f MiB, %zu in flight:\n",
                        static_cast<double>(part_size) / (1 << 20), in_flight);
          }
          if (!trace_dir.empty()) std::fprintf(stderr, "trace: s3 proxy at %.1f ms\n", s3.ms());
          if (wanted("s3")) run_stoker("s3", s3_urls, s3p, latency);
          if (!trace_dir.empty()) {
            std::fprintf(stderr, "trace: http proxy at %.1f ms\n", http.ms());
          }
          if (wanted("http")) run_stoker("http", http_urls, httpp, latency);
        }
      }
      if (wanted("local")) run_local();  // interleaved: the machine's state now
      if (wanted("record")) {
        Result r{"record", latency};
        TransferCounters* counters = shared_counters();
        const auto made = Clock::now();
        stoker::DataLoader loader(RecordClient(http_urls, records, base, counters),
                                  loader_options(workers, batch));
        epoch(loader, made, r, record_samples);
        r.shard_bytes = shard_bytes * r.samples / records.size();
        r.downloaded = counters->bytes.load();
        report(r);
      }
      if (wanted("shard")) {
        Result r{"shard", latency};
        TransferCounters* counters = shared_counters();
        const auto made = Clock::now();
        stoker::DataLoader loader(ShardClient(http_urls, base, counters),
                                  loader_options(workers, batch));
        epoch(loader, made, r);
        r.shard_bytes = shard_bytes;
        r.downloaded = counters->bytes.load();
        report(r);
      }
    }
    fs::remove_all(scratch);
    std::printf("reproduce: bench/remote/run.sh\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "remote_bench: %s\n", e.what());
    return 1;
  }
}
