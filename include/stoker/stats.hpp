// LoaderStats: what a DataLoader has done in the current (or last) epoch, and since it was
// built. A snapshot, taken in the main process by DataLoader::stats(); the counters are kept
// per batch, never per sample.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stoker {

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
};

}  // namespace stoker
