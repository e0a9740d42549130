// CachedDataset: wraps a map-style dataset and keeps the samples it produces in a shared-memory
// cache that every worker sees, so a slow source (decoding, network storage) is paid once per
// sample and later epochs read at memory speed. The cache is created when the CachedDataset is
// (in the main process, before any worker is forked) and holds at most `budget_bytes`; once
// full, further samples are loaded from the source every time. Cached samples come back as
// views of the cache (no copy until the batch is collated).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "stoker/dataset.hpp"
#include "stoker/sample.hpp"

namespace stoker {

namespace detail {

// The non-template cache: a sealed memfd holding a header, one entry per dataset index, and
// the serialized samples. Any process may call any member; nothing in it is a lock.
class SampleCache {
 public:
  // Main process, before forking. Throws stoker::Error when the memory cannot be reserved.
  SampleCache(std::size_t num_samples, std::size_t budget_bytes);
  ~SampleCache();
  SampleCache(const SampleCache&) = delete;
  SampleCache& operator=(const SampleCache&) = delete;

  // The cached sample i, as views kept alive by `self`; nullopt on a miss. Counts the hit or
  // miss.
  std::optional<Sample> find(std::size_t i, const std::shared_ptr<const SampleCache>& self) const;
  // Stores sample i if nobody has and it fits in the budget. Never throws: a sample that
  // cannot be stored is simply not cached.
  void store(std::size_t i, const Sample& sample) noexcept;
  CacheStats stats() const noexcept;
  std::size_t size() const noexcept { return num_samples_; }

 private:
  struct Impl;
  std::shared_ptr<void> region_;          // owns the shared memory (src/ipc/shared_region.hpp)
  std::byte* base_ = nullptr;             // read-write: the index and store()
  const std::byte* read_only_ = nullptr;  // the same memory, read-only: find()'s views
  std::size_t num_samples_ = 0;
};

}  // namespace detail

template <MapDataset D>
class CachedDataset {
 public:
  using source_dataset = D;  // CachingDataset: the memory probe measures the source
  // Main process (the cache must exist before workers fork). `budget_bytes` bounds the cached
  // samples' bytes (address space is reserved for it; memory is used as samples arrive).
  CachedDataset(D dataset, std::size_t budget_bytes)
      : inner_(std::move(dataset)),
        cache_(std::make_shared<detail::SampleCache>(static_cast<std::size_t>(inner_.size()),
                                                     budget_bytes)) {}

  std::size_t size() const { return cache_->size(); }
  // Either process: the cached sample, or the source's (then cached, if it fits).
  Sample get(std::size_t i) {
    if (std::optional<Sample> hit = cache_->find(i, cache_)) return std::move(*hit);
    Sample sample = inner_.get(i);
    cache_->store(i, sample);
    return sample;
  }
  // Counts over every process that uses the cache.
  CacheStats cache_stats() const noexcept { return cache_->stats(); }
  D& source() noexcept { return inner_; }

 private:
  D inner_;
  std::shared_ptr<detail::SampleCache> cache_;
};

}  // namespace stoker
