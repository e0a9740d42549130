// stoker-tune's parts (tools/tune/), shared by its files: the command line (args.cpp), the
// machine's figures through the library's /proc module (machine.cpp), measuring one setting
// (measure.hpp, a template over the dataset), the two searches (search.cpp), the
// recommendation (recommend.cpp) and the outputs: table (table.cpp), JSON (json.cpp) and SVG
// chart (svg.cpp). main.cpp picks the dataset and runs them in that order. Internal to the tool.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "stoker/stoker.hpp"

namespace stoker::tune {

using Clock = std::chrono::steady_clock;

// Within this share of the best throughput a setting counts as just as good; a step that gains
// less stops the search.
inline constexpr double kWithin = 0.05;
// Swap in use rising by more than this while a setting runs means it does not fit in memory.
inline constexpr std::int64_t kSwapRiseBytes = std::int64_t{32} << 20;

// ---- The command line (args.cpp) ----

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
  // prefetch_factor values to try (0: kAdaptivePrefetch, the loader's default); the first is
  // used for the worker and batch search, the others are tried at its recommended setting.
  std::vector<std::size_t> prefetches{stoker::kAdaptivePrefetch};
  long simulate_work_us = 0;
  bool json = false;
  std::string svg;
  std::string command;
};

// Exits 0 after printing the usage for --help, and 2 with the problem and the usage for a bad
// command line.
Args parse_args(int argc, char** argv);

// ---- The machine (machine.cpp) ----

// The CPUs this process may use: logical CPUs, capped by a cgroup CPU quota.
std::size_t usable_cores(const SystemInfo& system);

// The machine's CPU time so far, from /proc/stat (clock ticks); zeros when unreadable.
struct CpuTimes {
  std::uint64_t busy = 0;
  std::uint64_t iowait = 0;
  std::uint64_t total = 0;
};
CpuTimes cpu_times();

// Swap in use (SwapTotal - SwapFree), in bytes.
std::int64_t swap_used_bytes();

// A progress bar on stderr, only when it is a terminal.
class Progress {
 public:
  Progress();
  void show(const std::string& label, double fraction);
  void clear();
  bool enabled() const noexcept { return enabled_; }

 private:
  bool enabled_;
  Clock::time_point next_{};
};

// ---- One setting's measurement (measure.hpp) ----

struct Setting {
  int workers = 0;
  std::size_t batch = 0;
  std::size_t prefetch = stoker::kAdaptivePrefetch;  // 0: adaptive
};

// "adaptive" or the number.
std::string prefetch_text(std::size_t prefetch);

struct Result {
  Setting setting;
  bool ok = false;
  std::string error;  // why it could not run
  double samples_per_s = 0;
  double bytes_per_s = 0;
  double seconds = 0;  // the timed window
  std::uint64_t batches = 0;
  std::uint64_t samples = 0;
  // The tree's peak memory over the setting's whole run, warm-up included (os/proc's
  // TreeMemorySampler: each process's anonymous memory plus the ring's memfd once), and the
  // ring's allocated bytes at that moment.
  std::uint64_t peak_memory = 0;
  std::uint64_t ring_bytes = 0;
  double wait_fraction = 0;
  std::optional<double> cpu_busy;  // the machine's, over the timed window
  std::optional<double> iowait;
  std::int64_t swap_rise = 0;
  std::string verdict;
  std::string diagnosis;
  std::string note;  // what the search made of it
};

// Measures one setting; never throws (a failure is a Result with ok false).
using Measure = std::function<Result(Setting)>;

// ---- The searches (search.cpp) ----

// Every --workers x --batch x --prefetch setting (defaults: 0, 1, 2, 4 .. 2 x cores workers;
// half, once and twice `default_batch`; the adaptive prefetch).
std::vector<Result> run_grid(const Measure& measure, const Args& a, std::size_t cores,
                             std::size_t default_batch);
// Adds workers from a quarter of the cores until the gain is under kWithin, throughput falls or
// swap use rises; then twice and half the batch size at that worker count; then each further
// --prefetch value at the best setting so far.
std::vector<Result> run_progressive(const Measure& measure, const Args& a, std::size_t cores,
                                    std::size_t default_batch);

// ---- The recommendation (recommend.cpp) ----

struct Recommendation {
  std::size_t index = 0;  // into the results: the recommended setting
  std::size_t best = 0;   // the best measured
  std::string reason;
};

// The fewest workers, then the least memory, within kWithin of the best; nullopt when no
// setting could be measured.
std::optional<Recommendation> recommend(const std::vector<Result>& results);

// ---- Outputs (table.cpp, json.cpp, svg.cpp) ----

struct Report {
  std::string dataset;  // "workload image", "npy /data/x.npy"
  std::size_t dataset_samples = 0;
  std::size_t bytes_per_sample = 0;
  std::size_t cores = 0;
  const SystemInfo* system = nullptr;
  double elapsed_s = 0;
};

std::string table(const std::vector<Result>& results, const std::optional<Recommendation>& rec);
std::string to_json(const Args& a, const Report& rep, const std::vector<Result>& results,
                    const std::optional<Recommendation>& rec);
// Two panels side by side — samples/s and peak memory (MiB) against num_workers — one line per
// batch size, the recommended setting ringed.
std::string render_svg(const std::string& title, const std::vector<Result>& results,
                       const std::optional<Recommendation>& rec);

}  // namespace stoker::tune
