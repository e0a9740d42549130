// Memory: what this machine (or container) allows, and what a loader will need. probe_system()
// (stoker/system_probe.hpp, included here) reads the limits, each with the file it came from;
// estimate_memory() breaks a loader's peak
// memory down (the shared ring, each worker's private memory, the main process, pinned staging,
// a sample cache); recommend_num_workers() picks a worker count from cores, CPU quota, memory
// and storage. A DataLoader runs the same estimate before it forks and refuses, with
// MemoryBudgetError, to start one that would not fit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "stoker/errors.hpp"
#include "stoker/system_probe.hpp"

namespace stoker {

// Where a loader's memory goes, at its peak: the memory the kernel cannot reclaim (anonymous
// and shared memory). File-backed pages (the program's code and libraries as they page in,
// memory-mapped dataset files) are page cache, which the kernel drops under pressure and reads
// again: they are not counted, neither in main_bytes nor in the loader's parts.
struct MemoryEstimate {
  std::size_t num_workers = 0;
  std::size_t batch_size = 0;
  std::size_t bytes_per_sample = 0;  // given, or measured (the first batch, or a probe's samples)
  std::size_t batch_bytes = 0;       // one batch's payload
  std::size_t num_slots = 0;
  std::size_t slot_bytes = 0;  // one slot: header, indices, payload, layout
  // The shared ring: its control block and channels, every slot filled (num_workers = 0: one,
  // and the header page of the other).
  std::size_t ring_bytes = 0;
  std::size_t worker_private_bytes = 0;  // each worker: samples in flight, base, serve loop
  std::size_t worker_base_bytes = 0;     // the base part: measured, or a default of 1 MiB
  std::size_t worker_startup_bytes = 0;  // of the base, what a fork writes before loading
  // num_workers = 0: what loading in the main process adds to it, as a worker's private
  // memory (the samples in flight and the base: get()'s buffers, a decoder's scratch).
  std::size_t inline_bytes = 0;
  // The epochs' plans in the main process (the indices of every batch): the running epoch's,
  // the next one's when it is planned ahead (persistent workers, or a sampler asked by size()),
  // and with persistent workers the one they were forked with, which they keep (copy-on-write)
  // after the main process frees it.
  std::size_t plan_bytes = 0;
  // The main process now: its resident anonymous memory (RssAnon), each page once, those its
  // workers share copy-on-write included (the workers count only the pages they copy).
  std::size_t main_bytes = 0;
  std::size_t pinned_bytes = 0;  // page-locked staging (pin_memory with copies)
  std::size_t cache_bytes = 0;   // a CachedDataset's budget
  // Remote shards: every loading process's download buffers (receive buffers and connection
  // state for RemoteOptions::parts_in_flight parts); the bytes themselves go to files.
  std::size_t download_bytes = 0;
  // The loader's own peak: the ring, the workers, in-process loading, the plans, pinned
  // staging, the cache and the download buffers; total_bytes adds the main process as it is
  // now.
  std::size_t loader_bytes = 0;
  std::size_t total_bytes = 0;
  // The rule of thumb, for comparison: (num_workers + 1) x batch_size x bytes per sample.
  std::size_t rule_of_thumb_bytes = 0;
};

// The estimate for a loader of `num_workers` workers, `prefetch_factor` slots each, batches of
// `batch_size` samples of `bytes_per_sample`. `streaming` is true when a worker holds one
// sample at a time (the default collate); false when it holds the whole batch's samples (a
// user collate, or skipping). Pure arithmetic plus one read of this process's PSS.
struct EstimateInputs {
  std::size_t num_workers = 0;
  std::size_t prefetch_factor = 2;
  std::size_t batch_size = 1;
  std::size_t bytes_per_sample = 0;
  bool streaming = true;
  std::size_t pinned_bytes = 0;
  std::size_t cache_bytes = 0;
  // A loading process's download buffers (remote shards), counted for each worker (or the main
  // process when num_workers = 0).
  std::size_t download_bytes_per_process = 0;
  // LoaderOptions::max_batches_per_worker > 0: a retiring worker's replacement starts on a
  // spare set of prefetch_factor slots while the old one finishes, so the ring has one more.
  bool recycling = false;
  // A worker's own memory besides its samples, as measured in the loader's probe process;
  // empty: 1 MiB, this project's measured typical figure.
  std::optional<std::size_t> worker_base_bytes;
  // The part of worker_base_bytes a forked process writes before it loads anything (its
  // copy-on-write start-up), which loading in-process (num_workers = 0) does not pay; empty:
  // none of it is left out.
  std::optional<std::size_t> worker_startup_bytes;
  // The samples an epoch plans (the dataset's size; 0 for an iterable dataset), and what makes
  // the main process hold more than the running epoch's plan: persistent workers (the next
  // epoch is planned ahead, and the workers keep the plan they were forked with), a sampler or
  // batch sampler (size() plans the next epoch ahead), a batch sampler (its batches are lists,
  // copied into the plan).
  std::size_t dataset_size = 0;
  bool persistent_workers = false;
  bool sampler = false;
  bool batch_sampler = false;
};
MemoryEstimate estimate_memory(const EstimateInputs& inputs);

// A small table of the breakdown, one row per part (also fmt::format("{}", estimate) with
// <stoker/fmt.hpp>).
std::string to_string(const MemoryEstimate& estimate);

// The loader refused to start: its estimate passes a limit. The message names the limit, both
// numbers, and the largest num_workers and batch_size that fit.
class MemoryBudgetError : public Error {
 public:
  MemoryBudgetError(std::string message, MemoryEstimate estimate, std::uint64_t allowed,
                    std::optional<std::size_t> suggested_num_workers = std::nullopt,
                    std::optional<std::size_t> suggested_batch_size = std::nullopt)
      : Error(std::move(message)),
        estimate_(estimate),
        allowed_(allowed),
        suggested_num_workers_(suggested_num_workers),
        suggested_batch_size_(suggested_batch_size) {}
  const MemoryEstimate& estimate() const noexcept { return estimate_; }
  std::uint64_t allowed_bytes() const noexcept { return allowed_; }
  // The largest num_workers that fits with the same batch_size, and the largest batch_size
  // that fits with the same num_workers; empty when none does.
  std::optional<std::size_t> suggested_num_workers() const noexcept {
    return suggested_num_workers_;
  }
  std::optional<std::size_t> suggested_batch_size() const noexcept { return suggested_batch_size_; }

 private:
  MemoryEstimate estimate_;
  std::uint64_t allowed_;
  std::optional<std::size_t> suggested_num_workers_;
  std::optional<std::size_t> suggested_batch_size_;
};

// A worker count for this machine: the smallest of physical cores - 1 (at least 1; twice the
// cores instead when SystemInfo::network_filesystem is set), the CPU quota, what memory allows
// at `memory_fraction` of the usable memory (with `per_worker_bytes` each), and a storage cap
// (4 on a rotational disk); local_world_size ranks on the machine share its cores, quota and
// memory. `reason` says which bound decided.
struct WorkerRecommendation {
  std::size_t num_workers = 1;
  std::string reason;
};
WorkerRecommendation recommend_num_workers(const SystemInfo& system,
                                           std::size_t per_worker_bytes = 0,
                                           double memory_fraction = 0.8,
                                           std::size_t local_world_size = 1);

}  // namespace stoker
