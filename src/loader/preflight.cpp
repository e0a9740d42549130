#include "loader/preflight.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "data/format.hpp"
#include "datasets/launch.hpp"
#include "ipc/worker_process.hpp"
#include "os/log.hpp"
#include "os/system_probe.hpp"
#include "stoker/pinned_allocator.hpp"

namespace stoker::detail {
namespace {

// How long the sample-size probe may load its few samples before it is killed.
constexpr std::chrono::seconds kProbeTimeout{10};

}  // namespace

Preflight::Preflight(const LoaderOptions& options, bool iterable, DatasetProbe probe)
    : options_(options), iterable_(iterable), probe_(std::move(probe)) {
  if (options_.num_workers != kAuto) {
    resolved_ =
        resolve_options(options_, static_cast<std::size_t>(options_.num_workers), iterable_);
  }
}

// kProbeTimeout, or half of LoaderOptions::timeout when that is shorter, so a get() that hangs
// still ends in LoaderTimeout about `timeout` after begin() (the probe's half, then the
// worker's wait), not seconds later.
std::chrono::milliseconds Preflight::probe_timeout() const {
  using std::chrono::milliseconds;
  const milliseconds cap = kProbeTimeout;
  if (options_.timeout.count() <= 0) return cap;
  return std::clamp(std::chrono::duration_cast<milliseconds>(options_.timeout) / 2, milliseconds{1},
                    cap);
}

std::optional<std::size_t> Preflight::sample_bytes() {
  if (options_.sample_bytes > 0) return options_.sample_bytes;
  if (!measured_sample_bytes_ && probe_.sample_bytes && !probe_failed_) {
    // In a child process: get() may keep state, count calls or expect a worker around it.
    const std::size_t workers = resolved_ ? resolved_->num_workers : 0;
    const ProbeResult probe = run_probe_in_child(probe_.sample_bytes, workers, probe_timeout());
    measured_sample_bytes_ = probe.largest;
    measured_worker_base_ = probe.private_bytes;
    measured_worker_startup_ = probe.startup_private_bytes;
    probe_failed_ = !probe.largest;
    try {
      if (!probe.largest) {
        logger().warn(
            "stoker: could not measure the bytes per sample (the first get() threw, crashed "
            "or took over {} ms in a probe process), so the loader's memory is not checked; "
            "give LoaderOptions::sample_bytes to check it",
            probe_timeout().count());
      } else if (!probe.complete) {
        logger().warn(
            "stoker: measured only some of the probe samples ({} bytes the largest; a later "
            "get() threw, crashed or took over {} ms in total); give "
            "LoaderOptions::sample_bytes if samples can be larger",
            *probe.largest, probe_timeout().count());
      }
    } catch (...) {
    }
  }
  return measured_sample_bytes_;
}

const ResolvedOptions& Preflight::resolve() {
  if (resolved_) return *resolved_;
  // kAuto: the recommendation for one worker's memory on this machine.
  const std::optional<std::size_t> bytes = sample_bytes();
  const std::size_t depth = depth_range(options_).min;
  const MemoryEstimate one = estimate(1, options_.batch_size, bytes.value_or(0), depth);
  const WorkerRecommendation r =
      recommend_num_workers(probe_system(), one.worker_private_bytes + depth * one.slot_bytes,
                            options_.memory_fraction, detect_launch_quietly().local_world_size);
  resolved_ = resolve_options(options_, r.num_workers, iterable_);
  try {
    logger().info("stoker: num_workers = kAuto chose {}: {}", r.num_workers, r.reason);
  } catch (...) {
  }
  return *resolved_;
}

std::size_t Preflight::depth_limit() const noexcept {
  std::size_t limit = depth_limit_;
  if (limit == 0) {
    const DepthRange range = depth_range(options_);
    limit = !range.adaptive
                ? range.max
                : adaptive_ceiling(options_.sample_bytes > 0 ? std::optional(options_.sample_bytes)
                                                             : measured_sample_bytes_);
  }
  return ring_depth_ > 0 ? std::min(limit, ring_depth_) : limit;
}

std::size_t Preflight::adaptive_ceiling(std::optional<std::size_t> bytes) const noexcept {
  if (!bytes || *bytes == 0) return kAdaptivePrefetchFloor;
  const std::size_t batches =
      kAdaptivePrefetchBytes / *bytes / std::max<std::size_t>(options_.batch_size, 1);
  return std::clamp(batches, kMinAdaptivePrefetch, kMaxAdaptivePrefetch);
}

MemoryEstimate Preflight::estimate(std::size_t workers, std::size_t batch, std::size_t bytes,
                                   std::size_t depth) const {
  EstimateInputs in;
  in.num_workers = workers;
  in.prefetch_factor = depth > 0 ? depth : depth_limit();
  in.batch_size = batch;
  in.bytes_per_sample = bytes;
  in.streaming = !options_.collate && !skips_samples(options_) && !iterable_;
  in.cache_bytes = probe_.cache_bytes;
  in.download_bytes_per_process = probe_.download_bytes;
  in.worker_base_bytes = measured_worker_base_;
  in.worker_startup_bytes = measured_worker_startup_;
  in.recycling = recycles(options_, workers);
  in.dataset_size = probe_.dataset_size ? probe_.dataset_size() : 0;
  in.persistent_workers = options_.persistent_workers;
  in.sampler = options_.sampler != nullptr;
  in.batch_sampler = options_.batch_sampler != nullptr;
  if (pinning_mode(options_) == Pinning::kCopy && bytes > 0) {
    // The staging blocks: the batch the consumer holds and the next one being copied, each
    // its samples, their indices and up to 64 bytes of alignment per field.
    constexpr std::size_t kFieldAlignmentSlack = 64 * 16;  // 16 fields
    in.pinned_bytes = 2 * PinnedAllocator::size_class(batch * (bytes + sizeof(std::size_t)) +
                                                      kFieldAlignmentSlack);
  }
  return estimate_memory(in);
}

MemoryEstimate Preflight::estimate() {
  const ResolvedOptions& r = resolve();
  return estimate(r.num_workers, options_.batch_size, sample_bytes().value_or(0));
}

void Preflight::check(bool may_wait_for_first_batch) {
  if (checked_) return;
  const ResolvedOptions& r = resolve();
  if (!options_.check_memory && r.pinning == Pinning::kNone) {
    checked_ = true;  // nothing needs the bytes per sample
    return;
  }
  const bool known = options_.sample_bytes > 0 || measured_sample_bytes_.has_value();
  // In-process loading (num_workers = 0) is measured by the probe: the main process's own
  // memory cannot be told apart from what loading the batch added to it.
  if (!known && may_wait_for_first_batch && r.num_workers > 0 && probe_.sample_bytes &&
      !probe_failed_ && !options_.collate) {
    awaiting_first_batch_ = true;
    return;
  }
  if (const std::optional<std::size_t> bytes = sample_bytes()) run_checks(*bytes);
  checked_ = true;
}

void Preflight::check_first_batch(std::optional<std::size_t> bytes,
                                  std::optional<std::size_t> worker_base) {
  awaiting_first_batch_ = false;
  if (!bytes) {
    probe_failed_ = true;
    checked_ = true;
    try {
      logger().warn(
          "stoker: could not measure the bytes per sample (every worker's first get() threw, a "
          "worker crashed, or none returned within LoaderOptions::timeout), so the loader's "
          "memory is not checked; give LoaderOptions::sample_bytes to check it");
    } catch (...) {
    }
    return;
  }
  measured_sample_bytes_ = bytes;
  // A worker's first sample is all it has loaded; one larger that comes later (an image with
  // more pixels) needs more decoding memory: a quarter more is counted for that.
  if (worker_base && *worker_base > 0) measured_worker_base_ = *worker_base + *worker_base / 4;
  run_checks(*bytes);
  checked_ = true;
}

void Preflight::note_worker_base(std::size_t base) noexcept {
  if (base > 0) measured_worker_base_ = base + base / 4;
}

void Preflight::check_worker_base(std::size_t base) {
  note_worker_base(base);
  if (!checked_ || probe_failed_ || !measured_sample_bytes_ || !options_.check_memory) return;
  // The memory check alone: the base changes no pinned figure (and the pinned budget is now
  // partly held by batches the program keeps). Within the depth chosen before.
  checked_ = false;  // a refusal stays: the next check() runs the checks before forking
  depth_limit_ = check_memory(*measured_sample_bytes_, depth_limit_,
                              options_.memory_limit ? SystemInfo{} : probe_memory_limits());
  checked_ = true;
}

void Preflight::run_checks(std::size_t bytes) {
  std::size_t depth = resolved_->adaptive_depth ? adaptive_ceiling(bytes) : resolved_->max_depth;
  if (options_.check_memory) {
    depth =
        check_memory(bytes, depth, options_.memory_limit ? SystemInfo{} : probe_memory_limits());
  }
  if (resolved_->pinning != Pinning::kNone) depth = check_pinned(bytes, depth);
  depth_limit_ = depth;
}

// Refuses, before forking, a loader whose locked memory would pass the pinned allocator's
// budget (the ring itself for kRegister, the staging blocks for kCopy).
std::size_t Preflight::check_pinned(std::size_t bytes, std::size_t max_depth) {
  const ResolvedOptions& r = *resolved_;
  const bool ring = r.pinning == Pinning::kRegister;
  const PinnedStats now = r.allocator->stats();
  // Cached blocks count as free: the allocator releases them when it needs the room.
  const std::size_t free = now.budget_bytes - std::min(now.budget_bytes, now.in_use_bytes);
  auto locked_at = [&](std::size_t depth) {
    const MemoryEstimate at = estimate(r.num_workers, options_.batch_size, bytes, depth);
    return ring ? at.ring_bytes : at.pinned_bytes;
  };
  for (std::size_t depth = max_depth; depth >= r.min_depth && depth > 0; --depth) {
    if (locked_at(depth) <= free) return depth;
  }
  const MemoryEstimate e = estimate(r.num_workers, options_.batch_size, bytes, r.min_depth);
  const std::size_t locked = ring ? e.ring_bytes : e.pinned_bytes;
  throw PinnedMemoryError(
      fmt::format(
          "DataLoader: pin_memory would lock about {} ({}) but the pinned allocator "
          "has {} of its {} budget left (backend {}). Lower batch_size, num_workers or "
          "prefetch_factor{}, raise the budget (PinnedOptions::budget_bytes, and "
          "`ulimit -l` for mlock), or set pin_memory = false",
          format_bytes(locked),
          ring ? fmt::format("the ring: {} slots x {}", e.num_slots, format_bytes(e.slot_bytes))
               : std::string("two staging blocks of a batch"),
          format_bytes(free), format_bytes(now.budget_bytes), to_string(now.backend),
          ring ? ", or use pin_mode = kCopy (locks two batches, not the ring)" : ""),
      locked, now.budget_bytes, now.in_use_bytes + now.cached_bytes);
}

std::size_t Preflight::check_memory(std::size_t bytes, std::size_t deepest,
                                    const SystemInfo& system) {
  const std::size_t num_workers = resolved_->num_workers;
  const std::size_t min_depth = resolved_->min_depth;
  std::uint64_t allowed = 0;
  std::string limit;
  if (options_.memory_limit) {
    allowed = *options_.memory_limit;
    limit = "LoaderOptions::memory_limit";
  } else {
    const std::optional<std::uint64_t> usable = system.usable_memory();
    if (!usable) return deepest;  // nothing to check against
    allowed = static_cast<std::uint64_t>(static_cast<double>(*usable) * options_.memory_fraction);
    const bool cgroup = system.cgroup_limit.value &&
                        (!system.mem_available.value ||
                         *system.cgroup_limit.value - system.cgroup_usage.value.value_or(0) <
                             *system.mem_available.value);
    limit =
        fmt::format("{:.3g}% (LoaderOptions::memory_fraction) of the {} free {}",
                    options_.memory_fraction * 100, format_bytes(*usable),
                    cgroup ? "under the memory cgroup's limit (" + system.cgroup_limit.source + ")"
                           : "by MemAvailable");
  }
  // The deepest prefetch that fits; a fixed prefetch_factor has only its own depth to try.
  for (std::size_t depth = deepest; depth >= min_depth && depth > 0; --depth) {
    if (estimate(num_workers, options_.batch_size, bytes, depth).loader_bytes <= allowed) {
      return depth;
    }
  }
  const MemoryEstimate e = estimate(num_workers, options_.batch_size, bytes, min_depth);
  // The settings suggested fit with 5% to spare: the workers' base is measured again by the
  // loader that tries them, and varies by a few KiB from run to run.
  auto fits = [&](std::size_t w, std::size_t b) {
    return estimate(w, b, bytes, min_depth).loader_bytes <= allowed - allowed / 20;
  };
  std::string advice;
  std::optional<std::size_t> fitting_workers;
  std::optional<std::size_t> fitting_batch;
  for (std::size_t w = num_workers; w-- > 0;) {
    if (fits(w, options_.batch_size)) {
      advice = fmt::format("num_workers={} (with batch_size={})", w, options_.batch_size);
      fitting_workers = w;
      break;
    }
  }
  std::size_t low = 0;  // largest batch size that fits, by bisection
  std::size_t high = options_.batch_size;
  while (high - low > 1) {
    const std::size_t mid = low + (high - low) / 2;
    (fits(num_workers, mid) ? low : high) = mid;
  }
  if (low > 0) {
    advice += fmt::format("{}batch_size={} (with num_workers={})", advice.empty() ? "" : " or ",
                          low, num_workers);
    fitting_batch = low;
  }
  advice = advice.empty() ? "No smaller num_workers or batch_size would fit either: free "
                            "memory or raise the limit first."
                          : advice + " would fit.";
  throw MemoryBudgetError(
      fmt::format(
          "DataLoader: not enough memory: this loader needs about {} (a ring of {} slots x {} "
          "= {}, {} workers x {}{}{}) but may use {}: {}. {} (LoaderOptions::"
          "check_memory = false skips this check.)",
          format_bytes(e.loader_bytes), e.num_slots, format_bytes(e.slot_bytes),
          format_bytes(e.ring_bytes), e.num_workers, format_bytes(e.worker_private_bytes),
          e.cache_bytes > 0 ? fmt::format(", a sample cache of {}", format_bytes(e.cache_bytes))
                            : std::string(),
          e.pinned_bytes > 0 ? fmt::format(", {} pinned", format_bytes(e.pinned_bytes))
                             : std::string(),
          format_bytes(allowed), limit, advice),
      e, allowed, fitting_workers, fitting_batch);
}

}  // namespace stoker::detail
