// LoaderOptions: everything a DataLoader can be told, with PyTorch's names and defaults where
// PyTorch has the option. validate() checks them; the DataLoader calls it on construction.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "stoker/collate.hpp"

namespace stoker {

struct LoaderOptions {
  std::size_t batch_size = 1;       // samples per batch, 1 .. kMaxBatchSize
  bool shuffle = false;             // a new order each epoch, a function of (seed, epoch) only
  bool drop_last = false;           // drop the last batch when it would be short
  int num_workers = 0;              // worker processes, 0 .. kMaxWorkers; 0 loads in the caller
  std::size_t prefetch_factor = 2;  // batch slots per worker, 1 .. kMaxPrefetchFactor
  bool persistent_workers = false;  // keep workers (and their prefetch) across epochs
  bool in_order = true;             // deliver batches in order; false: whichever is ready first
  std::chrono::milliseconds timeout{0};  // longest wait for one batch; 0 waits forever
  std::uint64_t seed = 0;                // shuffle order and WorkerInfo::seed derive from it
  CollateFn collate;                     // empty: stack every field (StackCollator)
  std::function<void(std::size_t worker_id)> worker_init;  // runs first in each worker
  // The largest batch (payload plus layout) a slot can hold. Address space is reserved for it;
  // memory is committed only as batches need it.
  std::size_t max_batch_bytes = std::size_t{1} << 30;
};

inline constexpr std::size_t kMaxBatchSize = std::size_t{1} << 24;
inline constexpr int kMaxWorkers = 256;
inline constexpr std::size_t kMaxPrefetchFactor = 64;
inline constexpr std::size_t kMinBatchBytes = std::size_t{1} << 12;
inline constexpr std::size_t kMaxBatchBytes = std::size_t{1} << 40;

// Throws std::invalid_argument naming the first bad option, its value and the valid range.
void validate(const LoaderOptions& options);

}  // namespace stoker
