// The dataset concepts. A map-style dataset is any type with `size()` and `get(index)`; the
// DataLoader copies it into each worker process (fork), where get() runs.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "stoker/sample.hpp"

namespace stoker {

template <class D>
concept MapDataset = requires(D& dataset, const D& const_dataset, std::size_t index) {
  { const_dataset.size() } -> std::convertible_to<std::size_t>;
  { dataset.get(index) } -> std::convertible_to<Sample>;
};

// An iterable dataset is a stream: next() returns the following sample, or nullopt at its end.
// Each worker runs its own copy (so a dataset that should not repeat itself shards its stream
// with worker_info() or iterable_shard()). If it also has `void start_epoch(std::uint64_t)`,
// each copy calls it before the first next() of every epoch (every begin(), even one that
// repeats an epoch number); without it a copy continues where it
// stopped (non-persistent workers get a fresh fork of the main process's copy each epoch).
template <class D>
concept IterableDataset = requires(D& dataset) {
  { dataset.next() } -> std::convertible_to<std::optional<Sample>>;
};

template <class D>
concept RestartableDataset = requires(D& dataset, std::uint64_t epoch) {
  dataset.start_epoch(epoch);
};

// A dataset that serves another one's samples from a cache (CachedDataset): it names the
// wrapped type `source_dataset` and returns it from source(). The loader's memory probe then
// measures the source's samples, not cache hits.
template <class D>
concept CachingDataset = MapDataset<D> && requires(D& dataset) {
  typename D::source_dataset;
  { dataset.source() } -> std::same_as<typename D::source_dataset&>;
};

// A sample cache's counters (CachedDataset's).
struct CacheStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t entries = 0;     // samples cached
  std::uint64_t bytes_used = 0;  // of the budget
  std::uint64_t budget_bytes = 0;
  std::uint64_t rejected = 0;  // samples that did not fit any more
};

// A dataset that reports a sample cache's counters (CachedDataset, and the composed datasets
// that pass them on): the memory estimate counts the cache's budget, stats() its hits, and a
// composed dataset adds up its parts' counters. The one statement of that contract.
template <class D>
concept CacheReporting = requires(const D& dataset) {
  { dataset.cache_stats() } -> std::convertible_to<CacheStats>;
};

// A dataset that reads remote shards (ShardedDataset, ShardedStream): stats() reports its
// downloads (RemoteStats), the memory estimate counts each loading process's download buffers,
// and diagnose() can tell a loader waiting on the network.
template <class D>
concept RemoteReporting = requires(const D& dataset) {
  { dataset.remote_stats().bytes_fetched } -> std::convertible_to<std::uint64_t>;
  { dataset.remote_stats().wait_seconds } -> std::convertible_to<double>;
  { dataset.remote_download_buffer_bytes() } -> std::convertible_to<std::size_t>;
};

namespace detail {
// Something that has a map-style dataset's members, whether or not their types are right: a
// DataLoader of one that is not a MapDataset says what a map-style dataset needs.
template <class D>
concept HasMapMembers = requires(const D& dataset) {
  dataset.size();
}
|| requires(D& dataset, std::size_t index) { dataset.get(index); };
}  // namespace detail

// The shard of the stream this process should read, when `world_size` processes (ranks) each
// run a loader: shard = rank * num_workers + worker id, of world_size * num_workers. Either
// process (in the main process, worker 0 of 1). Throws std::invalid_argument for rank >=
// world_size.
struct IterableShard {
  std::size_t index = 0;
  std::size_t count = 1;
  // True for the items of a stream this shard should keep: item i belongs to shard i % count.
  bool owns(std::size_t item) const noexcept { return item % count == index; }
};
IterableShard iterable_shard(std::size_t rank = 0, std::size_t world_size = 1);

}  // namespace stoker
