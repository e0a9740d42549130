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
