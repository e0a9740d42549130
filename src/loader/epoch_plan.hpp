// EpochPlan: the batches of one epoch — which indices make batch k, which batches are done,
// where in-order delivery stands — and make_plan(), which builds one from the sampler, the batch
// sampler or the (seed, epoch) order. Pure: no fork, no shared memory; main process only.
//
// INV-ORDER-1 (kept with LoaderCore::issue): with in_order, batch k goes to worker k mod
//   num_workers, batch k is delivered before batch k + 1, and a plan's batches are issued in
//   increasing k (`issued` only grows).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "stoker/options.hpp"

namespace stoker::detail {

struct EpochPlan {
  std::uint64_t id = 0;  // unique per begin() (and per prefetched epoch) of one loader
  std::uint64_t epoch = 0;
  std::size_t dataset_size = 0;
  std::size_t batch_size = 1;
  std::size_t num_batches = 0;
  std::vector<std::size_t> order;
  // Batch k is order[offsets[k] .. offsets[k + 1]); empty when every batch has batch_size
  // samples but the last (no batch sampler).
  std::vector<std::size_t> offsets;
  // Iterable datasets: no indices and no known length. Batch k goes to worker k mod W (in
  // order); a worker whose stream ended is `exhausted` and gets no more batches, and batches
  // k >= last_issued[w] of an exhausted worker w are void (skipped in the order).
  bool iterable = false;
  std::vector<std::uint8_t> exhausted;     // per worker id
  std::vector<std::uint64_t> last_issued;  // per worker id: highest batch given + 1
  std::size_t issued = 0;                  // batches 0..issued-1 have been issued (INV-ORDER-1)
  std::size_t delivered = 0;               // batches handed out, or reported as errors
  std::size_t next_in_order = 0;
  // Per batch: handed out (or reported as an error), or skipped on resuming; what state()
  // saves beyond the in-order prefix.
  std::vector<std::uint8_t> done;
  // A fresh iterator's batch 0 split into this many parts, part j loaded by worker j (0: not
  // split). Part j is batch(0)[part_begin(j) .. part_begin(j + 1)): equal shares, or
  // `first_bounds` when main chose them (first_batch.cpp: part 0 went out alone, taking its
  // rows one at a time while `first_claimable`, and the others got what it had not begun).
  std::size_t first_parts = 0;
  std::vector<std::size_t> first_bounds;
  bool first_claimable = false;
  std::size_t part_begin(std::size_t j) const noexcept {
    if (!first_bounds.empty()) return first_bounds[j];
    const std::size_t n = batch(0).size();
    return j * (n / first_parts) + std::min(j, n % first_parts);
  }

  std::span<const std::size_t> batch(std::size_t k) const noexcept {
    if (iterable) return {};
    if (!offsets.empty()) return {order.data() + offsets[k], offsets[k + 1] - offsets[k]};
    const std::size_t begin = k * batch_size;
    return {order.data() + begin, std::min(batch_size, order.size() - begin)};
  }
  bool all_exhausted() const noexcept;
  bool fully_issued() const noexcept { return iterable ? all_exhausted() : issued == num_batches; }
  bool has_batches() const noexcept { return iterable || num_batches > 0; }
  // Marks batch k handed out (or reported): it counts as delivered and moves the in-order
  // position past it and past any batch after it that is done already (a resumed state's).
  void mark_delivered(std::size_t k) noexcept;
  // In order, over an iterable dataset: steps past batches that will never come because
  // their worker's stream ended before they were given out.
  void skip_void_batches() noexcept;
};

// Batches in an epoch of n samples without a batch sampler.
std::size_t batches_for(std::size_t n, const LoaderOptions& options) noexcept;

// The plan of `epoch` over a dataset of n samples; an iterable dataset's (`iterable`) has no
// indices, and a stream per worker of `num_workers`. Main process. Throws std::out_of_range for
// a sampler index past the dataset's end and std::invalid_argument for an empty batch from a
// batch sampler.
EpochPlan make_plan(const LoaderOptions& options, bool iterable, std::size_t num_workers,
                    std::uint64_t id, std::uint64_t epoch, std::size_t n);

}  // namespace stoker::detail
