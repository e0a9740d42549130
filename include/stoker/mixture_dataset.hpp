// MixtureDataset: an exact weighted blend of map-style datasets (Megatron's blended datasets,
// torchdata's multiplexers, Grain's mixtures). Every epoch has `samples_per_epoch` samples, of
// which each source gives an exact count set by its weight, interleaved at random; each source
// is read without replacement until all its samples have been seen, then reshuffled, the
// sequence continuing across epochs. Which sample index i is in an epoch is a pure function of
// (seed, epoch, i), so the blend is the same for any num_workers and resumes mid-epoch. Every
// function may be called in either process and blocks only as long as the sources' get() do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "stoker/cached_dataset.hpp"
#include "stoker/composition.hpp"
#include "stoker/detail/erased_dataset.hpp"
#include "stoker/sample.hpp"

namespace stoker {

class MixtureDataset {
 public:
  struct Source {
    // A dataset (moved in) or a shared_ptr to one, and its weight: any finite value >= 0, the
    // weights need not sum to 1.
    template <detail::MapPart T>
    Source(T source, double source_weight) : dataset(std::move(source)), weight(source_weight) {}
    detail::AnyMapDataset dataset;
    double weight = 0;
  };

  // MixtureDataset({{ds_a, 0.7}, {ds_b, 0.3}}, samples_per_epoch, seed). Source k gives
  // counts()[k] samples per epoch: samples_per_epoch x weight / (sum of weights), rounded by
  // largest remainder (each count is the floor of its quota, and the samples left over go one
  // each to the sources with the largest fractional parts, ties to the earlier source). Either
  // process. Throws std::invalid_argument for no sources, a negative or non-finite weight,
  // weights that are all 0, or an empty source with a weight above 0.
  MixtureDataset(std::vector<Source> sources, std::size_t samples_per_epoch, std::uint64_t seed);

  std::size_t size() const noexcept { return size_; }
  // Inside a DataLoader (or with the loader's num_workers == 0): sample i of the loader's
  // current epoch (current_epoch()). Throws std::logic_error when called outside a loader's
  // get() (call get(i, epoch) there), std::out_of_range for i >= size(), stoker::Error when
  // a source's samples have other fields than the others', and what the sources throw.
  Sample get(std::size_t i);
  // Sample i of epoch `epoch`, anywhere.
  Sample get(std::size_t i, std::uint64_t epoch);
  // Which source sample i of `epoch` comes from, and its index there. O(log sources), no
  // allocation. Throws std::out_of_range for i >= size().
  PartIndex locate(std::size_t i, std::uint64_t epoch) const;

  // Samples per epoch from each source.
  const std::vector<std::size_t>& counts() const noexcept { return counts_; }
  std::size_t num_sources() const noexcept { return sources_.size(); }
  std::uint64_t seed() const noexcept { return seed_; }
  // The sources' CachedDataset counters, summed (zeros when there are none).
  CacheStats cache_stats() const;

 private:
  std::vector<Source> sources_;
  std::vector<std::size_t> sizes_;   // each source's size(), read once
  std::vector<std::size_t> counts_;  // samples per epoch from each source
  std::vector<std::size_t> ends_;    // cumulative counts_: the epoch's slots of each source
  std::size_t size_ = 0;
  std::uint64_t seed_ = 0;
  detail::FieldCheck check_;
};

namespace detail {
// The largest-remainder rounding of `total` x weights / (sum of weights), as MixtureDataset
// documents. Throws std::invalid_argument for a negative or non-finite weight, no weights, or
// weights summing to 0.
std::vector<std::size_t> mixture_counts(std::size_t total, const std::vector<double>& weights);
}  // namespace detail

}  // namespace stoker
