// stoker-bench: runs one workload through a DataLoader and prints one JSON line of measured
// figures. Reproduce any figure with the "command" it prints.
//
//   stoker-bench --workload {tiny,image,cpu} --workers N --epochs E --warmup W [--persistent]
//                [--prefetch P] [--samples S] [--no-stats] [--consumer-us U]
//                [--consumer-cpu-us U] [--memory-interval-ms M]
//                [--memory-anonymous tracked|proportional|resident]
//   stoker-bench --workload folder --data DIR [--pipeline val|train] [--mode exact|fast] ...
//                ImageFolderDataset, batch 64, with the vision::Pipeline val (default:
//                Resize(256), CenterCrop(224), RandomHorizontalFlip) or train
//                (RandomResizedCrop(224), RandomHorizontalFlip), uint8 CHW, exact or fast mode
//   stoker-bench --workload decode --data DIR ...   the same files, only decoded (full size,
//                                                   vision::decode): what any loader pays
//   stoker-bench --workload tokens --data FILE ...  TokenDataset over a raw uint16 shard: S random
//                                                   1,024-token windows (int64), batch 32
//   stoker-bench --memcpy      single-thread memcpy bandwidth of image-sized batches (9.6 MB)
//   stoker-bench [--memory-...] --measure-command COMMAND ARGS...
//                runs COMMAND and samples its process tree from here with the same sampler
//                (how bench/compare measures PyTorch's and libtorch's loaders); COMMAND's output
//                is passed through, the memory fields added to each line that is a JSON object.
//                Other programs' shared memory is read through /proc/PID/map_files: run as root
//
// --samples S sets the samples per epoch (default: the workload's own size; tokens: 8,192);
// for folder and tokens, S random ones. --no-stats sets LoaderOptions::collect_stats = false.
// --consumer-us U makes the consumer sleep U microseconds after each batch, like a training
// step that runs on a GPU (default 0: the loader is always the bottleneck); --consumer-cpu-us U
// makes it compute (spin) for U microseconds instead (--sample-us sets the cpu workload's work
// per sample, 200 by default), like a training step on the CPU that
// shares the cores with the workers. --prefetch P sets a fixed prefetch_factor; without it (or
// with 0) the loader's default, an adaptive depth. The JSON line reports the depth reached and
// `core_use`: the share of the machine's cores the run kept busy (samples/s x CPU per sample).
//
// Memory: a thread (os/proc's TreeMemorySampler) samples the process tree from before the loader
// is built until after its last epoch, warm-up included, every M ms (--memory-interval-ms, 10 by
// default; 0 turns it off): each process's anonymous memory plus each shared-memory object (the
// ring's memfd) once. `peak_tree_mb` is the largest total, `peak_tree_at_s` when it was seen
// (seconds after the sampler started), `peak_tree_epoch` the epoch it fell in (-1: before the
// first, warm-up epochs first), `ring_resident_mb` the ring's allocated bytes at that moment and
// `ring_peak_mb` its largest. Anonymous memory is Pss_Anon (a page shared copy-on-write counts
// once over the tree); --memory-anonymous says how it is read: tracked (the default) reads it
// exactly as often as 0.5% of a core allows (a pass walks every page table, the ring's
// included) and follows each process's RssAnon in between; proportional reads it in every pass
// (which then come as rarely as 1% of a core allows); resident counts RssAnon alone (a page
// shared copy-on-write counts in every process). --memory-cpu-share S sets the sampler's CPU
// budget (a share of one core, 0.01 by default).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench_workloads.hpp"
#include "os/posix.hpp"
#include "os/proc.hpp"
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
  std::size_t prefetch = stoker::kAdaptivePrefetch;
  std::size_t samples = 0;  // 0: the workload's default
  int consumer_us = 0;
  int consumer_cpu_us = 0;
  int sample_us = 200;  // the cpu workload's work per sample
  std::string data;
  std::string pipeline = "val";
  std::string mode = "exact";
  bool memcpy_only = false;
  int memory_interval_ms = 10;  // 0: no sampler
  double memory_cpu_share = 0.01;
  std::vector<std::string> measure;  // --measure-command: the command and its arguments
  stoker::detail::AnonymousCount anonymous = stoker::detail::AnonymousCount::kTracked;
  std::string command;
};

constexpr const char* kUsage =
    "usage: stoker-bench --workload {tiny,image,cpu,folder,decode,tokens} [--data PATH] "
    "[--pipeline val|train] [--mode exact|fast] --workers N --epochs E --warmup W "
    "[--persistent] [--prefetch P] [--samples S] [--no-stats] [--consumer-us U] "
    "[--consumer-cpu-us U] [--sample-us U (cpu)] [--memory-interval-ms M] "
    "[--memory-anonymous tracked|proportional|resident] [--memory-cpu-share S]\n"
    "       stoker-bench [--memory-...] --measure-command COMMAND ARGS...\n"
    "       stoker-bench --memcpy\n";

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr, "stoker-bench: %s\n%s", problem.c_str(), kUsage);
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
    auto number = [&](long low, long high) {
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
      if (a.workload != "tiny" && a.workload != "image" && a.workload != "cpu" &&
          a.workload != "folder" && a.workload != "decode" && a.workload != "tokens") {
        usage("--workload must be tiny, image, cpu, folder, decode or tokens");
      }
    } else if (flag == "--pipeline") {
      a.pipeline = value();
      if (a.pipeline != "val" && a.pipeline != "train") usage("--pipeline must be val or train");
    } else if (flag == "--mode") {
      a.mode = value();
      if (a.mode != "exact" && a.mode != "fast") usage("--mode must be exact or fast");
    } else if (flag == "--data") {
      a.data = value();
    } else if (flag == "--samples") {
      a.samples = static_cast<std::size_t>(number(1, 1000000000));
    } else if (flag == "--workers") {
      a.workers = number(0, 256);
    } else if (flag == "--epochs") {
      a.epochs = number(1, 1000);
    } else if (flag == "--warmup") {
      a.warmup = number(0, 1000);
    } else if (flag == "--prefetch") {
      a.prefetch = static_cast<std::size_t>(number(0, 64));
    } else if (flag == "--persistent") {
      a.persistent = true;
    } else if (flag == "--consumer-us") {
      a.consumer_us = number(0, 10000000);
    } else if (flag == "--sample-us") {
      a.sample_us = number(0, 10000000);
    } else if (flag == "--consumer-cpu-us") {
      a.consumer_cpu_us = number(0, 10000000);
    } else if (flag == "--measure-command") {
      for (int j = i + 1; j < argc; ++j) {
        if (j == i + 1 && std::string(argv[j]) == "--") continue;
        a.measure.emplace_back(argv[j]);
        a.command += std::string(" ") + argv[j];
      }
      if (a.measure.empty()) usage("--measure-command needs the command to run");
      break;
    } else if (flag == "--memory-cpu-share") {
      const std::string v = value();
      char* end = nullptr;
      a.memory_cpu_share = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(a.memory_cpu_share > 0) || a.memory_cpu_share > 1) {
        usage("--memory-cpu-share must be a number above 0 and at most 1, not '" + v + "'");
      }
    } else if (flag == "--memory-interval-ms") {
      a.memory_interval_ms = number(0, 60000);
    } else if (flag == "--memory-anonymous") {
      const std::string v = value();
      if (v == "tracked") {
        a.anonymous = stoker::detail::AnonymousCount::kTracked;
      } else if (v == "proportional") {
        a.anonymous = stoker::detail::AnonymousCount::kProportional;
      } else if (v == "resident") {
        a.anonymous = stoker::detail::AnonymousCount::kResident;
      } else {
        usage("--memory-anonymous must be tracked, proportional or resident");
      }
    } else if (flag == "--no-stats") {
      a.stats = false;
    } else if (flag == "--memcpy") {
      a.memcpy_only = true;
    } else if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else {
      usage("unknown option " + flag);
    }
  }
  if (!a.measure.empty()) return a;
  if (a.persistent && a.workers == 0) usage("--persistent needs --workers 1 or more");
  if ((a.workload == "folder" || a.workload == "decode" || a.workload == "tokens") &&
      a.data.empty()) {
    usage("--workload " + a.workload + " needs --data (bench/compare/run.sh generates it)");
  }
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
  std::string stat;
  if (!stoker::detail::posix::read_file(fmt::format("/proc/{}/stat", pid).c_str(), stat)) {
    return 0;
  }
  const char* p = std::strrchr(stat.c_str(), ')');
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

// The last element of a field, as a double: the consumer's token work per batch.
double last_element(const stoker::Tensor& t) {
  const std::size_t last = t.numel() - 1;
  switch (t.dtype()) {
    case stoker::DType::kUInt8:
      return t.data<std::uint8_t>()[last];
    case stoker::DType::kUInt16:
      return t.data<std::uint16_t>()[last];
    case stoker::DType::kInt32:
      return t.data<std::int32_t>()[last];
    case stoker::DType::kInt64:
      return static_cast<double>(t.data<std::int64_t>()[last]);
    case stoker::DType::kFloat32:
      return t.data<float>()[last];
    default:
      return 0;
  }
}

// How a workload is loaded and how its batches are checked. Synthetic workloads know the last
// value of every batch, so the epoch's checksum is compared with the one computed directly;
// real data gets a sanity check on each batch instead.
struct Plan {
  std::size_t batch_size = 1;
  bool drop_last = false;
  bool shuffle = false;
  std::shared_ptr<stoker::Sampler> sampler;
  std::function<double(std::size_t)> expected_last;  // the checksum term of sample `last`
  std::function<bool(const stoker::Batch&)> check;   // real data: is this batch plausible
  std::string extra;                                 // more JSON fields: ", \"name\": value"
};

double mb(std::uint64_t bytes) { return static_cast<double>(bytes) / 1e6; }

const char* anonymous_name(stoker::detail::AnonymousCount a) {
  switch (a) {
    case stoker::detail::AnonymousCount::kResident:
      return "resident";
    case stoker::detail::AnonymousCount::kProportional:
      return "proportional";
    case stoker::detail::AnonymousCount::kTracked:
      break;
  }
  return "tracked";
}

// The JSON fields of the tree's memory over the run; `epoch_starts` says when each epoch began.
std::string memory_fields(const Args& a, const std::optional<stoker::detail::TreeMemoryReport>& r,
                          const std::vector<Clock::time_point>& epoch_starts) {
  if (!r) return ", \"peak_tree_mb\": null, \"ring_resident_mb\": null";
  const long epoch =
      static_cast<long>(std::upper_bound(epoch_starts.begin(), epoch_starts.end(), r->peak_at) -
                        epoch_starts.begin()) -
      1;
  const std::string epoch_text = epoch_starts.empty() ? "null" : std::to_string(epoch);
  if (r->peak.unmeasured_objects > 0) {
    std::fprintf(stderr,
                 "stoker-bench: the size of %zu shared-memory objects could not be read (following "
                 "/proc/<pid>/map_files needs CAP_SYS_ADMIN); peak_tree_mb counts %s; run as root "
                 "for their allocated size\n",
                 r->peak.unmeasured_objects,
                 r->peak.shared_from_pss ? "the pages of them that some process maps (Pss_Shmem)"
                                         : "none of them");
  }
  return fmt::format(
      ", \"peak_tree_mb\": {:.1f}, \"ring_resident_mb\": {:.1f}, \"ring_peak_mb\": {:.1f}, "
      "\"tree_anonymous_mb\": {:.1f}, \"tree_processes\": {}, \"peak_tree_at_s\": {:.3f}, "
      "\"peak_tree_epoch\": {}, \"memory_sampler\": {{\"anonymous\": \"{}\", "
      "\"interval_ms\": {}, \"passes\": {}, \"exact_passes\": {}, \"skipped\": {}, "
      "\"seconds\": {:.3f}, "
      "\"cpu_ms\": {:.2f}, \"cpu_share\": {}, \"unmeasured_objects\": {}, "
      "\"shared_from_pss\": {}}}",
      mb(r->peak.total_bytes()), mb(r->peak.ring_bytes), mb(r->ring_peak_bytes),
      mb(r->peak.anonymous_bytes), r->peak.processes, r->peak_after_seconds, epoch_text,
      anonymous_name(a.anonymous), a.memory_interval_ms, r->passes, r->exact_passes, r->skipped,
      r->seconds, r->cpu_seconds * 1e3, a.memory_cpu_share, r->peak.unmeasured_objects,
      r->peak.shared_from_pss);
}

// The sampler of `root`'s tree (0: this process) as the --memory-* flags say; none with
// --memory-interval-ms 0.
void start_sampler(const Args& a, pid_t root,
                   std::optional<stoker::detail::TreeMemorySampler>& sampler) {
  if (a.memory_interval_ms <= 0) return;
  stoker::detail::TreeMemorySampler::Options so;
  so.root = root;
  so.interval = std::chrono::milliseconds(a.memory_interval_ms);
  so.anonymous = a.anonymous;
  so.max_cpu_share = a.memory_cpu_share;
  sampler.emplace(so);
}

template <class D>
int run(const Args& a, D dataset, const Plan& plan) {
  // Started before the loader exists: its size probe, the fork of its workers and the warm-up
  // are all in the run whose peak is reported.
  std::optional<stoker::detail::TreeMemorySampler> sampler;
  start_sampler(a, 0, sampler);
  std::vector<Clock::time_point> epoch_starts;
  stoker::LoaderOptions opt;
  opt.batch_size = plan.batch_size;
  opt.num_workers = a.workers;
  opt.persistent_workers = a.persistent;
  opt.prefetch_factor = a.prefetch;
  opt.collect_stats = a.stats;
  opt.drop_last = plan.drop_last;
  opt.shuffle = plan.shuffle;
  opt.sampler = plan.sampler;
  opt.seed = 42;
  const std::size_t n = dataset.size();
  stoker::DataLoader loader(std::move(dataset), opt);

  std::vector<double> epoch_s;
  std::vector<double> first_batch_ms;
  double first_batch_cold_ms = 0;
  double checksum = 0;
  double expected = 0;
  bool checks_ok = true;
  std::size_t bytes_per_epoch = 0;
  std::size_t samples_per_epoch = 0;
  double cpu_start = 0;
  std::vector<std::pair<pid_t, double>> live_at_start;

  for (int e = 0; e < a.warmup + a.epochs; ++e) {
    const bool timed = e >= a.warmup;
    loader.set_epoch(static_cast<std::size_t>(e));
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
    epoch_starts.push_back(start);
    Clock::time_point first{};
    bool have_first = false;
    for (const stoker::Batch& batch : loader) {
      if (!have_first) {
        first = Clock::now();
        have_first = true;
      }
      for (const auto& [name, tensor] : batch) sum += last_element(tensor);
      if (plan.check && !plan.check(batch)) checks_ok = false;
      bytes += batch.nbytes();
      samples += batch.size();
      if (a.consumer_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(a.consumer_us));
      if (a.consumer_cpu_us > 0) {  // a training step on the CPU: spin
        const Clock::time_point until = Clock::now() + std::chrono::microseconds(a.consumer_cpu_us);
        while (Clock::now() < until) {
        }
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
    if (plan.expected_last) {
      const std::size_t batches = loader.size();
      for (std::size_t b = 0; b < batches; ++b) {
        expected += plan.expected_last(std::min((b + 1) * plan.batch_size, n) - 1);
      }
    }
  }
  const stoker::LoaderStats final_stats = loader.stats();
  // The last pass while the loader (its ring, persistent workers) still lives.
  std::optional<stoker::detail::TreeMemoryReport> memory;
  if (sampler) memory = sampler->stop();
  double cpu = cpu_seconds(RUSAGE_SELF) + cpu_seconds(RUSAGE_CHILDREN) - cpu_start;
  for (const pid_t pid : loader.worker_pids()) {
    double before = 0;
    for (const auto& [p, t] : live_at_start) before = p == pid ? t : before;
    cpu += process_cpu_seconds(pid) - before;
  }

  std::vector<double> sorted = epoch_s;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  std::vector<double> sorted_first = first_batch_ms;
  std::sort(sorted_first.begin(), sorted_first.end());
  const double total_samples = static_cast<double>(samples_per_epoch) * a.epochs;
  const bool ok = checks_ok && (!plan.expected_last || checksum == expected);
  fmt::print(
      "{{\"impl\": \"stoker\", \"variant\": \"{}\", \"workload\": \"{}\", \"workers\": {}, "
      "\"batch_size\": {}, \"prefetch_factor\": {}, \"samples_per_epoch\": {}, "
      "\"bytes_per_epoch\": {}, \"epoch_s\": [{:.6f}], \"first_batch_ms\": [{:.3f}], "
      "\"first_batch_median_ms\": {:.3f}, \"first_batch_cold_ms\": {:.3f}, "
      "\"samples_per_s\": {:.1f}, \"mb_per_s\": {:.1f}, \"cpu_us_per_sample\": {:.3f}, "
      "\"consumer_us\": {}, \"consumer_cpu_us\": {}, "
      "\"prefetch_depth\": {}, \"prefetch_depth_limit\": {}, \"core_use\": {:.3f}, "
      "\"checksum\": {:.1f}, \"checksum_ok\": {}{}{}, \"command\": \"{}\"}}\n",
      a.persistent ? "persistent" : "default", a.workload, a.workers, plan.batch_size,
      a.prefetch == stoker::kAdaptivePrefetch ? std::string("\"adaptive\"")
                                              : std::to_string(a.prefetch),
      samples_per_epoch, bytes_per_epoch, fmt::join(epoch_s, ", "), fmt::join(first_batch_ms, ", "),
      sorted_first[sorted_first.size() / 2], first_batch_cold_ms,
      static_cast<double>(samples_per_epoch) / median,
      static_cast<double>(bytes_per_epoch) / median / 1e6, cpu / total_samples * 1e6, a.consumer_us,
      a.consumer_cpu_us, final_stats.prefetch_depth, final_stats.prefetch_depth_limit,
      static_cast<double>(samples_per_epoch) / median * cpu / total_samples /
          static_cast<double>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))),
      checksum, ok ? "true" : "false", memory_fields(a, memory, epoch_starts), plan.extra,
      a.command);
  return ok ? 0 : 1;
}

// A synthetic workload: the checksum term of a batch is its last sample's value and label.
template <class D>
int run_synthetic(const Args& a, D dataset, std::size_t batch_size, bool drop_last) {
  if (a.samples != 0) dataset.n = a.samples;
  Plan plan;
  plan.batch_size = batch_size;
  plan.drop_last = drop_last;
  plan.expected_last = [](std::size_t last) {
    return D::last_value(last) + static_cast<double>(last % 10);
  };
  return run(a, std::move(dataset), plan);
}

// Shuffled; --samples S takes S random images per epoch.
void image_sampling(const Args& a, std::size_t n, Plan& plan) {
  plan.batch_size = 64;
  if (a.samples != 0) {
    stoker::RandomSampler::Options so;
    so.num_samples = a.samples;
    so.seed = 42;
    plan.sampler = std::make_shared<stoker::RandomSampler>(n, so);
  } else {
    plan.shuffle = true;
  }
}

// The real image pipelines: val (decode, resize the shorter side to 256, center-crop 224,
// random horizontal flip) or train (RandomResizedCrop(224), random flip); shuffled, batch 64
// (torchvision's ImageFolder with the same transforms is what bench/compare sets it against).
int run_folder(const Args& a) {
  namespace vision = stoker::vision;
  vision::Pipeline pipeline;
  if (a.pipeline == "train") {
    pipeline.then(vision::RandomResizedCrop(224)).then(vision::RandomHorizontalFlip());
  } else {
    pipeline.then(vision::Resize(256))
        .then(vision::CenterCrop(224))
        .then(vision::RandomHorizontalFlip());
  }
  pipeline.mode(a.mode == "fast" ? vision::Mode::kFast : vision::Mode::kExact);
  stoker::ImageFolderDataset dataset(a.data, pipeline);
  const auto classes = static_cast<std::int64_t>(dataset.classes().size());
  Plan plan;
  image_sampling(a, dataset.size(), plan);
  plan.extra = fmt::format(", \"pipeline\": \"{}\", \"mode\": \"{}\"", a.pipeline, a.mode);
  plan.check = [classes](const stoker::Batch& b) {
    const stoker::Tensor& image = b["image"];
    const stoker::Tensor& label = b["label"];
    const std::int64_t* y = label.data<std::int64_t>();
    for (std::size_t i = 0; i < b.size(); ++i) {
      if (y[i] < 0 || y[i] >= classes) return false;
    }
    return image.dim() == 4 && image.size(1) == 3 && image.size(2) == 224 && image.size(3) == 224;
  };
  return run(a, std::move(dataset), plan);
}

// Decoding alone: the folder's files read and decoded at full size (vision::decode, the same
// libjpeg-turbo settings as the pipelines), giving only their size and label: the floor under
// any pipeline over these files.
struct DecodeOnly {
  std::vector<std::pair<std::string, std::int64_t>> files;
  std::size_t size() const { return files.size(); }
  stoker::Sample get(std::size_t i) const {
    thread_local std::vector<std::uint8_t> bytes;
    thread_local stoker::vision::Image image;
    namespace posix = stoker::detail::posix;
    posix::Fd fd(posix::open_read(files[i].first.c_str()));
    if (!fd.valid()) {
      throw stoker::Error(
          posix::errno_message("stoker-bench: cannot open " + files[i].first, errno));
    }
    bytes.resize(1 << 16);
    std::size_t used = 0;
    for (;;) {
      if (bytes.size() < used + 65536) bytes.resize(used + 65536);
      const ssize_t n = posix::read_some(fd.get(), bytes.data() + used, bytes.size() - used);
      if (n < 0) {
        throw stoker::Error(
            posix::errno_message("stoker-bench: cannot read " + files[i].first, errno));
      }
      if (n == 0) break;
      used += static_cast<std::size_t>(n);
    }
    stoker::vision::decode_into(std::span<const std::uint8_t>(bytes.data(), used), {}, image,
                                files[i].first);
    stoker::Sample s;
    s.set("size", stoker::Tensor::from<std::int64_t>({image.height, image.width}));
    s.set("label", stoker::Tensor::scalar<std::int64_t>(files[i].second));
    return s;
  }
};

int run_decode(const Args& a) {
  const stoker::ImageFolderDataset listing(a.data);
  DecodeOnly dataset{listing.files()};
  Plan plan;
  image_sampling(a, dataset.size(), plan);
  plan.extra = ", \"pipeline\": \"decode\", \"mode\": \"full size\"";
  plan.check = [](const stoker::Batch& b) { return b["size"].data<std::int64_t>()[0] > 0; };
  return run(a, std::move(dataset), plan);
}

// The language-model pipeline: S random 1,024-token windows per epoch (int64 input and target,
// what an embedding layer takes), batch 32.
int run_tokens(const Args& a) {
  stoker::TokenOptions o;
  o.context = 1024;
  o.dtype = stoker::DType::kInt64;
  o.format = stoker::TokenDataset::Format::kRaw;
  stoker::TokenDataset dataset({a.data}, o);
  stoker::RandomSampler::Options so;
  so.num_samples = a.samples != 0 ? a.samples : 8192;
  so.seed = 42;
  Plan plan;
  plan.batch_size = 32;
  plan.sampler = std::make_shared<stoker::RandomSampler>(dataset.size(), so);
  // The target is the input shifted by one token.
  plan.check = [](const stoker::Batch& b) {
    const stoker::Tensor& x = b["input"];
    const stoker::Tensor& y = b["target"];
    const std::size_t t = static_cast<std::size_t>(x.size(1));
    const std::int64_t* xl = x.data<std::int64_t>() + (b.size() - 1) * t;
    const std::int64_t* yl = y.data<std::int64_t>() + (b.size() - 1) * t;
    return std::equal(xl + 1, xl + t, yl);
  };
  return run(a, std::move(dataset), plan);
}

}  // namespace

// --measure-command: runs the command with its standard output through a pipe and samples its
// process tree from the moment it has exec()ed until it exits; then prints its output, the
// memory fields added to each line that is a JSON object. Returns the command's exit status.
int run_measured(const Args& a) {
  namespace posix = stoker::detail::posix;
  int out[2];
  int exec_check[2];  // closed by a successful exec, or given its errno
  if (posix::make_pipe(out) != 0 || posix::make_pipe(exec_check) != 0) {
    std::perror("stoker-bench: pipe");
    return 1;
  }
  std::vector<char*> argv;
  for (const std::string& arg : a.measure) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t child = posix::fork_process();
  if (child < 0) {
    std::perror("stoker-bench: fork");
    return 1;
  }
  if (child == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::execvp(argv[0], argv.data());
    const int err = errno;
    (void)posix::write_all(exec_check[1], &err, sizeof err);
    ::_exit(127);
  }
  posix::close_fd(out[1]);
  posix::close_fd(exec_check[1]);
  int err = 0;
  const bool exec_failed = posix::read_full(exec_check[0], &err, sizeof err) == sizeof err;
  posix::close_fd(exec_check[0]);
  std::optional<stoker::detail::TreeMemorySampler> sampler;
  if (!exec_failed) start_sampler(a, child, sampler);
  std::string output;
  char buffer[65536];
  for (ssize_t n; (n = posix::read_full(out[0], buffer, sizeof buffer)) > 0;) {
    output.append(buffer, static_cast<std::size_t>(n));
  }
  posix::close_fd(out[0]);
  int status = 0;
  (void)posix::wait_pid(child, &status, 0);
  if (exec_failed) {
    std::fprintf(stderr, "stoker-bench: cannot run %s: %s\n", argv[0], std::strerror(err));
    return 127;
  }
  std::optional<stoker::detail::TreeMemoryReport> memory;
  if (sampler) memory = sampler->stop();
  const std::string fields = memory_fields(a, memory, {});
  std::size_t at = 0;
  while (at < output.size()) {
    std::size_t end = output.find('\n', at);
    if (end == std::string::npos) end = output.size();
    std::string line = output.substr(at, end - at);
    at = end + 1;
    const std::size_t close = line.find_last_not_of(" \t\r");
    if (!line.empty() && line[0] == '{' && close != std::string::npos && line[close] == '}') {
      line.insert(close, fields);
    }
    std::printf("%s\n", line.c_str());
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.memcpy_only) return run_memcpy(a);
  if (!a.measure.empty()) return run_measured(a);
  try {
    if (a.workload == "tiny") return run_synthetic(a, stoker::bench::TinyDataset{}, 256, true);
    if (a.workload == "image") return run_synthetic(a, stoker::bench::ImageDataset{}, 64, false);
    if (a.workload == "cpu") {
      stoker::bench::CpuDataset cpu;
      cpu.spin_ns = 1000L * a.sample_us;
      return run_synthetic(a, cpu, 32, false);
    }
    if (a.workload == "folder") return run_folder(a);
    if (a.workload == "decode") return run_decode(a);
    return run_tokens(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoker-bench: %s\n", e.what());
    return 1;
  }
}
