// LoaderOptions: everything a DataLoader can be told, with PyTorch's names and defaults where
// PyTorch has the option. validate() checks them; the DataLoader calls it on construction.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "stoker/collate.hpp"
#include "stoker/sampler.hpp"

namespace stoker {

// What the loader does when a worker process dies (a signal, or exit()).
enum class OnWorkerCrash : std::uint8_t {
  kFail,     // raise WorkerCrashed and end the epoch (PyTorch's behaviour)
  kRespawn,  // fork a replacement and reload what the dead worker had not delivered
};

// What the loader does when the dataset's get() throws for a sample.
enum class OnSampleError : std::uint8_t {
  kFail,  // raise WorkerException for the batch; the epoch goes on (PyTorch's behaviour)
  kSkip,  // drop the sample from its batch, count it, and go on
};

class PinnedAllocator;

// How LoaderOptions::pin_memory makes batches page-locked.
enum class PinMode : std::uint8_t {
  kRegister,  // lock the ring's slots in place (cudaHostRegister, or mlock)
  kCopy,      // copy each batch into a pinned staging block
};

// LoaderOptions::prefetch_factor = kAdaptivePrefetch: a depth that adapts, from 2 up to
// kMaxAdaptivePrefetch batches per worker (see prefetch_factor), deepening only while the rate
// of delivered batches rises with it. How deep it may go depends on the batch's size: a
// worker's batches in flight are held to kAdaptivePrefetchBytes (never below
// kMinAdaptivePrefetch batches), and to kAdaptivePrefetchFloor while the bytes per sample are
// not known (also the depth of the narrower ring used when the full one cannot be mapped). The
// memory check may lower the limit further.
inline constexpr std::size_t kAdaptivePrefetch = 0;
inline constexpr std::size_t kMinAdaptivePrefetch = 2;
inline constexpr std::size_t kMaxAdaptivePrefetch = 32;
inline constexpr std::size_t kAdaptivePrefetchFloor = 8;
inline constexpr std::size_t kAdaptivePrefetchBytes = std::size_t{64} << 20;

struct LoaderOptions {
  std::size_t batch_size = 1;  // samples per batch, 1 .. kMaxBatchSize
  bool shuffle = false;        // a new order each epoch, a function of (seed, epoch) only
  bool drop_last = false;      // drop the last batch when it would be short
  int num_workers = 0;  // worker processes, 0 .. kMaxWorkers; 0 loads in the caller; kAuto picks
  // Batches each worker may have in flight (loading, ready, or held by the consumer), 1 ..
  // kMaxPrefetchFactor: a fixed depth. The default, kAdaptivePrefetch, starts at 2 and goes as
  // deep as kMaxAdaptivePrefetch when the consumer waits while workers sit with their slots full,
  // within what the memory check allows (stats().prefetch_depth says where it stands).
  std::size_t prefetch_factor = kAdaptivePrefetch;
  bool persistent_workers = false;  // keep workers (and their prefetch) across epochs
  bool in_order = true;             // deliver batches in order; false: whichever is ready first
  std::chrono::milliseconds timeout{0};  // longest wait for one batch; 0 waits forever
  // The longest wait for a batch that only the program can unblock: every slot the next batch
  // could use is held by a Batch it keeps, and another thread might release one. 0: as long as
  // `timeout`. A process with one thread gets HeldBatchesTimeout at once either way.
  std::chrono::milliseconds held_timeout{0};
  std::uint64_t seed = 0;  // shuffle order, sample_rng() and WorkerInfo::seed derive from it
  // The epoch's indices come from `sampler` (then shuffle must be false), or its batches from
  // `batch_sampler` (then batch_size must stay 1, shuffle and drop_last false, sampler null),
  // as in PyTorch. The loader passes each its epoch number.
  std::shared_ptr<Sampler> sampler;
  std::shared_ptr<BatchSamplerBase> batch_sampler;
  CollateFn collate;  // empty: stack every field (StackCollator)
  std::function<void(std::size_t worker_id)> worker_init;  // runs first in each worker
  // Runs in the main process while a fetch sleeps waiting for a batch: whenever a signal
  // interrupts the sleep, and at least every kOnWaitInterval while it lasts. An exception it
  // throws ends the epoch (its workers are stopped, as after a timeout) and propagates out of
  // the fetch. This is how an embedding runtime delivers Ctrl-C to a consumer blocked in a
  // fetch (the Python package raises KeyboardInterrupt from it); empty: not called.
  std::function<void()> on_wait;
  // The size of a batch slot: it holds a header (~4 KiB), the batch's indices, its fields and
  // their description. Address space is reserved for every slot; memory is committed only as
  // batches need it. A batch that does not fit is an error naming this option.
  std::size_t max_batch_bytes = std::size_t{1} << 30;

  // Recovery. A respawned worker reloads the batches the dead one had been given; more than
  // max_respawns deaths in one epoch raise the last WorkerCrashed.
  OnWorkerCrash on_worker_crash = OnWorkerCrash::kFail;
  std::size_t max_respawns = 3;
  // Skipped samples are left out of their batch (which is then smaller); past
  // max_skipped_samples in one epoch the next failure raises WorkerException.
  OnSampleError on_sample_error = OnSampleError::kFail;
  std::size_t max_skipped_samples = 100;
  // Replace each worker with a fresh process after it has loaded this many batches (0: never),
  // to bound slow memory growth in user code. The replacement is forked while the old worker
  // finishes its last batches, into a spare set of prefetch_factor slots.
  std::size_t max_batches_per_worker = 0;

  // Memory. Before forking, the loader estimates its peak memory (see memory.hpp) and refuses
  // to start, with MemoryBudgetError, when it passes memory_limit (default: memory_fraction
  // of what probe_system() finds usable: MemAvailable or the memory cgroup's free limit).
  bool check_memory = true;
  double memory_fraction = 0.8;
  std::optional<std::uint64_t> memory_limit;
  // Bytes per sample for the estimate; 0 measures it by loading up to 4 samples in a
  // short-lived child process (an iterable dataset cannot be measured: give it, or the check
  // is skipped).
  std::size_t sample_bytes = 0;
  // Bind each worker to its own physical core, avoiding the core of the thread that starts
  // the epoch (the training loop's). Without it, workers forked together hold their first
  // task (their part of batch 0) to different CPUs of the caller's set, then run anywhere in
  // it (docs/architecture.md, "The first batch").
  bool bind_workers = false;

  // Page-locked batches, for fast copies to a GPU (pinned_allocator.hpp). kRegister locks the
  // ring's slots themselves as batches first use them (no copy; the locked memory is the ring's
  // committed size); kCopy copies each batch into a pinned staging block, which frees its ring
  // slot at once (a copy per batch; the staging blocks are cached and reused). Every batch the
  // consumer sees then reports Batch::is_pinned(). The memory comes from `pinned_allocator`
  // (empty: PinnedAllocator::global()), within its budget.
  bool pin_memory = false;
  PinMode pin_mode = PinMode::kRegister;
  std::shared_ptr<PinnedAllocator> pinned_allocator;

  // Observability (stats.hpp). false keeps only the basic counters (batches, samples, bytes,
  // the consumer's wait): no per-worker stage times, ring occupancy or recent window.
  bool collect_stats = true;
  // A one-line health summary at info level this often while batches flow (printed when
  // STOKER_LOG=info or the program lowers the "stoker" spdlog logger's level); 0: never.
  std::chrono::milliseconds log_interval{10000};
  // Write a Chrome trace (Perfetto, chrome://tracing) of the loader's batches here when the
  // loader is destroyed: a span per batch per worker, the consumer's waits, and the ready
  // batches at each request. Empty: the STOKER_TRACE environment variable, when set.
  std::string trace_path;
};

// The longest a waiting fetch sleeps between two calls of LoaderOptions::on_wait.
inline constexpr std::chrono::milliseconds kOnWaitInterval{100};

// LoaderOptions::num_workers = kAuto: recommend_num_workers() decides, at the first epoch.
inline constexpr int kAuto = -1;

inline constexpr std::size_t kMaxBatchSize = std::size_t{1} << 24;
inline constexpr int kMaxWorkers = 256;
inline constexpr std::size_t kMaxPrefetchFactor = 64;
inline constexpr std::size_t kMinBatchBytes = std::size_t{1} << 16;
inline constexpr std::size_t kMaxBatchBytes = std::size_t{1} << 40;

// Throws std::invalid_argument naming the first bad option, its value and the valid range.
void validate(const LoaderOptions& options);

}  // namespace stoker
