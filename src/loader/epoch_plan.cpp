#include "loader/epoch_plan.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "loader/epoch_order.hpp"

namespace stoker::detail {

bool EpochPlan::all_exhausted() const noexcept {
  for (const std::uint8_t e : exhausted) {
    if (e == 0) return false;
  }
  return true;
}

void EpochPlan::mark_delivered(std::size_t k) noexcept {
  ++delivered;
  if (k < done.size()) done[k] = 1;
  next_in_order = std::max(next_in_order, k + 1);
  // Batches a resumed state marked done are never loaded again: in order, the next one to
  // deliver is the first that is not done.
  while (next_in_order < done.size() && done[next_in_order] != 0) ++next_in_order;
}

void EpochPlan::skip_void_batches() noexcept {
  if (!iterable) return;
  const std::size_t workers = exhausted.size();
  while (next_in_order < issued) {
    const std::size_t w = next_in_order % workers;
    if (exhausted[w] == 0 || next_in_order < last_issued[w]) return;
    ++next_in_order;
  }
}

std::size_t batches_for(std::size_t n, const LoaderOptions& o) noexcept {
  return o.drop_last ? n / o.batch_size : (n + o.batch_size - 1) / o.batch_size;
}

EpochPlan make_plan(const LoaderOptions& options, bool iterable, std::size_t num_workers,
                    std::uint64_t id, std::uint64_t epoch, std::size_t n) {
  EpochPlan plan;
  plan.id = id;
  plan.epoch = epoch;
  plan.dataset_size = n;
  plan.batch_size = options.batch_size;
  if (iterable) {
    plan.iterable = true;
    plan.exhausted.assign(std::max<std::size_t>(num_workers, 1), 0);
    plan.last_issued.assign(plan.exhausted.size(), 0);
    return plan;
  }
  if (options.batch_sampler) {
    const std::vector<std::vector<std::size_t>> batches = options.batch_sampler->batches(epoch);
    plan.offsets.reserve(batches.size() + 1);
    plan.offsets.push_back(0);
    for (std::size_t k = 0; k < batches.size(); ++k) {
      if (batches[k].empty()) {
        throw std::invalid_argument(fmt::format(
            "DataLoader: the batch sampler's batch {} of epoch {} is empty; every batch needs "
            "at least one index",
            k, epoch));
      }
      plan.order.insert(plan.order.end(), batches[k].begin(), batches[k].end());
      plan.offsets.push_back(plan.order.size());
    }
    plan.num_batches = batches.size();
  } else {
    plan.order = options.sampler ? options.sampler->indices(epoch)
                                 : epoch_order(n, options.shuffle, options.seed, epoch);
    plan.num_batches = batches_for(plan.order.size(), options);
  }
  plan.done.assign(plan.num_batches, 0);
  for (std::size_t i = 0; i < plan.order.size(); ++i) {
    if (plan.order[i] >= n) {
      throw std::out_of_range(fmt::format(
          "DataLoader: the {} gave index {} (position {} of epoch {}), but the dataset has {} "
          "samples",
          options.batch_sampler ? "batch sampler" : "sampler", plan.order[i], i, epoch, n));
    }
  }
  return plan;
}

}  // namespace stoker::detail
