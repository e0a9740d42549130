// stoker-bench: runs one of the fixed synthetic workloads through a DataLoader and prints one
// JSON line of measured figures. Reproduce any figure with the "command" it prints.
//
//   stoker-bench --workload {tiny,image,cpu} --workers N --epochs E --warmup W [--persistent]
//                [--prefetch P] [--no-stats]   (--no-stats: LoaderOptions::collect_stats = false)
//   stoker-bench --memcpy      single-thread memcpy bandwidth of image-sized batches (9.6 MB)
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench_workloads.hpp"
#include "stoker/stoker.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string workload = "tiny";
  int workers = 2;
  int epochs = 5;
  int warmup = 1;
  bool persistent = false;
  bool stats = true;
  std::size_t prefetch = 2;
  bool memcpy_only = false;
  std::string command;
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "stoker-bench: %s\nusage: stoker-bench --workload {tiny,image,cpu} --workers N "
               "--epochs E --warmup W [--persistent] [--prefetch P] [--no-stats]\n",
               problem.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  a.command = "stoker-bench";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    a.command += " " + flag;
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(flag + " needs a value");
      a.command += std::string(" ") + argv[i + 1];
      return argv[++i];
    };
    auto number = [&](int low, int high) {
      const std::string v = value();
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || n < low || n > high) {
        usage(fmt::format("{} must be a whole number from {} to {}, not '{}'", flag, low, high, v));
      }
      return static_cast<int>(n);
    };
    if (flag == "--workload") {
      a.workload = value();
      if (a.workload != "tiny" && a.workload != "image" && a.workload != "cpu") {
        usage("--workload must be tiny, image or cpu");
      }
    } else if (flag == "--workers") {
      a.workers = number(0, 256);
    } else if (flag == "--epochs") {
      a.epochs = number(1, 1000);
    } else if (flag == "--warmup") {
      a.warmup = number(0, 1000);
    } else if (flag == "--prefetch") {
      a.prefetch = static_cast<std::size_t>(number(1, 64));
    } else if (flag == "--persistent") {
      a.persistent = true;
    } else if (flag == "--no-stats") {
      a.stats = false;
    } else if (flag == "--memcpy") {
      a.memcpy_only = true;
    } else if (flag == "--help" || flag == "-h") {
      usage("help");
    } else {
      usage("unknown option " + flag);
    }
  }
  if (a.persistent && a.workers == 0) usage("--persistent needs --workers 1 or more");
  return a;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double cpu_seconds(int who) {
  rusage usage{};
  getrusage(who, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

// utime + stime of a live process, from /proc/<pid>/stat.
double process_cpu_seconds(pid_t pid) {
  std::FILE* f = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
  if (f == nullptr) return 0;
  char buffer[1024];
  const std::size_t n = std::fread(buffer, 1, sizeof buffer - 1, f);
  std::fclose(f);
  buffer[n] = '\0';
  const char* p = std::strrchr(buffer, ')');
  if (p == nullptr) return 0;
  unsigned long utime = 0;
  unsigned long stime = 0;
  // After ") ": state, then fields 4..13, then utime (14) and stime (15).
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) !=
      2) {
    return 0;
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Proportional set size of a live process (its share of shared pages), from smaps_rollup.
double pss_mb(pid_t pid) {
  std::FILE* f = std::fopen(fmt::format("/proc/{}/smaps_rollup", pid).c_str(), "r");
  if (f == nullptr) return 0;
  char line[256];
  double kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "Pss: %lf kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb / 1024.0;
}

// Sum of PSS over this process and its live workers: the memory the whole tree costs.
double tree_pss_mb(const std::vector<pid_t>& workers) {
  double total = pss_mb(getpid());
  for (const pid_t pid : workers) total += pss_mb(pid);
  return total;
}

// memcpy of a 9.6 MB batch-sized buffer into a reused (pre-faulted) destination: the ceiling
// one core can move a batch at, to compare the loader's bytes/s against.
int run_memcpy(const Args& a) {
  const std::size_t bytes = std::size_t{64} * 3 * 224 * 224;
  std::vector<std::uint8_t> src(bytes, 1);
  std::vector<std::uint8_t> dst(bytes, 0);
  std::vector<double> rates;
  for (int rep = 0; rep < 5 + a.epochs * 10; ++rep) {
    const Clock::time_point start = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    const double s = seconds(Clock::now() - start);
    src[static_cast<std::size_t>(rep) % bytes] = static_cast<std::uint8_t>(dst[bytes - 1] + 1);
    if (rep >= 5) rates.push_back(static_cast<double>(bytes) / s / 1e6);
  }
  std::sort(rates.begin(), rates.end());
  fmt::print("{{\"impl\": \"memcpy\", \"bytes\": {}, \"mb_per_s\": {:.1f}, \"command\": \"{}\"}}\n",
             bytes, rates[rates.size() / 2], a.command);
  return 0;
}

template <class D>
int run(const Args& a, D dataset, std::size_t batch_size) {
  stoker::LoaderOptions opt;
  opt.batch_size = batch_size;
  opt.num_workers = a.workers;
  opt.persistent_workers = a.persistent;
  opt.prefetch_factor = a.prefetch;
  opt.collect_stats = a.stats;
  opt.drop_last = a.workload == "tiny";
  const std::size_t n = dataset.size();
  stoker::DataLoader loader(std::move(dataset), opt);

  std::vector<double> epoch_s;
  std::vector<double> first_batch_ms;
  double first_batch_cold_ms = 0;
  double checksum = 0;
  double expected = 0;
  std::size_t bytes_per_epoch = 0;
  std::size_t samples_per_epoch = 0;
  double cpu_start = 0;
  std::vector<std::pair<pid_t, double>> live_at_start;
  // Tree PSS, sampled every 250 ms of the timed epochs: reading smaps_rollup walks every page
  // table of a process (~1 ms here), which at 50 ms intervals cost the cpu workload 3% of its
  // throughput.
  double peak_pss = 0;
  Clock::time_point next_sample{};

  for (int e = 0; e < a.warmup + a.epochs; ++e) {
    const bool timed = e >= a.warmup;
    if (e == a.warmup) {
      cpu_start = cpu_seconds(RUSAGE_SELF) + cpu_seconds(RUSAGE_CHILDREN);
      for (const pid_t pid : loader.worker_pids()) {
        live_at_start.emplace_back(pid, process_cpu_seconds(pid));
      }
    }
    double sum = 0;
    std::size_t bytes = 0;
    std::size_t samples = 0;
    const Clock::time_point start = Clock::now();
    Clock::time_point first{};
    bool have_first = false;
    for (const stoker::Batch& batch : loader) {
      if (!have_first) {
        first = Clock::now();
        have_first = true;
      }
      const stoker::Tensor& data = batch["data"];
      const stoker::Tensor& label = batch["label"];
      if constexpr (std::is_same_v<D, stoker::bench::ImageDataset>) {
        sum += static_cast<double>(data.data<std::uint8_t>()[data.numel() - 1]);
      } else {
        sum += static_cast<double>(data.data<float>()[data.numel() - 1]);
      }
      sum += static_cast<double>(label.data<std::int64_t>()[label.numel() - 1]);
      bytes += batch.nbytes();
      samples += batch.size();
      if (timed && Clock::now() >= next_sample) {
        peak_pss = std::max(peak_pss, tree_pss_mb(loader.worker_pids()));
        next_sample = Clock::now() + std::chrono::milliseconds(250);
      }
    }
    const Clock::time_point end = Clock::now();
    if (e == 0) first_batch_cold_ms = seconds(first - start) * 1e3;
    if (!timed) continue;
    epoch_s.push_back(seconds(end - start));
    first_batch_ms.push_back(seconds(first - start) * 1e3);
    checksum += sum;
    bytes_per_epoch = bytes;
    samples_per_epoch = samples;
    const std::size_t batches = loader.size();
    for (std::size_t b = 0; b < batches; ++b) {
      const std::size_t last = std::min((b + 1) * batch_size, n) - 1;
      expected += D::last_value(last) + static_cast<double>(last % 10);
    }
  }
  double cpu = cpu_seconds(RUSAGE_SELF) + cpu_seconds(RUSAGE_CHILDREN) - cpu_start;
  for (const pid_t pid : loader.worker_pids()) {
    double before = 0;
    for (const auto& [p, t] : live_at_start) before = p == pid ? t : before;
    cpu += process_cpu_seconds(pid) - before;
  }

  std::vector<double> sorted = epoch_s;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const double total_samples = static_cast<double>(samples_per_epoch) * a.epochs;
  fmt::print(
      "{{\"impl\": \"stoker\", \"variant\": \"{}\", \"workload\": \"{}\", \"workers\": {}, "
      "\"batch_size\": {}, \"prefetch_factor\": {}, \"samples_per_epoch\": {}, "
      "\"bytes_per_epoch\": {}, \"epoch_s\": [{:.6f}], \"first_batch_ms\": [{:.3f}], "
      "\"first_batch_cold_ms\": {:.3f}, \"samples_per_s\": {:.1f}, \"mb_per_s\": {:.1f}, "
      "\"cpu_us_per_sample\": {:.3f}, \"peak_pss_mb\": {:.1f}, \"checksum\": {:.1f}, "
      "\"checksum_ok\": {}, \"command\": \"{}\"}}\n",
      a.persistent ? "persistent" : "default", a.workload, a.workers, batch_size, a.prefetch,
      samples_per_epoch, bytes_per_epoch, fmt::join(epoch_s, ", "), fmt::join(first_batch_ms, ", "),
      first_batch_cold_ms, static_cast<double>(samples_per_epoch) / median,
      static_cast<double>(bytes_per_epoch) / median / 1e6, cpu / total_samples * 1e6, peak_pss,
      checksum, checksum == expected ? "true" : "false", a.command);
  return checksum == expected ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.memcpy_only) return run_memcpy(a);
  try {
    if (a.workload == "tiny") return run(a, stoker::bench::TinyDataset{}, 256);
    if (a.workload == "image") return run(a, stoker::bench::ImageDataset{}, 64);
    return run(a, stoker::bench::CpuDataset{}, 32);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoker-bench: %s\n", e.what());
    return 1;
  }
}
