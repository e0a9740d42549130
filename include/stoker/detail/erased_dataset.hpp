// The type erasure behind the composed datasets that hold parts of different types
// (ConcatDataset, ChainDataset, StackDataset, MixtureDataset): a map-style or iterable dataset
// behind a small virtual interface, shared through std::shared_ptr. Templates force it into a
// header; it is not part of the API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "stoker/cached_dataset.hpp"
#include "stoker/dataset.hpp"
#include "stoker/sample.hpp"

namespace stoker::detail {

template <class T>
struct is_shared_ptr : std::false_type {};
template <class T>
struct is_shared_ptr<std::shared_ptr<T>> : std::true_type {};

// What a composed dataset accepts as a part: the dataset itself (moved in) or a shared_ptr to
// one (shared with whoever else holds it).
template <class T>
struct part_type {
  using type = T;
};
template <class T>
struct part_type<std::shared_ptr<T>> {
  using type = T;
};
template <class T>
using part_type_t = typename part_type<std::remove_cvref_t<T>>::type;

template <class T>
concept MapPart = MapDataset<part_type_t<T>>;
template <class T>
concept IterablePart = IterableDataset<part_type_t<T>>;

template <class T>
std::shared_ptr<part_type_t<T>> share_part(T&& part) {
  if constexpr (is_shared_ptr<std::remove_cvref_t<T>>::value) {
    return std::forward<T>(part);
  } else {
    return std::make_shared<part_type_t<T>>(std::forward<T>(part));
  }
}

// The sum of two caches' counters (a composed dataset reports the caches of all its parts).
inline CacheStats add_cache_stats(CacheStats a, const CacheStats& b) noexcept {
  a.hits += b.hits;
  a.misses += b.misses;
  a.entries += b.entries;
  a.bytes_used += b.bytes_used;
  a.budget_bytes += b.budget_bytes;
  a.rejected += b.rejected;
  return a;
}

class AnyMapDataset {
 public:
  template <MapPart T>
  requires(!std::is_same_v<std::remove_cvref_t<T>, AnyMapDataset>) explicit AnyMapDataset(T&& part)
      : impl_(std::make_shared<Model<part_type_t<T>>>(share_part(std::forward<T>(part)))) {}

  std::size_t size() const { return impl_->size(); }
  Sample get(std::size_t index) { return impl_->get(index); }
  std::optional<CacheStats> cache_stats() const { return impl_->cache_stats(); }

 private:
  struct Interface {
    virtual ~Interface() = default;
    virtual std::size_t size() const = 0;
    virtual Sample get(std::size_t index) = 0;
    virtual std::optional<CacheStats> cache_stats() const = 0;
  };
  template <class D>
  struct Model final : Interface {
    explicit Model(std::shared_ptr<D> d) : dataset(std::move(d)) {}
    std::size_t size() const override { return static_cast<std::size_t>(dataset->size()); }
    Sample get(std::size_t index) override { return Sample(dataset->get(index)); }
    std::optional<CacheStats> cache_stats() const override {
      if constexpr (CacheReporting<D>) {
        return dataset->cache_stats();
      } else {
        return std::nullopt;
      }
    }
    std::shared_ptr<D> dataset;
  };
  std::shared_ptr<Interface> impl_;
};

class AnyIterableDataset {
 public:
  template <IterablePart T>
  requires(!std::is_same_v<std::remove_cvref_t<T>, AnyIterableDataset>) explicit AnyIterableDataset(
      T&& part)
      : impl_(std::make_shared<Model<part_type_t<T>>>(share_part(std::forward<T>(part)))) {}

  std::optional<Sample> next() { return impl_->next(); }
  // Calls the part's start_epoch(); a part without one carries on where it stopped.
  void start_epoch(std::uint64_t epoch) { impl_->start_epoch(epoch); }

 private:
  struct Interface {
    virtual ~Interface() = default;
    virtual std::optional<Sample> next() = 0;
    virtual void start_epoch(std::uint64_t epoch) = 0;
  };
  template <class D>
  struct Model final : Interface {
    explicit Model(std::shared_ptr<D> d) : dataset(std::move(d)) {}
    std::optional<Sample> next() override { return dataset->next(); }
    void start_epoch(std::uint64_t epoch) override {
      if constexpr (RestartableDataset<D>) dataset->start_epoch(epoch);
    }
    std::shared_ptr<D> dataset;
  };
  std::shared_ptr<Interface> impl_;
};

// The parts of a composed dataset, each behind the interface Any (AnyMapDataset or
// AnyIterableDataset): from the constructor's arguments, or from a vector of one type.
template <class Any, class... Ts>
std::vector<Any> erase_each(Ts... parts) {
  std::vector<Any> erased;
  erased.reserve(sizeof...(Ts));
  (erased.emplace_back(std::move(parts)), ...);
  return erased;
}
template <class Any, class T>
std::vector<Any> erase_vector(std::vector<T> parts) {
  std::vector<Any> erased;
  erased.reserve(parts.size());
  for (T& part : parts) erased.emplace_back(std::move(part));
  return erased;
}

// The cache counters of every part that has a CachedDataset, summed; `dataset_of(part)` is the
// part's AnyMapDataset.
template <class Parts, class DatasetOf>
CacheStats sum_cache_stats(const Parts& parts, DatasetOf dataset_of) {
  CacheStats total;
  for (const auto& part : parts) {
    if (const std::optional<CacheStats> stats = dataset_of(part).cache_stats()) {
      total = add_cache_stats(total, *stats);
    }
  }
  return total;
}

// Whether the parts of a composed dataset give samples with the same fields (names and
// dtypes; shapes may differ, for a ragged collate). Each process compares the first sample it
// loads from each part with the first sample it loaded at all: a check per part, then one
// flag test per sample.
class FieldCheck {
 public:
  // `owner` names the composed dataset in errors ("ConcatDataset"); `part_names` its parts
  // ("part 1", or the names a user gave).
  FieldCheck() = default;
  FieldCheck(std::string owner, std::vector<std::string> part_names);
  // Throws stoker::Error naming both parts and the field that differs.
  void check(std::size_t part, const Sample& sample) {
    if (!checked_[part]) check_first(part, sample);
  }

 private:
  void check_first(std::size_t part, const Sample& sample);

  std::string owner_;
  std::vector<std::string> part_names_;
  std::vector<bool> checked_;
  std::vector<std::pair<std::string, DType>> reference_;  // the first sample's fields
  std::size_t reference_part_ = 0;
  bool has_reference_ = false;
};

// "part 0", "part 1", ... (or another word): the names of unnamed parts.
std::vector<std::string> numbered_parts(std::size_t count, std::string_view word = "part");

}  // namespace stoker::detail
