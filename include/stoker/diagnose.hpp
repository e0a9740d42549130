// diagnose(): names what limits a DataLoader, from its LoaderStats and the machine's
// SystemInfo, and says what to change — the reading of htop, iostat, free and nvtop that people
// otherwise do by hand. One verdict (the bottleneck to act on first), a one-line summary with
// the measured figures, the advice, and every symptom found as a line of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/memory.hpp"
#include "stoker/stats.hpp"

namespace stoker {

// Checked in this order; the first that holds is the verdict (memory first: a loader that runs
// out of memory is killed, whatever else limits it).
enum class Verdict : std::uint8_t {
  kUnknown,         // nothing measured yet (no batch delivered, or no time elapsed)
  kMemoryPressure,  // memory near the cgroup's limit, or the machine's MemAvailable nearly gone
  kComputeBound,    // the consumer hardly waits: input is not the bottleneck
  kNetworkBound,    // the consumer waits and the readers wait for remote shards to download
  kStorageBound,    // the consumer waits and the CPUs sit in iowait: the disk is too slow
  kCpuSaturated,    // the consumer waits and every core is busy: more workers cannot help
  kGpuStarved,      // the consumer waits with cores to spare, and the GPU idles for it
  kDataBound,       // the consumer waits with cores to spare: more workers would help
};

// "unknown", "memory-pressure", "compute-bound", "network-bound", "storage-bound",
// "cpu-saturated", "gpu-starved", "data-bound".
std::string_view to_string(Verdict verdict) noexcept;

// Where each symptom starts. The defaults are the rules of thumb of docs/tuning.md.
struct DiagnoseThresholds {
  double wait_fraction = 0.05;     // the consumer waits more than this share: input-bound
  double cpu_busy_fraction = 0.9;  // the machine's CPUs busier than this: saturated
  double iowait_fraction = 0.2;    // CPU time in iowait above this: storage-bound
  // Remote shards: readers blocked on downloads for more than this share of their loading time
  // (the workers' get() time, or the consumer's wait with num_workers=0): network-bound.
  double network_fraction = 0.25;
  double memory_fraction = 0.9;    // used / limit above this: memory pressure
  double gpu_busy_fraction = 0.8;  // a GPU busy less than this while the consumer waits: starved
  // Workers blocked on full slots more than this share of the time while the consumer waits:
  // the prefetch is too shallow.
  double blocked_fraction = 0.05;
};

struct Diagnosis {
  Verdict verdict = Verdict::kUnknown;
  // One line, the verdict first, with the figures that decided it, e.g. "data-bound: the
  // consumer waited 41% of the time; workers are 98% busy and 1 of 8 cores is idle →
  // num_workers=7".
  std::string summary;
  // What to change, in a sentence or two.
  std::string advice;
  // Every figure the verdict was read from, one line each, in a fixed order (throughput, the
  // consumer's wait, workers, CPUs, ring, memory, GPU, recovery), for a report.
  std::vector<std::string> findings;
  // The settings the advice names, when it names them.
  std::optional<std::size_t> suggested_num_workers;
  std::optional<std::size_t> suggested_batch_size;
};

// Main process; pure arithmetic on its arguments, never throws (beyond std::bad_alloc). Fields
// that are unknown (zero counters, empty optionals, unknown probes) rule out only the verdicts
// that need them.
Diagnosis diagnose(const LoaderStats& stats, const SystemInfo& system,
                   const DiagnoseThresholds& thresholds = {});
// The same against probe_system() of this machine (small /proc and /sys reads, and the CPU
// topology).
Diagnosis diagnose(const LoaderStats& stats);

// The summary, then "advice: ..." and the findings, indented (also fmt::format("{}", d) with
// <stoker/fmt.hpp>).
std::string to_string(const Diagnosis& diagnosis);

}  // namespace stoker
