// Preflight: what a loader settles before it forks anything, once. It measures the bytes per
// sample (a short-lived probe process loads a few samples, unless LoaderOptions::sample_bytes
// gives them), resolves num_workers = kAuto into ResolvedOptions, and refuses a loader whose
// estimate passes the memory it may use (MemoryBudgetError) or whose locked memory passes the
// pinned allocator's budget (PinnedMemoryError), naming settings that would fit. Main process.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>

#include "loader/resolved_options.hpp"
#include "stoker/detail/loader_core.hpp"
#include "stoker/memory.hpp"
#include "stoker/options.hpp"

namespace stoker::detail {

class Preflight {
 public:
  // `options` must outlive the Preflight (LoaderCore owns both).
  Preflight(const LoaderOptions& options, bool iterable, DatasetProbe probe);

  // The options the engine runs on, resolved at the first call: for kAuto that measures the
  // samples and probes the system. Never throws MemoryBudgetError; throws what the pinned
  // allocator's creation throws.
  const ResolvedOptions& resolve();
  bool is_resolved() const noexcept { return resolved_.has_value(); }
  // Before the first epoch forks: the memory and pinned checks, until one passes (a failure
  // is thrown again by the next begin()). Throws MemoryBudgetError or PinnedMemoryError. When
  // the bytes per sample are not known yet and `may_wait_for_first_batch` (a fresh epoch of a
  // map-style dataset with the default collate), it measures nothing now and the check waits
  // for the epoch's first batch instead (awaiting_first_batch()): those samples are loaded
  // once, by the workers, not also by a probe process.
  void check(bool may_wait_for_first_batch);
  bool awaiting_first_batch() const noexcept { return awaiting_first_batch_; }
  // The first batch's figures: bytes per sample (empty: no part of it loaded) and the largest
  // private memory of a worker after it (empty: unknown). Then the checks, as check().
  void check_first_batch(std::optional<std::size_t> bytes, std::optional<std::size_t> worker_base);
  // A worker's own memory measured after its first task (the largest so far): the worker base
  // from now on (a quarter more, as check_first_batch counts it). check_worker_base then runs
  // the memory check again with it, within the depth chosen, when the first batch's checks
  // have run: a refusal throws, and the next check() refuses before forking.
  void note_worker_base(std::size_t base) noexcept;
  void check_worker_base(std::size_t base);
  // The estimate of the resolved loader (resolving it first).
  MemoryEstimate estimate();
  // The estimate for another worker count or batch size, with this loader's other options, at
  // prefetch depth `depth` (0: the deepest this loader may reach, depth_limit()).
  MemoryEstimate estimate(std::size_t workers, std::size_t batch, std::size_t bytes,
                          std::size_t depth = 0) const;
  // The deepest prefetch the checks allow: until they have run, a fixed prefetch_factor or the
  // adaptive ceiling for the bytes per sample known so far; then the largest depth up to that
  // whose estimate fits the memory limit and the pinned budget.
  std::size_t depth_limit() const noexcept;
  // The adaptive depth's ceiling for samples of `bytes` (options.hpp: kAdaptivePrefetchBytes
  // of batches per worker, within [kMinAdaptivePrefetch, kMaxAdaptivePrefetch]);
  // kAdaptivePrefetchFloor when the bytes are unknown.
  std::size_t adaptive_ceiling(std::optional<std::size_t> bytes) const noexcept;
  // The ring made has `slots` a channel: depth_limit() never passes it.
  void set_ring_depth(std::size_t slots) noexcept { ring_depth_ = slots; }
  // Bytes per sample: given, or measured once by the probe; empty when it cannot be known.
  std::optional<std::size_t> sample_bytes();
  std::size_t cache_bytes() const noexcept { return probe_.cache_bytes; }

 private:
  std::chrono::milliseconds probe_timeout() const;
  void run_checks(std::size_t bytes);
  // Each returns the largest depth that fits (at least the minimum), or throws.
  // check_memory tries the depths from `deepest` down.
  std::size_t check_memory(std::size_t bytes, std::size_t deepest, const SystemInfo& system);
  std::size_t check_pinned(std::size_t bytes, std::size_t max_depth);

  const LoaderOptions& options_;
  bool iterable_;
  DatasetProbe probe_;
  std::optional<ResolvedOptions> resolved_;
  std::optional<std::size_t> measured_sample_bytes_;
  std::optional<std::size_t> measured_worker_base_;     // the probe's or the first batch's
  std::optional<std::size_t> measured_worker_startup_;  // the part before its first sample
  bool probe_failed_ = false;
  bool checked_ = false;
  bool awaiting_first_batch_ = false;
  std::size_t depth_limit_ = 0;  // 0: not checked yet
  std::size_t ring_depth_ = 0;   // 0: no ring yet
};

}  // namespace stoker::detail
