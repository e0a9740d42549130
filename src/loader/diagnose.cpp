#include "stoker/diagnose.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "data/format.hpp"

namespace stoker {

namespace {

std::string percent(double fraction) { return fmt::format("{:.0f}%", fraction * 100.0); }

// A count of cores as people say it: "1", "3", or "0.4" below one.
std::string cores_text(double cores) {
  if (cores >= 0.95) return fmt::format("{:.0f}", std::round(cores));
  return fmt::format("{:.1f}", std::max(0.0, cores));
}

std::string seconds_text(double s) {
  return detail::format_duration(std::chrono::nanoseconds(static_cast<std::int64_t>(s * 1e9)));
}

// The CPUs this process tree may use: the loader's count, else the probe's, capped by a
// cgroup CPU quota. 0 when nothing is known.
double usable_cores(const LoaderStats& stats, const SystemInfo& system) {
  double cores = static_cast<double>(stats.logical_cpus);
  if (cores <= 0 && system.logical_cpus.value)
    cores = static_cast<double>(*system.logical_cpus.value);
  if (system.cpu_quota.value && *system.cpu_quota.value > 0) {
    cores = cores > 0 ? std::min(cores, *system.cpu_quota.value) : *system.cpu_quota.value;
  }
  return cores;
}

// Memory in use against the tighter of the limits known.
struct MemoryUse {
  double fraction = 0;
  std::uint64_t used = 0;
  std::uint64_t limit = 0;
  std::string against;  // "the cgroup limit", "the machine's memory"
};

std::optional<MemoryUse> memory_use(const SystemInfo& system) {
  if (system.cgroup_limit.value && system.cgroup_usage.value && *system.cgroup_limit.value > 0) {
    const std::uint64_t limit = *system.cgroup_limit.value;
    const std::uint64_t used = *system.cgroup_usage.value;
    return MemoryUse{static_cast<double>(used) / static_cast<double>(limit), used, limit,
                     "the cgroup limit"};
  }
  if (system.mem_total.value && system.mem_available.value && *system.mem_total.value > 0) {
    const std::uint64_t total = *system.mem_total.value;
    const std::uint64_t used = total - std::min(total, *system.mem_available.value);
    return MemoryUse{static_cast<double>(used) / static_cast<double>(total), used, total,
                     "the machine's memory"};
  }
  return std::nullopt;
}

struct WorkerFigures {
  std::size_t count = 0;
  bool busy_known = false;  // some worker reported busy time
  double mean_busy = 0;     // 0 .. 1
  double busy_cores = 0;    // sum of busy fractions: cores' worth of loading
  double get_seconds = 0;
  double collate_seconds = 0;
  double write_seconds = 0;
  double blocked = 0;  // mean share of the epoch a worker had nothing to load, slots all full
};

WorkerFigures worker_figures(const LoaderStats& stats) {
  WorkerFigures w;
  w.count = stats.workers.size();
  for (const WorkerStats& ws : stats.workers) {
    w.busy_cores += std::clamp(ws.busy_fraction, 0.0, 1.0);
    w.get_seconds += ws.get_seconds;
    w.collate_seconds += ws.collate_seconds;
    w.write_seconds += ws.write_seconds;
  }
  w.busy_known = w.busy_cores > 0;
  if (w.count > 0) w.mean_busy = w.busy_cores / static_cast<double>(w.count);
  if (w.count > 0 && stats.epoch_seconds > 0) {
    double blocked = 0;
    for (const WorkerStats& ws : stats.workers) blocked += ws.blocked_seconds;
    w.blocked = std::clamp(blocked / static_cast<double>(w.count) / stats.epoch_seconds, 0.0, 1.0);
  }
  return w;
}

void add_findings(const LoaderStats& stats, const SystemInfo& system, const WorkerFigures& w,
                  double cores, const std::optional<MemoryUse>& memory, Diagnosis& d) {
  auto& f = d.findings;
  if (stats.batches > 0 && stats.epoch_seconds > 0) {
    f.push_back(
        fmt::format("throughput: {} samples/s, {}/s over {} ({} batches, {} samples)",
                    detail::format_count(stats.samples_per_second()),
                    detail::format_bytes(static_cast<std::size_t>(stats.bytes_per_second())),
                    seconds_text(stats.epoch_seconds), stats.batches, stats.samples));
    f.push_back(fmt::format("consumer waited {} of the time ({} per batch)",
                            percent(stats.wait_fraction()),
                            seconds_text(stats.wait_per_batch_seconds())));
  }
  if (w.count == 0) {
    f.push_back("workers: none (num_workers=0): batches load in the consumer's thread");
  } else if (w.busy_known) {
    const double stages = w.get_seconds + w.collate_seconds + w.write_seconds;
    std::string split;
    if (stages > 0) {
      split = fmt::format(" (get {}, collate {}, write {})", percent(w.get_seconds / stages),
                          percent(w.collate_seconds / stages), percent(w.write_seconds / stages));
    }
    f.push_back(
        fmt::format("workers: {}, {} busy on average{}", w.count, percent(w.mean_busy), split));
  } else {
    f.push_back(fmt::format("workers: {} (busy time not measured)", w.count));
  }
  if (stats.cpu_busy_fraction || stats.iowait_fraction) {
    f.push_back(fmt::format(
        "CPUs: {} busy, {} in iowait ({} cores usable)",
        stats.cpu_busy_fraction ? percent(*stats.cpu_busy_fraction) : std::string("unknown"),
        stats.iowait_fraction ? percent(*stats.iowait_fraction) : std::string("unknown"),
        cores > 0 ? cores_text(cores) : std::string("unknown")));
  }
  if (stats.ring_slots > 0) {
    f.push_back(fmt::format("ring: {} slots, {} full on average when the consumer asked",
                            stats.ring_slots, percent(stats.ring_occupancy)));
  }
  if (stats.prefetch_depth > 0) {
    f.push_back(fmt::format(
        "prefetch depth: {} batches per worker ({}); workers blocked on full slots {} of the "
        "time",
        stats.prefetch_depth,
        stats.prefetch_adaptive ? fmt::format("adaptive, at most {} within the memory limit",
                                              stats.prefetch_depth_limit)
                                : std::string("prefetch_factor, fixed"),
        percent(w.blocked)));
  }
  if (memory) {
    f.push_back(fmt::format("memory: {} of {} in use ({} of {})", percent(memory->fraction),
                            memory->against, detail::format_bytes(memory->used),
                            detail::format_bytes(memory->limit)));
  }
  if (stats.tree_pss_bytes() > 0) {
    f.push_back(fmt::format(
        "loader processes: {} PSS (main {}, ring {})", detail::format_bytes(stats.tree_pss_bytes()),
        detail::format_bytes(stats.main_pss_bytes), detail::format_bytes(stats.ring_bytes)));
  }
  if (system.swap_used.value && *system.swap_used.value > 0) {
    f.push_back(fmt::format("swap in use: {}", detail::format_bytes(*system.swap_used.value)));
  }
  if (stats.gpu) {
    f.push_back(fmt::format("GPU {}: busy {}, memory {} of {}", stats.gpu->device,
                            percent(stats.gpu->utilization),
                            detail::format_bytes(stats.gpu->memory_used),
                            detail::format_bytes(stats.gpu->memory_total)));
  }
  if (stats.remote) {
    f.push_back(fmt::format(
        "remote shards: {} fetched in {} requests ({} retries), {} shards from the cache, {} "
        "downloaded; readers waited {} for downloads",
        detail::format_bytes(stats.remote_bytes_fetched), stats.remote_requests,
        stats.remote_retries, stats.remote_cache_hits, stats.remote_cache_misses,
        seconds_text(stats.remote_wait_seconds)));
  }
  if (stats.respawns > 0) f.push_back(fmt::format("workers respawned: {}", stats.respawns));
  if (stats.skipped_samples > 0) {
    f.push_back(fmt::format("samples skipped: {}", stats.skipped_samples));
  }
}

}  // namespace

std::string_view to_string(Verdict verdict) noexcept {
  switch (verdict) {
    case Verdict::kUnknown:
      return "unknown";
    case Verdict::kMemoryPressure:
      return "memory-pressure";
    case Verdict::kComputeBound:
      return "compute-bound";
    case Verdict::kNetworkBound:
      return "network-bound";
    case Verdict::kStorageBound:
      return "storage-bound";
    case Verdict::kCpuSaturated:
      return "cpu-saturated";
    case Verdict::kGpuStarved:
      return "gpu-starved";
    case Verdict::kDataBound:
      return "data-bound";
  }
  return "unknown";
}

Diagnosis diagnose(const LoaderStats& stats, const SystemInfo& system,
                   const DiagnoseThresholds& thresholds) {
  Diagnosis d;
  const WorkerFigures w = worker_figures(stats);
  const double cores = usable_cores(stats, system);
  const std::optional<MemoryUse> memory = memory_use(system);
  const std::size_t batch_size =
      stats.batches > 0 ? static_cast<std::size_t>(std::llround(static_cast<double>(stats.samples) /
                                                                static_cast<double>(stats.batches)))
                        : 0;
  const double wait = stats.wait_fraction();
  add_findings(stats, system, w, cores, memory, d);

  // 1. Memory first: a loader near its limit is one batch from the OOM killer.
  if (memory && memory->fraction >= thresholds.memory_fraction) {
    d.verdict = Verdict::kMemoryPressure;
    std::string fix;
    if (w.count > 1) {
      d.suggested_num_workers = w.count - 1;
      fix = fmt::format("num_workers={}", w.count - 1);
    }
    if (batch_size > 1) {
      d.suggested_batch_size = batch_size / 2;
      fix += fmt::format("{}batch_size={}", fix.empty() ? "" : " or ", batch_size / 2);
    }
    d.summary =
        fmt::format("memory: {} of {} ({} of {})", percent(memory->fraction), memory->against,
                    detail::format_bytes(memory->used), detail::format_bytes(memory->limit));
    if (!fix.empty()) d.summary += " → " + fix;
    d.advice = fmt::format(
        "Peak memory grows with (num_workers + 1) x batch_size x bytes per sample: use fewer "
        "workers or smaller batches{}, or raise the limit; past it the OOM killer ends a "
        "worker (WorkerCrashed) or the whole run.",
        fix.empty() ? std::string() : " (" + fix + ")");
    return d;
  }

  // 2. Nothing to judge yet.
  if (stats.batches == 0 || stats.epoch_seconds <= 0) {
    d.summary = "unknown: no batch delivered yet, so nothing to judge";
    d.advice = "Call diagnose() after some batches of an epoch (a few seconds' worth).";
    return d;
  }

  // 3. The consumer hardly waits: the training step sets the pace.
  if (wait < thresholds.wait_fraction) {
    d.verdict = Verdict::kComputeBound;
    d.summary = fmt::format(
        "compute-bound: input is not the bottleneck (the consumer waited {} of the time, {} "
        "per batch)",
        percent(wait), seconds_text(stats.wait_per_batch_seconds()));
    d.advice = "The loader keeps up; speed up the training step itself.";
    if (w.busy_known && w.count > 1 && w.mean_busy < 0.5) {
      const auto fewer = static_cast<std::size_t>(std::max(1.0, std::ceil(w.busy_cores * 1.25)));
      if (fewer < w.count) {
        d.suggested_num_workers = fewer;
        d.summary += fmt::format("; workers are only {} busy → num_workers={} would do",
                                 percent(w.mean_busy), fewer);
        d.advice += fmt::format(
            " The workers are mostly idle: num_workers={} would still keep up and frees their "
            "memory and cores.",
            fewer);
      }
    }
    return d;
  }

  // 4. Waiting on downloads of remote shards: more workers do not make the link faster. The
  // readers' wait happens inside get() / next(): compare it with the workers' loading time (the
  // consumer's own wait when it loads, num_workers=0).
  const double loading = w.count > 0 ? w.get_seconds : stats.wait_seconds;
  if (stats.remote && loading > 0 &&
      stats.remote_wait_seconds >= thresholds.network_fraction * loading) {
    d.verdict = Verdict::kNetworkBound;
    const double share = std::min(1.0, stats.remote_wait_seconds / loading);
    const double rate =
        stats.remote_download_seconds > 0
            ? static_cast<double>(stats.remote_bytes_fetched) / stats.remote_download_seconds
            : 0;
    d.summary = fmt::format(
        "network-bound: the consumer waited {} of the time, and the readers spent {} of their "
        "loading time waiting for remote shards ({} fetched{})",
        percent(wait), percent(share), detail::format_bytes(stats.remote_bytes_fetched),
        rate > 0 ? fmt::format(", {}/s per download",
                               detail::format_bytes(static_cast<std::size_t>(rate)))
                 : std::string());
    d.advice =
        "The workers wait for shards to arrive, not for the CPU, so more workers would not help: "
        "raise RemoteOptions::read_ahead_shards (or read_ahead_bytes) so the next shards "
        "download while one is read, and parts_in_flight so each downloads faster; check that "
        "cache_limit leaves room for the read-ahead" +
        std::string(
            stats.remote_retries > 0
                ? fmt::format(", and why {} requests had to be retried", stats.remote_retries)
                : std::string()) +
        ".";
    return d;
  }

  // 5. Waiting on the disk: more workers only deepen the disk's queue.
  if (stats.iowait_fraction && *stats.iowait_fraction >= thresholds.iowait_fraction) {
    d.verdict = Verdict::kStorageBound;
    d.summary = fmt::format("storage-bound: iowait {} while the consumer waited {} of the time",
                            percent(*stats.iowait_fraction), percent(wait));
    std::string where;
    if (system.rotational.value && *system.rotational.value) {
      where = " The data is on a rotational disk: keep num_workers at 4 or fewer there.";
    }
    if (system.network_filesystem.value && *system.network_filesystem.value) {
      where += " The data is on a network filesystem: copy it to a local disk first.";
    }
    d.advice =
        "The workers wait for the disk, not the CPU: copy the data to a faster local disk or "
        "into memory, keep decoded samples in a CachedDataset, or pack small files into fewer "
        "large ones (.npy, token shards)." +
        where;
    return d;
  }

  // 6. Every core busy: more workers only add context switches.
  double busy = 0;
  bool busy_estimated = false;
  if (stats.cpu_busy_fraction) {
    busy = *stats.cpu_busy_fraction;
  } else if (cores > 0 && (w.busy_known || w.count == 0)) {
    // Without /proc/stat figures: the workers' busy time, plus the consumer when it is not
    // waiting (with num_workers=0 it loads too, so it is busy throughout).
    const double main_busy = w.count == 0 ? 1.0 : 1.0 - wait;
    busy = std::min(1.0, (w.busy_cores + main_busy) / cores);
    busy_estimated = true;
  }
  const double idle_cores = cores * (1.0 - busy);
  if ((stats.cpu_busy_fraction || busy_estimated) && busy >= thresholds.cpu_busy_fraction) {
    d.verdict = Verdict::kCpuSaturated;
    d.summary = fmt::format(
        "cpu-saturated: the consumer waited {} of the time and the CPUs are "
        "{}{} busy ({} cores)",
        percent(wait), busy_estimated ? "about " : "", percent(busy), cores_text(cores));
    // More workers than cores only take turns on them: one per core loses nothing.
    const auto fit = static_cast<std::size_t>(std::max(1.0, std::floor(cores)));
    if (w.count > fit) {
      d.suggested_num_workers = fit;
      d.summary += fmt::format(" → num_workers={}", fit);
      d.advice = fmt::format(
          "{} workers on {} cores take turns on them (context switches, caches lost): "
          "num_workers={} loads as fast with less memory; fewer still leaves a core to the "
          "training loop when it needs one. ",
          w.count, cores_text(cores), fit);
    }
    d.advice +=
        "More workers cannot help: make each sample cheaper to produce (decode at a smaller "
        "scale, move augmentation to the GPU, keep decoded samples in a CachedDataset), or "
        "find what else is using the CPUs.";
    return d;
  }

  // 7. Cores to spare while the consumer waits: more workers.
  std::string evidence;
  std::optional<std::size_t> more;
  const bool cpu_known = stats.cpu_busy_fraction.has_value() || busy_estimated;
  const std::string idle_text =
      !cpu_known  ? std::string("the CPUs' load is unknown")
      : cores > 0 ? fmt::format("{}{} of {} cores {} idle", busy_estimated ? "about " : "",
                                cores_text(idle_cores), cores_text(cores),
                                idle_cores >= 0.95 && idle_cores < 1.5 ? "is" : "are")
                  : std::string("the number of cores is unknown");
  const auto extra =
      cpu_known ? static_cast<std::size_t>(std::max(1.0, std::floor(idle_cores + 0.05))) : 1;
  if (w.count == 0) {
    evidence = fmt::format(
        "the consumer waited {} of the time loading in its own thread "
        "(num_workers=0) and {}",
        percent(wait), idle_text);
    more = extra;
    d.advice = fmt::format(
        "Load in worker processes: num_workers={} overlaps loading with the training step.", extra);
  } else if (w.blocked >= thresholds.blocked_fraction && stats.prefetch_depth > 0) {
    // The bubbles a deeper prefetch fills: workers idle with their slots full while the
    // consumer waits (time-sliced with them, it had not yet released one).
    evidence =
        fmt::format("workers blocked on full slots {} of the time while the consumer waited {}; {}",
                    percent(w.blocked), percent(wait), idle_text);
    if (!stats.prefetch_adaptive) {
      d.advice = fmt::format(
          "Each worker may run only {} batches ahead (prefetch_factor={}): raise "
          "prefetch_factor, or leave it at its default, kAdaptivePrefetch, which deepens as "
          "needed within the memory limit.",
          stats.prefetch_depth, stats.prefetch_depth);
    } else if (stats.prefetch_at_limit || stats.prefetch_depth >= stats.prefetch_depth_limit) {
      d.advice = fmt::format(
          "The adaptive prefetch depth reached its memory limit ({} batches per worker): give "
          "the loader more memory (LoaderOptions::memory_limit or memory_fraction) or lower "
          "batch_size so it can go deeper.",
          stats.prefetch_depth_limit);
    } else {
      d.advice = fmt::format(
          "The adaptive prefetch depth is {} of at most {} and still rising; if it stays, raise "
          "prefetch_factor past it.",
          stats.prefetch_depth, stats.prefetch_depth_limit);
    }
  } else if (w.busy_known && w.mean_busy < 0.8) {
    evidence = fmt::format("the consumer waited {} of the time but workers are only {} busy; {}",
                           percent(wait), percent(w.mean_busy), idle_text);
    d.advice =
        "The workers have time to spare, so batches are late in the hand-off, not in loading: "
        "raise prefetch_factor so more batches are ready ahead, and with in_order=true one slow "
        "worker holds back the rest (in_order=false delivers whichever is ready).";
  } else {
    more = w.count + extra;
    evidence =
        w.busy_known
            ? fmt::format("the consumer waited {} of the time; workers are {} busy and {}",
                          percent(wait), percent(w.mean_busy), idle_text)
            : fmt::format("the consumer waited {} of the time and {}", percent(wait), idle_text);
    d.advice = fmt::format(
        "Loading is slower than the training step and cores are free: num_workers={} loads "
        "more batches at once (then measure again: past the physical cores it stops helping).",
        *more);
  }
  if (more) {
    d.suggested_num_workers = more;
    evidence += fmt::format(" → num_workers={}", *more);
  }
  if (stats.gpu && stats.gpu->utilization < thresholds.gpu_busy_fraction) {
    d.verdict = Verdict::kGpuStarved;
    d.summary = fmt::format("gpu-starved: GPU {} busy {} while the consumer waits for data; {}",
                            stats.gpu->device, percent(stats.gpu->utilization), evidence);
    return d;
  }
  d.verdict = Verdict::kDataBound;
  d.summary = "data-bound: " + evidence;
  return d;
}

Diagnosis diagnose(const LoaderStats& stats) { return diagnose(stats, probe_system()); }

std::string to_string(const Diagnosis& d) {
  std::string out = d.summary;
  if (!d.advice.empty()) out += "\n  advice: " + d.advice;
  for (const std::string& line : d.findings) out += "\n  - " + line;
  return out;
}

}  // namespace stoker
