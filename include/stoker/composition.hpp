// Datasets built from datasets, as in torch.utils.data: Subset and random_split (some of a
// dataset's indices), ConcatDataset (map-style datasets end to end), ChainDataset (iterable
// ones one after another), StackDataset (aligned datasets, their fields side by side) and
// transform(ds, fn) (a per-sample function that runs in the worker). Each is a dataset like any
// other, so they nest and go into a DataLoader, a CachedDataset or a MixtureDataset.
//
// Parts are held through std::shared_ptr: pass a dataset (it is moved in) or a shared_ptr to
// one. Copies of a wrapper share its parts; a DataLoader's workers each get a fork()ed,
// copy-on-write copy of all of it, as with any dataset. No wrapper reseeds: sample_rng() in a
// part's get() or in fn is the generator of the loader's index being loaded, so augmentation is
// the same for any num_workers. Every function here may be called in either process and
// blocks only as long as the parts' own get() / next() do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "stoker/cached_dataset.hpp"
#include "stoker/dataset.hpp"
#include "stoker/detail/erased_dataset.hpp"
#include "stoker/sample.hpp"

namespace stoker {

// Where an index of a composed dataset lands: which part, and the index within that part.
struct PartIndex {
  std::size_t part = 0;
  std::size_t index = 0;
  friend bool operator==(const PartIndex&, const PartIndex&) = default;
};

namespace detail {
// Throws std::out_of_range: "<owner>: index <i> is out of range for <size> samples; ...".
// An index above SIZE_MAX / 2 is also shown as the negative number it probably was.
[[noreturn]] void throw_index_out_of_range(std::string_view owner, std::size_t index,
                                           std::size_t size);
// Throws std::out_of_range naming the first index >= dataset_size and its position.
void check_subset_indices(std::span<const std::size_t> indices, std::size_t dataset_size);
// The end of each part in the concatenation. Throws std::overflow_error past SIZE_MAX.
std::vector<std::size_t> cumulative_sizes(std::span<const std::size_t> sizes);
// The part holding `index` by binary search (std::upper_bound) over the ends: empty parts are
// never chosen. Throws std::out_of_range naming `owner` for index >= the total.
PartIndex locate_part(std::span<const std::size_t> ends, std::size_t index, std::string_view owner);
// Adds the fields of `part` to `into`, each named "prefix.name" (or "name" for an empty
// prefix). Throws stoker::Error naming the field, the part and the sample index when `into` already
// has a field of that name.
void merge_fields(Sample& into, const Sample& part, std::string_view prefix,
                  std::size_t part_number, std::size_t index);
// Throws std::invalid_argument: random_split's length at `position` is negative.
[[noreturn]] void throw_negative_length(std::size_t position);
// The lengths PyTorch's random_split gives `fractions` of n samples. Throws
// std::invalid_argument for a fraction outside [0, 1] or fractions that do not sum to 1.
std::vector<std::size_t> split_lengths(std::size_t n, std::span<const double> fractions);
// A random permutation of 0 .. n-1 (seeded by `seed`) cut into pieces of `lengths`. Throws
// std::invalid_argument when the lengths do not sum to n.
std::vector<std::vector<std::size_t>> split_indices(std::size_t n,
                                                    std::span<const std::size_t> lengths,
                                                    std::uint64_t seed);
}  // namespace detail

// Subset(dataset, indices): sample i is dataset.get(indices[i]), as PyTorch's Subset. Indices
// may repeat and come in any order.
template <MapDataset D>
class Subset {
 public:
  // Either process. Throws std::out_of_range naming the first index >= dataset.size().
  Subset(D dataset, std::vector<std::size_t> indices)
      : Subset(std::make_shared<D>(std::move(dataset)), std::move(indices)) {}
  Subset(std::shared_ptr<D> dataset, std::vector<std::size_t> indices)
      : dataset_(std::move(dataset)), indices_(std::move(indices)) {
    detail::check_subset_indices(indices_, static_cast<std::size_t>(dataset_->size()));
  }

  std::size_t size() const noexcept { return indices_.size(); }
  // Throws std::out_of_range for i >= size(), and what the dataset's get() throws.
  Sample get(std::size_t i) {
    if (i >= indices_.size()) detail::throw_index_out_of_range("Subset::get", i, indices_.size());
    return Sample(dataset_->get(indices_[i]));
  }
  CacheStats cache_stats() const requires CacheReporting<D> { return dataset_->cache_stats(); }
  const std::vector<std::size_t>& indices() const noexcept { return indices_; }
  D& dataset() noexcept { return *dataset_; }
  const D& dataset() const noexcept { return *dataset_; }

 private:
  std::shared_ptr<D> dataset_;
  std::vector<std::size_t> indices_;
};

template <class D>
Subset(D, std::vector<std::size_t>) -> Subset<D>;
template <class D>
Subset(std::shared_ptr<D>, std::vector<std::size_t>) -> Subset<D>;

// random_split(dataset, lengths, seed): disjoint Subsets covering the dataset, of the given
// lengths, drawn by a random permutation that depends on `seed` alone (not PyTorch's
// permutation: stoker's generator). With fractions, each length is floor(fraction * n) and the
// remaining samples go one each to the lengths in turn from the first, as in PyTorch.
// The Subsets share the one dataset. Either process. Throws std::invalid_argument when the
// lengths do not sum to dataset.size(), or a fraction is outside [0, 1], or the fractions do
// not sum to 1 (within 1e-9).
template <detail::MapPart T>
std::vector<Subset<detail::part_type_t<T>>> random_split(T dataset,
                                                         std::span<const std::size_t> lengths,
                                                         std::uint64_t seed) {
  using D = detail::part_type_t<T>;
  std::shared_ptr<D> shared = detail::share_part(std::move(dataset));
  std::vector<std::vector<std::size_t>> pieces =
      detail::split_indices(static_cast<std::size_t>(shared->size()), lengths, seed);
  std::vector<Subset<D>> subsets;
  subsets.reserve(pieces.size());
  for (std::vector<std::size_t>& piece : pieces) subsets.emplace_back(shared, std::move(piece));
  return subsets;
}
template <detail::MapPart T>
std::vector<Subset<detail::part_type_t<T>>> random_split(T dataset,
                                                         std::span<const double> fractions,
                                                         std::uint64_t seed) {
  const auto n = static_cast<std::size_t>(dataset.size());
  const std::vector<std::size_t> lengths = detail::split_lengths(n, fractions);
  return random_split(std::move(dataset), std::span<const std::size_t>(lengths), seed);
}
template <detail::MapPart T>
auto random_split(T dataset, const std::vector<std::size_t>& lengths, std::uint64_t seed) {
  return random_split(std::move(dataset), std::span<const std::size_t>(lengths), seed);
}
template <detail::MapPart T>
auto random_split(T dataset, const std::vector<double>& fractions, std::uint64_t seed) {
  return random_split(std::move(dataset), std::span<const double>(fractions), seed);
}
// random_split(ds, {800, 200}, seed) (lengths) or random_split(ds, {0.8, 0.2}, seed)
// (fractions).
template <detail::MapPart T, class N>
requires std::is_arithmetic_v<N>
auto random_split(T dataset, std::initializer_list<N> lengths_or_fractions, std::uint64_t seed) {
  if constexpr (std::is_floating_point_v<N>) {
    const std::vector<double> fractions(lengths_or_fractions.begin(), lengths_or_fractions.end());
    return random_split(std::move(dataset), std::span<const double>(fractions), seed);
  } else {
    std::vector<std::size_t> lengths;
    for (const N length : lengths_or_fractions) {
      if constexpr (std::is_signed_v<N>) {
        if (length < 0) detail::throw_negative_length(lengths.size());
      }
      lengths.push_back(static_cast<std::size_t>(length));
    }
    return random_split(std::move(dataset), std::span<const std::size_t>(lengths), seed);
  }
}

// ConcatDataset(a, b, ...): the parts end to end, as PyTorch's ConcatDataset. size() is the sum
// of the parts' sizes (read once, at construction); index i is found by binary search over the
// parts' ends, and empty parts are allowed. The parts may be of different types, as long as
// their samples have the same fields (names and dtypes).
class ConcatDataset {
 public:
  // Either process. Throws std::invalid_argument for no parts.
  template <detail::MapPart... Ts>
  requires(sizeof...(Ts) > 0) explicit ConcatDataset(Ts... parts) {
    init(detail::erase_each<detail::AnyMapDataset>(std::move(parts)...));
  }
  template <detail::MapPart T>
  explicit ConcatDataset(std::vector<T> parts) {
    init(detail::erase_vector<detail::AnyMapDataset>(std::move(parts)));
  }

  std::size_t size() const noexcept { return ends_.empty() ? 0 : ends_.back(); }
  // Throws std::out_of_range for i >= size(); stoker::Error when a part's samples have other
  // fields than the others' (the first sample this process loads from each part is compared).
  Sample get(std::size_t i) {
    const PartIndex at = locate(i);
    Sample sample = parts_[at.part].get(at.index);
    check_.check(at.part, sample);
    return sample;
  }
  // Where index i lands. Throws std::out_of_range for i >= size().
  PartIndex locate(std::size_t i) const {
    return detail::locate_part(ends_, i, "ConcatDataset::get");
  }
  std::size_t num_parts() const noexcept { return parts_.size(); }
  // The end of each part: PyTorch's cumulative_sizes.
  const std::vector<std::size_t>& cumulative_sizes() const noexcept { return ends_; }
  // The parts' CachedDataset counters, summed (zeros when there are none).
  CacheStats cache_stats() const;

 private:
  void init(std::vector<detail::AnyMapDataset> parts);

  std::vector<detail::AnyMapDataset> parts_;
  std::vector<std::size_t> ends_;
  detail::FieldCheck check_;
};

// ChainDataset(a, b, ...): iterable datasets one after another, as PyTorch's ChainDataset: the
// first part's stream to its end, then the second's... Each epoch (start_epoch) starts again
// from the first part, and each part's own start_epoch(), if it has one, is called when the
// chain reaches it; a part without one carries on where its stream stopped. In a DataLoader
// each worker reads its own copy of the chain, so parts shard themselves (iterable_shard()) as
// any iterable dataset does. Samples of all parts must have the same fields.
class ChainDataset {
 public:
  // Either process. Throws std::invalid_argument for no parts.
  template <detail::IterablePart... Ts>
  requires(sizeof...(Ts) > 0) explicit ChainDataset(Ts... parts) {
    init(detail::erase_each<detail::AnyIterableDataset>(std::move(parts)...));
  }
  template <detail::IterablePart T>
  explicit ChainDataset(std::vector<T> parts) {
    init(detail::erase_vector<detail::AnyIterableDataset>(std::move(parts)));
  }

  // The next sample, or nullopt when the last part has ended. Throws what the parts throw,
  // and stoker::Error when a part's samples have other fields than the others'.
  std::optional<Sample> next();
  void start_epoch(std::uint64_t epoch);
  std::size_t num_parts() const noexcept { return parts_.size(); }

 private:
  void init(std::vector<detail::AnyIterableDataset> parts);

  std::vector<detail::AnyIterableDataset> parts_;
  std::size_t current_ = 0;
  std::optional<std::uint64_t> epoch_;  // set by start_epoch(): parts restart when reached
  bool current_started_ = false;        // parts_[current_] has had its start_epoch()
  detail::FieldCheck check_;
};

// StackDataset: aligned datasets of the same size whose samples are put side by side: sample i
// has the fields of every part's sample i. Named parts, as PyTorch's
// StackDataset(a=ds1, b=ds2), prefix their fields: StackDataset({{"a", ds1}, {"b", ds2}}) has
// fields "a.image", "b.label"... Unnamed parts, StackDataset(ds1, ds2), keep their fields'
// names, and two fields of the same name are an error.
class StackDataset {
 public:
  struct Part {
    template <detail::MapPart T>
    Part(std::string part_name, T part) : name(std::move(part_name)), dataset(std::move(part)) {}
    std::string name;  // empty: the fields keep their names
    detail::AnyMapDataset dataset;
  };

  // Either process. Throws std::invalid_argument for no parts, parts of different sizes
  // (naming both) or two parts of the same name.
  explicit StackDataset(std::vector<Part> parts);
  template <detail::MapPart... Ts>
  requires(sizeof...(Ts) > 0) explicit StackDataset(Ts... parts)
      : StackDataset(std::vector<Part>{Part("", std::move(parts))...}) {}

  std::size_t size() const noexcept { return size_; }
  // Throws std::out_of_range for i >= size(); stoker::Error when two parts give a field of the
  // same name.
  Sample get(std::size_t i);
  std::size_t num_parts() const noexcept { return parts_.size(); }
  // The parts' CachedDataset counters, summed (zeros when there are none).
  CacheStats cache_stats() const;

 private:
  std::vector<Part> parts_;
  std::size_t size_ = 0;
};

// TransformDataset: `dataset` with fn applied to each sample, fn(Sample) -> Sample, as libtorch's
// dataset.map(transform). fn runs where get() or next() runs (in the worker), and
// sample_rng() inside it is the generator of the sample being loaded. Map-style or iterable,
// as `dataset` is. (stoker::MapDataset is the name of the map-style concept, so the wrapper is
// TransformDataset; transform(ds, fn) builds one.)
template <class D, class F>
class TransformDataset {
  static_assert(MapDataset<D> || IterableDataset<D>,
                "stoker::transform(dataset, fn): dataset must be a map-style or iterable dataset");
  static_assert(std::is_invocable_r_v<Sample, F&, Sample>,
                "stoker::transform(dataset, fn): fn must take a stoker::Sample and return one");

 public:
  TransformDataset(D dataset, F fn)
      : TransformDataset(std::make_shared<D>(std::move(dataset)), std::move(fn)) {}
  TransformDataset(std::shared_ptr<D> dataset, F fn)
      : dataset_(std::move(dataset)), fn_(std::move(fn)) {}

  std::size_t size() const requires MapDataset<D> {
    return static_cast<std::size_t>(dataset_->size());
  }
  // Throws what the dataset's get() and fn throw.
  Sample get(std::size_t i) requires MapDataset<D> {
    return std::invoke(fn_, Sample(dataset_->get(i)));
  }
  std::optional<Sample> next() requires IterableDataset<D> {
    std::optional<Sample> sample = dataset_->next();
    if (!sample) return std::nullopt;
    return std::invoke(fn_, std::move(*sample));
  }
  void start_epoch(std::uint64_t epoch) requires RestartableDataset<D> {
    dataset_->start_epoch(epoch);
  }
  CacheStats cache_stats() const requires CacheReporting<D> { return dataset_->cache_stats(); }
  D& dataset() noexcept { return *dataset_; }
  const D& dataset() const noexcept { return *dataset_; }

 private:
  std::shared_ptr<D> dataset_;
  F fn_;
};

template <class D, class F>
TransformDataset(D, F) -> TransformDataset<D, F>;
template <class D, class F>
TransformDataset(std::shared_ptr<D>, F) -> TransformDataset<D, F>;

// transform(dataset, fn): TransformDataset(dataset, fn). `dataset` may be a shared_ptr.
template <class T, class F>
auto transform(T dataset, F fn) {
  return TransformDataset<detail::part_type_t<T>, F>(detail::share_part(std::move(dataset)),
                                                     std::move(fn));
}

}  // namespace stoker
