// LoaderStats: what a DataLoader has done in the current (or last) epoch, and since it was
// built. A snapshot, taken in the main process by DataLoader::stats(); the counters are kept
// per batch, never per sample.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace stoker {

// One worker channel over the epoch (a respawned or recycled worker continues its channel's
// figures). Times are seconds of wall time inside each stage, measured by the worker per batch.
struct WorkerStats {
  std::size_t worker_id = 0;
  int pid = 0;                // the process serving the channel now (0: none)
  std::uint64_t batches = 0;  // loaded this epoch
  std::uint64_t samples = 0;
  double get_seconds = 0;      // inside the dataset's get() / next()
  double collate_seconds = 0;  // inside the collate (stacking, or the user's)
  double write_seconds = 0;    // the rest of a batch: slot layout and bookkeeping
  double busy_fraction = 0;    // (get + collate + write) / epoch wall time, 0 .. 1
  // Time it had no batch to load because every slot its prefetch depth allows was in flight
  // (loaded and waiting for the consumer, or held by it): the bubbles a deeper prefetch fills.
  double blocked_seconds = 0;
  std::uint64_t rss_bytes = 0;  // the process now (0 when unknown)
  std::uint64_t pss_bytes = 0;
};

// The GPU, when the NVIDIA management library is found at run time (libnvidia-ml.so.1).
struct GpuStats {
  unsigned device = 0;
  double utilization = 0;  // 0 .. 1, the driver's recent sample
  std::uint64_t memory_used = 0;
  std::uint64_t memory_total = 0;
};

struct LoaderStats {
  std::uint64_t epoch = 0;    // the epoch these figures describe
  std::uint64_t batches = 0;  // delivered this epoch
  std::uint64_t samples = 0;
  std::uint64_t bytes = 0;                   // batch payload bytes delivered
  double epoch_seconds = 0;                  // from begin() to now (or to the epoch's end)
  double wait_seconds = 0;                   // of which the consumer spent inside fetches
  std::uint64_t skipped_samples = 0;         // OnSampleError::kSkip, this epoch
  std::vector<std::size_t> skipped_indices;  // their dataset indices, in delivery order
  std::uint64_t respawns = 0;                // OnWorkerCrash::kRespawn, this epoch
  std::uint64_t workers_recycled = 0;        // max_batches_per_worker, since the loader was built
  // A CachedDataset's counters, over every process and since the cache was made (not per
  // epoch, unlike the rest); zero for other datasets.
  std::uint64_t cache_hits = 0;
  std::uint64_t cache_misses = 0;
  std::uint64_t cache_bytes = 0;
  // Remote shards (ShardedDataset / ShardedStream over URLs: RemoteStats), this epoch, over
  // every process: body bytes downloaded, requests (retries among them), shards found in the
  // cache or not, the time readers were blocked on bytes not downloaded yet (summed over the
  // workers) and the downloads' own time. `remote` is true for such a dataset.
  bool remote = false;
  std::uint64_t remote_bytes_fetched = 0;
  std::uint64_t remote_requests = 0;
  std::uint64_t remote_retries = 0;
  std::uint64_t remote_cache_hits = 0;
  std::uint64_t remote_cache_misses = 0;
  double remote_wait_seconds = 0;
  double remote_download_seconds = 0;

  // Over the last few seconds (empty windows give 0).
  double recent_samples_per_second = 0;
  double recent_bytes_per_second = 0;
  // Per worker channel (empty when num_workers == 0).
  std::vector<WorkerStats> workers;
  // The ring: the slots the loader may use now (max(num_workers, 1) x the prefetch depth; not
  // the spare channel of max_batches_per_worker), and the mean, over the consumer's requests,
  // of the share of them holding a loaded batch not yet handed out (near 0: data-bound; near
  // 1: the consumer is the slow side).
  std::size_t ring_slots = 0;
  double ring_occupancy = 0;
  // The prefetch depth (batches each worker may have in flight): now, and the most it may
  // reach (the memory check's limit); adaptive with the default prefetch_factor, whose last
  // window wanted more than the limit when `prefetch_at_limit`.
  bool prefetch_adaptive = false;
  std::size_t prefetch_depth = 0;
  std::size_t prefetch_depth_limit = 0;
  bool prefetch_at_limit = false;
  // Memory now: the main process, and the shared ring's committed bytes.
  std::uint64_t main_rss_bytes = 0;
  std::uint64_t main_pss_bytes = 0;
  std::uint64_t ring_bytes = 0;
  // The whole machine over the epoch so far, from /proc/stat: share of CPU time busy
  // (user + system + ...) and in iowait, 0 .. 1; empty when unknown.
  std::optional<double> cpu_busy_fraction;
  std::optional<double> iowait_fraction;
  std::size_t logical_cpus = 0;
  std::optional<GpuStats> gpu;

  double samples_per_second() const noexcept {
    return epoch_seconds > 0 ? static_cast<double>(samples) / epoch_seconds : 0;
  }
  double bytes_per_second() const noexcept {
    return epoch_seconds > 0 ? static_cast<double>(bytes) / epoch_seconds : 0;
  }
  // The share of the epoch the consumer waited for data: near 1 means data-bound.
  double wait_fraction() const noexcept {
    return epoch_seconds > 0 ? wait_seconds / epoch_seconds : 0;
  }
  // Mean time the consumer waited per batch.
  double wait_per_batch_seconds() const noexcept {
    return batches > 0 ? wait_seconds / static_cast<double>(batches) : 0;
  }
  // Sum of the processes' PSS: workers, main (the ring's pages are counted in their PSS).
  std::uint64_t tree_pss_bytes() const noexcept {
    std::uint64_t total = main_pss_bytes;
    for (const WorkerStats& w : workers) total += w.pss_bytes;
    return total;
  }
};

}  // namespace stoker
