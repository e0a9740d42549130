// stoker-tune: finds num_workers and batch_size for a dataset on this machine. Each setting is
// measured the same way — a warm-up, then a timed window (or timed epochs) — for samples/s,
// the peak PSS of the whole process tree and the share of time the consumer waited; the
// results come out as a table, JSON and an SVG chart, with a recommendation and its reason.
//
//   stoker-tune (--workload {tiny,image,cpu} | --npy FILE | --tokens FILE [--window N] |
//                --images DIR) [--strategy progressive|grid] [--workers LIST] [--batch LIST]
//               [--seconds S] [--warmup S] [--epochs N] [--max-workers N] [--prefetch P]
//               [--simulate-work-us N] [--json] [--svg FILE]
//
// The method (docs/tuning.md): start at about a quarter of the cores, add workers until the
// gain is under 5% or throughput falls (or swap use rises), then try half and twice the batch
// size at that worker count. The recommendation is the setting with the fewest workers (then
// the least memory) whose throughput is within 5% of the best measured.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench_workloads.hpp"
#include "data/format.hpp"
#include "stoker/stoker.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using stoker::detail::format_bytes;
using stoker::detail::format_count;

// Within this share of the best throughput a setting counts as just as good; a step that gains
// less stops the search.
constexpr double kWithin = 0.05;
// Swap in use rising by more than this while a setting runs means it does not fit in memory.
constexpr std::int64_t kSwapRiseBytes = std::int64_t{32} << 20;
// Tree PSS is sampled at most this often: reading smaps_rollup walks a process's page tables.
constexpr auto kPssInterval = std::chrono::milliseconds(200);

constexpr const char* kUsage =
    "usage: stoker-tune SOURCE [options]\n"
    "SOURCE (one of):\n"
    "  --workload {tiny,image,cpu}  a built-in synthetic dataset (stoker-bench's)\n"
    "  --npy FILE                   a .npy array, one sample per row\n"
    "  --tokens FILE [--window N]   token windows of N tokens (default 1024) over a shard\n"
    "  --images DIR                 an image folder, DIR/<class>/<file>.jpg|.png\n"
    "options:\n"
    "  --strategy progressive|grid  progressive (default): start at a quarter of the cores, add\n"
    "                               workers until the gain is under 5%, then try batch x1/2, x2;\n"
    "                               grid: every --workers x --batch pair\n"
    "  --workers LIST               grid: worker counts, e.g. 0,1,2,4 (default 0,1,2,4.. to 2x "
    "cores)\n"
    "  --batch LIST                 grid: batch sizes, e.g. 32,64,128; progressive: the start\n"
    "  --seconds S                  timed seconds per setting (default 2)\n"
    "  --warmup S                   warm-up seconds per setting (default 0.5)\n"
    "  --epochs N                   time N whole epochs per setting (after one warm-up epoch)\n"
    "                               instead of --seconds\n"
    "  --max-workers N              progressive: the most workers to try (default 2x cores)\n"
    "  --prefetch P                 prefetch_factor (default 2)\n"
    "  --simulate-work-us N         add N us of CPU work per sample, like augmentation\n"
    "  --json                       print JSON on stdout (the table goes to stderr)\n"
    "  --svg FILE                   write a chart of throughput and memory against workers\n";

[[noreturn]] void usage_error(const std::string& problem) {
  std::fprintf(stderr, "stoker-tune: %s\n%s", problem.c_str(), kUsage);
  std::exit(2);
}

struct Args {
  std::string source_kind;  // "workload", "npy", "tokens", "images"
  std::string source;       // the workload's name or the path
  std::optional<std::size_t> window;
  std::string strategy = "progressive";
  std::vector<int> workers;
  std::vector<std::size_t> batches;
  double seconds = 2.0;
  double warmup = 0.5;
  int epochs = 0;  // > 0: time whole epochs instead of `seconds`
  int max_workers = 0;
  std::size_t prefetch = 2;
  long simulate_work_us = 0;
  bool json = false;
  std::string svg;
  std::string command;
};

long parse_whole(const std::string& flag, const std::string& text, long low, long high) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno != 0 || n < low || n > high) {
    usage_error(
        fmt::format("{} must be a whole number from {} to {}, not '{}'", flag, low, high, text));
  }
  return n;
}

double parse_seconds(const std::string& flag, const std::string& text, double low) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || *end != '\0' || !(v >= low) || v > 3600) {
    usage_error(
        fmt::format("{} must be a number of seconds from {} to 3600, not '{}'", flag, low, text));
  }
  return v;
}

std::vector<long> parse_list(const std::string& flag, const std::string& text, long low,
                             long high) {
  std::vector<long> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) values.push_back(parse_whole(flag, item, low, high));
  if (values.empty() || text.back() == ',') {
    usage_error(
        fmt::format("{} takes a comma-separated list, e.g. {} 1,2,4, not '{}'", flag, flag, text));
  }
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

Args parse(int argc, char** argv) {
  Args a;
  a.command = "stoker-tune";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    a.command += " " + flag;
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(flag + " needs a value");
      a.command += std::string(" ") + argv[i + 1];
      return argv[++i];
    };
    auto set_source = [&](const char* kind) {
      if (!a.source_kind.empty()) {
        usage_error(fmt::format("give one data source, not --{} and {}", a.source_kind, flag));
      }
      a.source_kind = kind;
      a.source = value();
    };
    if (flag == "--workload") {
      set_source("workload");
      if (a.source != "tiny" && a.source != "image" && a.source != "cpu") {
        usage_error(fmt::format("--workload must be tiny, image or cpu, not '{}'", a.source));
      }
    } else if (flag == "--npy") {
      set_source("npy");
    } else if (flag == "--tokens") {
      set_source("tokens");
    } else if (flag == "--images") {
      set_source("images");
    } else if (flag == "--window") {
      a.window = static_cast<std::size_t>(parse_whole(flag, value(), 1, 1L << 24));
    } else if (flag == "--strategy") {
      a.strategy = value();
      if (a.strategy != "progressive" && a.strategy != "grid") {
        usage_error(fmt::format("--strategy must be progressive or grid, not '{}'", a.strategy));
      }
    } else if (flag == "--workers") {
      for (const long w : parse_list(flag, value(), 0, stoker::kMaxWorkers)) {
        a.workers.push_back(static_cast<int>(w));
      }
    } else if (flag == "--batch") {
      for (const long b : parse_list(flag, value(), 1, static_cast<long>(stoker::kMaxBatchSize))) {
        a.batches.push_back(static_cast<std::size_t>(b));
      }
    } else if (flag == "--seconds") {
      a.seconds = parse_seconds(flag, value(), 0.01);
    } else if (flag == "--warmup") {
      a.warmup = parse_seconds(flag, value(), 0);
    } else if (flag == "--epochs") {
      a.epochs = static_cast<int>(parse_whole(flag, value(), 1, 1000));
    } else if (flag == "--max-workers") {
      a.max_workers = static_cast<int>(parse_whole(flag, value(), 1, stoker::kMaxWorkers));
    } else if (flag == "--prefetch") {
      a.prefetch = static_cast<std::size_t>(
          parse_whole(flag, value(), 1, static_cast<long>(stoker::kMaxPrefetchFactor)));
    } else if (flag == "--simulate-work-us") {
      a.simulate_work_us = parse_whole(flag, value(), 0, 10'000'000);
    } else if (flag == "--json") {
      a.json = true;
    } else if (flag == "--svg") {
      a.svg = value();
    } else if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else {
      usage_error("unknown option " + flag);
    }
  }
  if (a.source_kind.empty()) {
    usage_error("no data source: give --workload, --npy, --tokens or --images");
  }
  if (a.window && a.source_kind != "tokens") usage_error("--window goes with --tokens");
  if (a.strategy == "progressive") {
    if (!a.workers.empty()) {
      usage_error(
          "--workers lists the grid's worker counts: use --strategy grid, or "
          "--max-workers to bound the progressive search");
    }
    if (a.batches.size() > 1) {
      usage_error(
          "--strategy progressive takes one --batch (the size to start from); give a "
          "list with --strategy grid");
    }
  } else if (a.max_workers != 0) {
    usage_error(
        "--max-workers bounds the progressive search; with --strategy grid, list the "
        "counts with --workers");
  }
  return a;
}

// ---------------------------------------------------------------------------------------------
// The machine: cores, swap and the process tree's memory.

// The CPUs this process may use: logical CPUs, capped by a cgroup CPU quota.
std::size_t usable_cores(const stoker::SystemInfo& system) {
  double cores = static_cast<double>(system.logical_cpus.value.value_or(0));
  if (cores <= 0) cores = static_cast<double>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  if (system.cpu_quota.value && *system.cpu_quota.value > 0) {
    cores = std::min(cores, std::ceil(*system.cpu_quota.value));
  }
  return static_cast<std::size_t>(std::max(1.0, cores));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// "Key:   123 kB" from a /proc file, in bytes; 0 when absent.
std::uint64_t kb_field(const std::string& text, const std::string& key) {
  const std::string needle = key + ":";
  for (std::size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + needle.size())) {
    if (at == 0 || text[at - 1] == '\n') {
      return std::strtoull(text.c_str() + at + needle.size(), nullptr, 10) * 1024;
    }
  }
  return 0;
}

// The machine's CPU time so far, from the first line of /proc/stat (clock ticks).
struct CpuTimes {
  std::uint64_t busy = 0;
  std::uint64_t iowait = 0;
  std::uint64_t total = 0;
};

CpuTimes cpu_times() {
  std::stringstream line(read_file("/proc/stat"));
  std::string cpu;
  // user nice system idle iowait irq softirq steal (guest time is inside user already)
  std::uint64_t v[8] = {};
  line >> cpu;
  for (std::uint64_t& x : v) line >> x;
  CpuTimes t;
  for (const std::uint64_t x : v) t.total += x;
  t.iowait = v[4];
  t.busy = t.total - v[3] - v[4];
  return t;
}

std::int64_t swap_used_bytes() {
  const std::string meminfo = read_file("/proc/meminfo");
  return static_cast<std::int64_t>(kb_field(meminfo, "SwapTotal")) -
         static_cast<std::int64_t>(kb_field(meminfo, "SwapFree"));
}

// `pid` and every descendant, from /proc/<pid>/task/<tid>/children: a child forked from any
// of a process's threads is listed under that thread.
void collect_tree(const std::string& pid, std::vector<std::string>& out) {
  out.push_back(pid);
  std::error_code ec;
  std::filesystem::directory_iterator tasks("/proc/" + pid + "/task", ec);
  for (; !ec && tasks != std::filesystem::directory_iterator(); tasks.increment(ec)) {
    std::stringstream children(read_file(tasks->path().string() + "/children"));
    std::string child;
    while (children >> child) collect_tree(child, out);
  }
}

// Sum of PSS over the tree: the ring's shared pages are split among the processes mapping
// them, so they are counted once.
std::uint64_t tree_pss_bytes() {
  std::vector<std::string> pids;
  collect_tree(std::to_string(getpid()), pids);
  std::uint64_t total = 0;
  for (const std::string& pid : pids) {
    total += kb_field(read_file("/proc/" + pid + "/smaps_rollup"), "Pss");
  }
  return total;
}

// ---------------------------------------------------------------------------------------------
// Progress on stderr, only when it is a terminal.

class Progress {
 public:
  Progress() : enabled_(isatty(STDERR_FILENO) == 1) {}
  void show(const std::string& label, double fraction) {
    if (!enabled_) return;
    const Clock::time_point now = Clock::now();
    if (now < next_) return;
    next_ = now + std::chrono::milliseconds(100);
    const int width = 24;
    const int filled = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * width);
    std::fprintf(stderr, "\r\033[K%s [%s%s] %3.0f%%", label.c_str(),
                 std::string(static_cast<std::size_t>(filled), '#').c_str(),
                 std::string(static_cast<std::size_t>(width - filled), '.').c_str(),
                 std::clamp(fraction, 0.0, 1.0) * 100);
    std::fflush(stderr);
  }
  void clear() {
    if (!enabled_) return;
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    next_ = {};
  }
  bool enabled() const noexcept { return enabled_; }

 private:
  bool enabled_;
  Clock::time_point next_{};
};

// ---------------------------------------------------------------------------------------------
// Measuring one setting.

struct Setting {
  int workers = 0;
  std::size_t batch = 0;
};

struct Result {
  Setting setting;
  bool ok = false;
  std::string error;  // why it could not run
  double samples_per_s = 0;
  double bytes_per_s = 0;
  double seconds = 0;  // the timed window
  std::uint64_t batches = 0;
  std::uint64_t samples = 0;
  std::uint64_t peak_pss = 0;
  double wait_fraction = 0;
  std::optional<double> cpu_busy;  // the machine's, over the timed window
  std::optional<double> iowait;
  std::int64_t swap_rise = 0;
  std::string verdict;
  std::string diagnosis;
  std::string note;  // what the search made of it
};

// Adds `work` of CPU time to each sample, like an augmentation would.
template <class D>
struct WithWork {
  D inner;
  std::chrono::nanoseconds work{0};
  std::size_t size() const { return static_cast<std::size_t>(inner.size()); }
  stoker::Sample get(std::size_t i) {
    if (work.count() > 0) {
      const Clock::time_point until = Clock::now() + work;
      while (Clock::now() < until) {
      }
    }
    return inner.get(i);
  }
};

template <class D>
class Tuner {
 public:
  Tuner(D dataset, const Args& args, const stoker::SystemInfo& system)
      : dataset_(std::move(dataset)), args_(args), system_(system) {}

  Result measure(Setting s) {
    Result r;
    r.setting = s;
    const std::string label =
        fmt::format("stoker-tune: num_workers={} batch_size={}", s.workers, s.batch);
    try {
      run(s, r, label);
    } catch (const std::exception& e) {
      r.ok = false;
      r.error = e.what();
    }
    progress_.clear();
    if (!progress_.enabled()) {
      if (r.ok) {
        std::fprintf(stderr, "%s: %s samples/s, peak %s, waited %.0f%%\n", label.c_str(),
                     format_count(r.samples_per_s).c_str(), format_bytes(r.peak_pss).c_str(),
                     r.wait_fraction * 100);
      } else {
        std::fprintf(stderr, "%s: failed: %s\n", label.c_str(), r.error.c_str());
      }
    }
    return r;
  }

 private:
  void run(Setting s, Result& r, const std::string& label) {
    stoker::LoaderOptions opt;
    opt.batch_size = s.batch;
    opt.num_workers = s.workers;
    opt.prefetch_factor = args_.prefetch;
    // Workers stay across epochs, so a short dataset's epochs do not refork them.
    opt.persistent_workers = s.workers > 0;
    stoker::DataLoader loader(
        WithWork<D>{dataset_, std::chrono::microseconds(args_.simulate_work_us)}, opt);

    const std::int64_t swap_before = swap_used_bytes();
    const bool by_epochs = args_.epochs > 0;
    // Warm-up ends once the time has passed and every slot of the ring has been filled once
    // (the workers forked, their slots' pages faulted in).
    const std::uint64_t warm_batches =
        std::max<std::uint64_t>(1, static_cast<std::uint64_t>(s.workers) * args_.prefetch);
    const Clock::time_point start = Clock::now();
    bool timed = false;
    bool done = false;
    Clock::time_point t0{};
    Clock::time_point t1{};
    CpuTimes cpu0;
    CpuTimes cpu1;
    double wait_done = 0;  // waits of the finished epochs
    double wait0 = 0;
    double wait1 = 0;
    std::uint64_t seen = 0;
    int timed_epochs = 0;
    Clock::time_point next_pss{};
    stoker::LoaderStats last;

    for (std::uint64_t epoch = 0; !done; ++epoch) {
      loader.set_epoch(epoch);
      std::uint64_t in_epoch = 0;
      for (const stoker::Batch& batch : loader) {
        const Clock::time_point now = Clock::now();
        ++in_epoch;
        if (!timed) {
          ++seen;
          progress_.show(label + " warm-up",
                         args_.warmup > 0
                             ? std::chrono::duration<double>(now - start).count() / args_.warmup
                             : 1.0);
          if (!by_epochs && seen >= warm_batches &&
              now - start >= std::chrono::duration<double>(args_.warmup)) {
            timed = true;
            t0 = now;
            cpu0 = cpu_times();
            wait0 = wait_done + loader.stats().wait_seconds;
            r.peak_pss = std::max(r.peak_pss, tree_pss_bytes());
            next_pss = Clock::now() + kPssInterval;
          }
          continue;
        }
        ++r.batches;
        r.samples += batch.size();
        r.bytes_per_s += static_cast<double>(batch.nbytes());  // bytes, until divided below
        if (now >= next_pss) {
          r.peak_pss = std::max(r.peak_pss, tree_pss_bytes());
          next_pss = Clock::now() + kPssInterval;
        }
        const double elapsed = std::chrono::duration<double>(now - t0).count();
        if (by_epochs) {
          const double per_epoch = static_cast<double>(loader.size());
          progress_.show(label,
                         (timed_epochs + static_cast<double>(in_epoch) / per_epoch) / args_.epochs);
        } else {
          progress_.show(label, elapsed / args_.seconds);
          if (elapsed >= args_.seconds) {
            t1 = now;
            cpu1 = cpu_times();
            last = loader.stats();
            wait1 = wait_done + last.wait_seconds;
            done = true;
            break;
          }
        }
      }
      if (done) break;
      const stoker::LoaderStats after = loader.stats();
      wait_done += after.wait_seconds;
      if (in_epoch == 0) {
        throw std::runtime_error("the dataset gave no batch (is it empty?)");
      }
      if (!by_epochs) continue;
      if (!timed) {  // the warm-up epoch is over
        timed = true;
        t0 = Clock::now();
        cpu0 = cpu_times();
        wait0 = wait_done;
        r.peak_pss = std::max(r.peak_pss, tree_pss_bytes());
        continue;
      }
      if (++timed_epochs == args_.epochs) {
        t1 = Clock::now();
        cpu1 = cpu_times();
        wait1 = wait_done;
        last = after;
        done = true;
      }
    }
    r.peak_pss = std::max(r.peak_pss, tree_pss_bytes());
    r.swap_rise = swap_used_bytes() - swap_before;
    r.seconds = std::chrono::duration<double>(t1 - t0).count();
    if (r.seconds <= 0 || r.batches == 0) {
      throw std::runtime_error("no batch arrived in the timed window; raise --seconds");
    }
    r.samples_per_s = static_cast<double>(r.samples) / r.seconds;
    r.bytes_per_s /= r.seconds;
    r.wait_fraction = std::clamp((wait1 - wait0) / r.seconds, 0.0, 1.0);
    if (cpu1.total > cpu0.total) {
      const auto ticks = static_cast<double>(cpu1.total - cpu0.total);
      r.cpu_busy = static_cast<double>(cpu1.busy - cpu0.busy) / ticks;
      r.iowait = static_cast<double>(cpu1.iowait - cpu0.iowait) / ticks;
    }

    // The loader's own figures, narrowed to the timed window where the tool measured it.
    stoker::LoaderStats window = last;
    // A loader that does not report per-worker figures still has its workers: count them, with
    // their busy time unknown.
    for (std::size_t w = window.workers.size(); w < static_cast<std::size_t>(s.workers); ++w) {
      stoker::WorkerStats unknown;
      unknown.worker_id = w;
      window.workers.push_back(unknown);
    }
    window.batches = r.batches;
    window.samples = r.samples;
    window.bytes = static_cast<std::uint64_t>(r.bytes_per_s * r.seconds);
    window.epoch_seconds = r.seconds;
    window.wait_seconds = r.wait_fraction * r.seconds;
    // The CPUs over exactly the timed window (the loader's figures run from begin(), warm-up
    // included).
    if (r.cpu_busy) window.cpu_busy_fraction = r.cpu_busy;
    if (r.iowait) window.iowait_fraction = r.iowait;
    const stoker::Diagnosis d = stoker::diagnose(window, system_);
    r.verdict = std::string(stoker::to_string(d.verdict));
    r.diagnosis = d.summary;
    r.ok = true;
  }

  D dataset_;
  const Args& args_;
  const stoker::SystemInfo& system_;
  Progress progress_;
};

// ---------------------------------------------------------------------------------------------
// Strategies.

template <class D>
std::vector<Result> run_grid(Tuner<D>& tuner, const Args& a, std::size_t cores,
                             std::size_t default_batch) {
  std::vector<int> workers = a.workers;
  if (workers.empty()) {
    workers.push_back(0);
    for (std::size_t w = 1; w <= 2 * cores; w *= 2) workers.push_back(static_cast<int>(w));
  }
  std::vector<std::size_t> batches = a.batches;
  if (batches.empty()) {
    if (default_batch > 1) batches.push_back(default_batch / 2);
    batches.push_back(default_batch);
    batches.push_back(default_batch * 2);
  }
  std::vector<Result> results;
  for (const std::size_t b : batches) {
    for (const int w : workers) results.push_back(tuner.measure({w, b}));
  }
  return results;
}

bool swapped(Result& r) {
  if (r.swap_rise <= kSwapRiseBytes) return false;
  r.note = fmt::format("swap in use rose by {}: stop",
                       format_bytes(static_cast<std::size_t>(r.swap_rise)));
  return true;
}

template <class D>
std::vector<Result> run_progressive(Tuner<D>& tuner, const Args& a, std::size_t cores,
                                    std::size_t default_batch) {
  std::vector<Result> results;
  const std::size_t batch0 = a.batches.empty() ? default_batch : a.batches.front();
  const int start = std::max(1, static_cast<int>(std::lround(static_cast<double>(cores) / 4.0)));
  const int step = std::max(1, static_cast<int>(cores / 8));
  const int most = a.max_workers > 0 ? a.max_workers
                                     : std::min(stoker::kMaxWorkers, static_cast<int>(2 * cores));

  // Workers: add until the gain is under 5%, throughput falls, or swap use rises.
  std::optional<std::size_t> best;  // index into results
  for (int w = std::min(start, most); w <= most; w += step) {
    results.push_back(tuner.measure({w, batch0}));
    Result& r = results.back();
    if (!r.ok) {
      r.note = "failed: stop";
      break;
    }
    if (swapped(r)) break;
    if (best) {
      const double gain = r.samples_per_s / results[*best].samples_per_s - 1.0;
      if (gain < 0) {
        r.note = fmt::format("{:.0f}% slower: stop", -gain * 100);
        break;
      }
      if (gain < kWithin) {
        r.note = fmt::format("gain {:.1f}% < 5%: stop", gain * 100);
        best = results.size() - 1;
        break;
      }
      r.note = fmt::format("+{:.0f}%", gain * 100);
    }
    best = results.size() - 1;
  }
  if (!best) return results;

  // Batch size at the chosen worker count: twice (again while it gains 5%), then half.
  const int chosen = results[*best].setting.workers;
  const std::size_t base = *best;
  for (const bool up : {true, false}) {
    std::size_t prev = base;
    std::size_t b = batch0;
    for (int tries = 0; tries < 2; ++tries) {
      b = up ? b * 2 : b / 2;
      if (b < 1 || b > stoker::kMaxBatchSize) break;
      results.push_back(tuner.measure({chosen, b}));
      Result& r = results.back();
      if (!r.ok) {
        r.note = "failed: stop";
        break;
      }
      if (swapped(r)) break;
      const double gain = r.samples_per_s / results[prev].samples_per_s - 1.0;
      r.note = fmt::format("{:+.0f}% vs batch_size={}", gain * 100, results[prev].setting.batch);
      if (gain < kWithin) break;
      prev = results.size() - 1;
    }
  }
  return results;
}

// ---------------------------------------------------------------------------------------------
// The recommendation: the fewest workers, then the least memory, within 5% of the best.

struct Recommendation {
  std::size_t index = 0;
  std::size_t best = 0;
  std::string reason;
};

std::optional<Recommendation> recommend(const std::vector<Result>& results) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok && (!best || results[i].samples_per_s > results[*best].samples_per_s)) {
      best = i;
    }
  }
  if (!best) return std::nullopt;
  const double floor = results[*best].samples_per_s * (1.0 - kWithin);
  std::size_t pick = *best;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const Result& p = results[pick];
    if (!r.ok || r.samples_per_s < floor) continue;
    if (r.setting.workers < p.setting.workers ||
        (r.setting.workers == p.setting.workers && r.peak_pss < p.peak_pss)) {
      pick = i;
    }
  }
  Recommendation rec{pick, *best, {}};
  const Result& p = results[pick];
  const Result& b = results[*best];
  const std::string head =
      fmt::format("num_workers={}, batch_size={}: {} samples/s", p.setting.workers, p.setting.batch,
                  format_count(p.samples_per_s));
  if (pick == *best) {
    rec.reason = head + ", the best measured";
  } else {
    const char* why = p.setting.workers < b.setting.workers ? "fewer workers" : "less memory";
    rec.reason = fmt::format(
        "{}, within 5% of the best ({} samples/s at num_workers={}, batch_size={}) with {} "
        "({} against {} peak)",
        head, format_count(b.samples_per_s), b.setting.workers, b.setting.batch, why,
        format_bytes(p.peak_pss), format_bytes(b.peak_pss));
  }
  return rec;
}

// ---------------------------------------------------------------------------------------------
// Output: table, JSON, SVG.

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string json_number(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : "null"; }

template <class T>
std::string json_optional(const std::optional<T>& v) {
  return v ? fmt::format("{}", *v) : "null";
}

struct Report {
  std::string dataset;  // "workload image", "npy /data/x.npy"
  std::size_t dataset_samples = 0;
  std::size_t bytes_per_sample = 0;
  std::size_t cores = 0;
  const stoker::SystemInfo* system = nullptr;
  double elapsed_s = 0;
};

std::string to_json(const Args& a, const Report& rep, const std::vector<Result>& results,
                    const std::optional<Recommendation>& rec) {
  std::string j = "{\n";
  j += fmt::format("  \"tool\": \"stoker-tune\",\n  \"command\": {},\n", json_string(a.command));
  j += fmt::format(
      "  \"dataset\": {{\"source\": {}, \"name\": {}, \"samples\": {}, \"bytes_per_sample\": "
      "{}}},\n",
      json_string(a.source_kind), json_string(a.source), rep.dataset_samples, rep.bytes_per_sample);
  const stoker::SystemInfo& s = *rep.system;
  j += fmt::format(
      "  \"system\": {{\"usable_cores\": {}, \"logical_cpus\": {}, \"physical_cores\": {}, "
      "\"cpu_quota\": {}, \"mem_available_bytes\": {}, \"cgroup_limit_bytes\": {}}},\n",
      rep.cores, json_optional(s.logical_cpus.value), json_optional(s.physical_cores.value),
      json_optional(s.cpu_quota.value), json_optional(s.mem_available.value),
      json_optional(s.cgroup_limit.value));
  j += fmt::format(
      "  \"settings\": {{\"strategy\": {}, \"seconds\": {}, \"warmup_seconds\": {}, "
      "\"epochs\": {}, \"prefetch_factor\": {}, "
      "\"simulate_work_us\": {}, \"within\": {}}},\n",
      json_string(a.strategy), a.epochs > 0 ? "null" : json_number(a.seconds),
      a.epochs > 0 ? "null" : json_number(a.warmup),
      a.epochs > 0 ? std::to_string(a.epochs) : "null", a.prefetch, a.simulate_work_us,
      json_number(kWithin));
  j += "  \"results\": [\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    j += fmt::format(
        "    {{\"num_workers\": {}, \"batch_size\": {}, \"ok\": {}, \"samples_per_s\": {}, "
        "\"bytes_per_s\": {}, \"peak_pss_bytes\": {}, \"wait_fraction\": {}, "
        "\"cpu_busy_fraction\": {}, \"iowait_fraction\": {}, \"seconds\": {}, "
        "\"batches\": {}, \"samples\": {}, \"swap_rise_bytes\": {}, \"verdict\": {}, "
        "\"diagnosis\": {}, \"note\": {}, \"error\": {}}}{}\n",
        r.setting.workers, r.setting.batch, r.ok ? "true" : "false", json_number(r.samples_per_s),
        json_number(r.bytes_per_s), r.peak_pss, json_number(r.wait_fraction),
        r.cpu_busy ? json_number(*r.cpu_busy) : "null", r.iowait ? json_number(*r.iowait) : "null",
        json_number(r.seconds), r.batches, r.samples, r.swap_rise,
        r.ok ? json_string(r.verdict) : "null", r.ok ? json_string(r.diagnosis) : "null",
        json_string(r.note), r.ok ? "null" : json_string(r.error),
        i + 1 < results.size() ? "," : "");
  }
  j += "  ],\n";
  if (rec) {
    const Result& p = results[rec->index];
    const Result& b = results[rec->best];
    j += fmt::format(
        "  \"recommendation\": {{\"num_workers\": {}, \"batch_size\": {}, \"samples_per_s\": {}, "
        "\"peak_pss_bytes\": {}, \"best_num_workers\": {}, \"best_batch_size\": {}, "
        "\"best_samples_per_s\": {}, \"ratio_to_best\": {}, \"reason\": {}, \"diagnosis\": "
        "{}}},\n",
        p.setting.workers, p.setting.batch, json_number(p.samples_per_s), p.peak_pss,
        b.setting.workers, b.setting.batch, json_number(b.samples_per_s),
        json_number(p.samples_per_s / b.samples_per_s), json_string(rec->reason),
        json_string(p.diagnosis));
  } else {
    j += "  \"recommendation\": null,\n";
  }
  j += fmt::format("  \"elapsed_s\": {}\n}}\n", json_number(rep.elapsed_s));
  return j;
}

std::string table(const std::vector<Result>& results, const std::optional<Recommendation>& rec) {
  std::string t =
      fmt::format("{:>7} {:>6} {:>11} {:>9} {:>10} {:>5} {:>5}  {:<14} {}\n", "workers", "batch",
                  "samples/s", "MB/s", "peak PSS", "wait", "CPU", "verdict", "note");
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    std::string note;
    if (rec && i == rec->index) note = "<- recommended";
    if (rec && i == rec->best && i != rec->index) note = "best";
    if (!r.note.empty()) note += (note.empty() ? "" : "; ") + r.note;
    if (!r.ok) {
      t += fmt::format("{:>7} {:>6} {:>11} {}\n", r.setting.workers, r.setting.batch, "failed",
                       r.error);
      continue;
    }
    t += fmt::format("{:>7} {:>6} {:>11} {:>9.1f} {:>10} {:>4.0f}% {:>5}  {:<14} {}\n",
                     r.setting.workers, r.setting.batch, format_count(r.samples_per_s),
                     r.bytes_per_s / 1e6, format_bytes(r.peak_pss), r.wait_fraction * 100,
                     r.cpu_busy ? fmt::format("{:.0f}%", *r.cpu_busy * 100) : "?", r.verdict, note);
  }
  return t;
}

std::string xml_text(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A round step for about `ticks` intervals over [0, top]: 1, 2 or 5 times a power of ten.
double nice_step(double top, int ticks) {
  const double raw = std::max(top, 1e-9) / ticks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * power >= raw) return m * power;
  }
  return 10 * power;
}

std::string short_number(double v) {
  if (v >= 1e6) return fmt::format("{:g}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:g}k", v / 1e3);
  return fmt::format("{:g}", v);
}

// Two panels side by side — samples/s and peak PSS (MiB) against num_workers — one line per
// batch size, the recommended setting ringed.
std::string render_svg(const std::string& title, const std::vector<Result>& results,
                       const std::optional<Recommendation>& rec) {
  constexpr double kWidth = 960;
  constexpr double kHeight = 460;
  constexpr double kPanelW = 370;
  constexpr double kPanelH = 280;
  constexpr double kTop = 90;
  constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                      "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
  std::map<std::size_t, std::vector<const Result*>> series;  // batch size -> points
  int min_w = std::numeric_limits<int>::max();
  int max_w = 0;
  double max_sps = 0;
  double max_mib = 0;
  for (const Result& r : results) {
    if (!r.ok) continue;
    series[r.setting.batch].push_back(&r);
    min_w = std::min(min_w, r.setting.workers);
    max_w = std::max(max_w, r.setting.workers);
    max_sps = std::max(max_sps, r.samples_per_s);
    max_mib = std::max(max_mib, static_cast<double>(r.peak_pss) / 1048576.0);
  }
  if (max_w <= min_w) {
    min_w = std::max(0, min_w - 1);
    max_w = min_w + 2;
  }
  for (auto& [batch, points] : series) {
    std::sort(points.begin(), points.end(), [](const Result* x, const Result* y) {
      return x->setting.workers < y->setting.workers;
    });
  }

  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
      "font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"#ffffff\"/>\n"
      "<text x=\"{2}\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" "
      "font-weight=\"bold\">{3}</text>\n",
      kWidth, kHeight, kWidth / 2, xml_text(title));
  if (rec) {
    const Result& p = results[rec->index];
    const Result& b = results[rec->best];
    std::string caption = fmt::format(
        "recommended: num_workers={}, batch_size={}: {} samples/s, {} peak", p.setting.workers,
        p.setting.batch, format_count(p.samples_per_s), format_bytes(p.peak_pss));
    if (rec->index != rec->best) {
      caption += fmt::format(" (best: {} samples/s at num_workers={}, batch_size={})",
                             format_count(b.samples_per_s), b.setting.workers, b.setting.batch);
    }
    svg += fmt::format("<text x=\"{}\" y=\"50\" text-anchor=\"middle\">{}</text>\n", kWidth / 2,
                       xml_text(caption));
  }

  struct Panel {
    double left;
    const char* label;
    double top_value;
    bool memory;
  };
  const Panel panels[] = {
      {80, "throughput (samples/s)", max_sps, false},
      {80 + kPanelW + 110, "peak memory, PSS of the process tree (MiB)", max_mib, true}};
  for (const Panel& p : panels) {
    const double step = nice_step(p.top_value * 1.1, 5);
    const double top = std::max(step, std::ceil(p.top_value * 1.1 / step) * step);
    auto x_of = [&](int w) {
      return p.left + (w - min_w) * kPanelW / static_cast<double>(max_w - min_w);
    };
    auto y_of = [&](double v) { return kTop + kPanelH - v / top * kPanelH; };
    svg += fmt::format(
        "<g class=\"panel\">\n<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" "
        "font-weight=\"bold\">{}</text>\n",
        p.left + kPanelW / 2, kTop - 12, xml_text(p.label));
    // Grid lines and y ticks.
    for (double v = 0; v <= top + step / 2; v += step) {
      const double y = y_of(v);
      svg += fmt::format(
          "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e0e0e0\"/>\n"
          "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
          p.left, y, p.left + kPanelW, y, p.left - 6, y + 4, short_number(v));
    }
    // X ticks: every worker count when there are few, else about ten.
    const int x_step = std::max(1, (max_w - min_w + 9) / 10);
    for (int w = min_w; w <= max_w; w += x_step) {
      const double x = x_of(w);
      svg += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e0e0e0\"/>\n"
          "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
          x, kTop, kTop + kPanelH, kTop + kPanelH + 16, w);
    }
    // Axes and their labels.
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#000\"/>\n"
        "<line x1=\"{0:.1f}\" y1=\"{2:.1f}\" x2=\"{3:.1f}\" y2=\"{2:.1f}\" stroke=\"#000\"/>\n"
        "<text x=\"{4:.1f}\" y=\"{5:.1f}\" text-anchor=\"middle\">num_workers</text>\n",
        p.left, kTop, kTop + kPanelH, p.left + kPanelW, p.left + kPanelW / 2, kTop + kPanelH + 36);
    // One line per batch size.
    std::size_t colour = 0;
    for (const auto& [batch, points] : series) {
      const char* c = kColours[colour++ % std::size(kColours)];
      std::string path;
      for (const Result* r : points) {
        const double v = p.memory ? static_cast<double>(r->peak_pss) / 1048576.0 : r->samples_per_s;
        path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "" : " ", x_of(r->setting.workers),
                            y_of(v));
      }
      svg += fmt::format(
          "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" "
          "points=\"{}\"/>\n",
          c, path);
      for (const Result* r : points) {
        const double v = p.memory ? static_cast<double>(r->peak_pss) / 1048576.0 : r->samples_per_s;
        svg += fmt::format(
            "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"><title>num_workers={}, "
            "batch_size={}: {} samples/s, {} peak</title></circle>\n",
            x_of(r->setting.workers), y_of(v), c, r->setting.workers, batch,
            format_count(r->samples_per_s), format_bytes(r->peak_pss));
        if (rec && r == &results[rec->index]) {
          svg += fmt::format(
              "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"9\" fill=\"none\" "
              "stroke=\"#000\" stroke-width=\"2\"/>\n",
              x_of(r->setting.workers), y_of(v));
        }
      }
    }
    svg += "</g>\n";
  }

  // Legend, under the panels.
  double x = 80;
  const double y = kTop + kPanelH + 66;
  std::size_t colour = 0;
  for (const auto& [batch, points] : series) {
    const char* c = kColours[colour++ % std::size(kColours)];
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
        "stroke-width=\"2\"/>\n<circle cx=\"{4:.1f}\" cy=\"{1:.1f}\" r=\"4\" fill=\"{3}\"/>\n"
        "<text x=\"{5:.1f}\" y=\"{6:.1f}\">batch_size={7}</text>\n",
        x, y, x + 24, c, x + 12, x + 30, y + 4, batch);
    x += 140;
  }
  if (rec) {
    svg += fmt::format(
        "<circle cx=\"{0:.1f}\" cy=\"{1:.1f}\" r=\"9\" fill=\"none\" stroke=\"#000\" "
        "stroke-width=\"2\"/>\n<text x=\"{2:.1f}\" y=\"{3:.1f}\">recommended</text>\n",
        x + 12, y, x + 30, y + 4);
  }
  svg += "</svg>\n";
  return svg;
}

// ---------------------------------------------------------------------------------------------

template <class D>
int tune(D dataset, const Args& a, std::size_t default_batch, const Clock::time_point started) {
  const stoker::SystemInfo system = stoker::probe_system();
  Report rep;
  rep.system = &system;
  rep.cores = usable_cores(system);
  rep.dataset_samples = static_cast<std::size_t>(dataset.size());
  if (rep.dataset_samples == 0) {
    std::fprintf(stderr, "stoker-tune: the dataset is empty; nothing to measure\n");
    return 1;
  }
  rep.bytes_per_sample = stoker::Sample(dataset.get(0)).nbytes();

  Tuner<D> tuner(std::move(dataset), a, system);
  const std::vector<Result> results = a.strategy == "grid"
                                          ? run_grid(tuner, a, rep.cores, default_batch)
                                          : run_progressive(tuner, a, rep.cores, default_batch);
  const std::optional<Recommendation> rec = recommend(results);
  rep.elapsed_s = std::chrono::duration<double>(Clock::now() - started).count();

  const std::string title = fmt::format("stoker-tune: {} {} on {} CPUs ({} strategy)",
                                        a.source_kind, a.source, rep.cores, a.strategy);
  std::string text = table(results, rec);
  if (rec) {
    text +=
        fmt::format("\nrecommended: {}\n  at it: {}\n", rec->reason, results[rec->index].diagnosis);
  } else {
    text += "\nno setting could be measured; see the errors above\n";
  }
  text += fmt::format("measured {} setting{} in {:.1f} s\n", results.size(),
                      results.size() == 1 ? "" : "s", rep.elapsed_s);
  std::fputs(text.c_str(), a.json ? stderr : stdout);
  if (a.json) std::fputs(to_json(a, rep, results, rec).c_str(), stdout);
  if (!a.svg.empty()) {
    std::ofstream out(a.svg);
    out << render_svg(title, results, rec);
    if (!out) {
      std::fprintf(stderr, "stoker-tune: writing %s failed\n", a.svg.c_str());
      return 1;
    }
  }
  return rec ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Clock::time_point started = Clock::now();
  const Args a = parse(argc, argv);
  try {
    if (a.source_kind == "workload") {
      if (a.source == "tiny") return tune(stoker::bench::TinyDataset{}, a, 256, started);
      if (a.source == "image") return tune(stoker::bench::ImageDataset{}, a, 64, started);
      return tune(stoker::bench::CpuDataset{}, a, 32, started);
    }
    if (a.source_kind == "npy") return tune(stoker::NpyDataset(a.source), a, 64, started);
    if (a.source_kind == "tokens") {
      stoker::TokenDataset::Options o;
      o.context = a.window.value_or(1024);
      return tune(stoker::TokenDataset({a.source}, o), a, 16, started);
    }
    return tune(stoker::ImageFolderDataset(a.source), a, 64, started);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoker-tune: %s\n", e.what());
    return 1;
  }
}
