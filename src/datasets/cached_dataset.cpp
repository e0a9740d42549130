// CachedDataset's shared cache (cached_dataset.hpp): a SharedRegion holding a header, one entry
// per dataset index and the stored samples, each a field table and its fields.
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "data/format.hpp"
#include "ipc/field_codec.hpp"
#include "ipc/ring.hpp"
#include "ipc/shared_region.hpp"
#include "os/posix.hpp"
#include "stoker/cached_dataset.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {
namespace {

constexpr std::uint64_t kCacheMagic = 0x4548434143524b53ULL;  // "SKRCACHE"
constexpr std::uint32_t kCacheVersion = 1;

enum : std::uint32_t { kEmpty = 0, kWriting = 1, kReady = 2, kRejected = 3 };

// Shared by every process that uses the cache. Counters are relaxed: they are statistics.
struct CacheHeader {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t reserved;
  std::uint64_t num_samples;
  std::uint64_t budget;
  std::uint64_t data_offset;                            // from the region's start
  alignas(kCacheLine) std::atomic<std::uint64_t> used;  // bytes of the data area handed out
  alignas(kCacheLine) std::atomic<std::uint64_t> hits;
  std::atomic<std::uint64_t> misses;
  std::atomic<std::uint64_t> entries;
  std::atomic<std::uint64_t> rejected;
};

// One per dataset index. `state` goes kEmpty -> kWriting (the process that wins the CAS) ->
// kReady (release, after the sample and offset/bytes are written; readers acquire) or
// kRejected. A writer that dies leaves kWriting: that sample is then never cached.
struct Entry {
  std::atomic<std::uint32_t> state;
  std::uint32_t reserved;
  std::uint64_t offset;  // in the data area
  std::uint64_t bytes;
};
static_assert(sizeof(Entry) == 24);

// A stored sample, at its entry's offset in the data area: its field table (field_codec.hpp),
// then each field's bytes kFieldAlignment-aligned, at offsets from the entry's start.
std::vector<FieldRecord> records_of(const Sample& sample, std::vector<std::uint64_t>& offsets) {
  std::vector<FieldRecord> records;
  records.reserve(sample.size());
  for (const auto& [name, t] : sample) {
    records.push_back({name, t.dtype(), std::span<const std::int64_t>(t.shape().begin(), t.dim()),
                       0, t.nbytes()});
  }
  offsets.clear();
  place_fields(field_table_bytes(records), sample.fields(), offsets);
  for (std::size_t f = 0; f < records.size(); ++f) records[f].offset = offsets[f];
  return records;
}

}  // namespace

struct SampleCache::Impl {
  static CacheHeader& header(std::byte* base) { return *reinterpret_cast<CacheHeader*>(base); }
  static Entry* entries(std::byte* base) {
    return reinterpret_cast<Entry*>(base + round_up(sizeof(CacheHeader), kCacheLine));
  }
};

SampleCache::SampleCache(std::size_t num_samples, std::size_t budget_bytes)
    : num_samples_(num_samples) {
  const std::size_t table = round_up(sizeof(CacheHeader), kCacheLine) + num_samples * sizeof(Entry);
  const std::size_t data_offset = round_up(table, kPageSize);
  // A second, read-only mapping for the views find() hands out: a dataset that writes into a
  // cached sample then crashes at once (reported as a crash at that sample) instead of
  // silently corrupting the cache for every worker.
  auto region = std::make_shared<SharedRegion>(
      "stoker-cache", data_offset + round_up(budget_bytes, kPageSize),
      "CachedDataset: the sample cache", "; lower the cache's budget_bytes", true);
  base_ = region->data();
  read_only_ = region->read_only();
  region_ = std::move(region);
  // The index (24 bytes a sample) is backed now: every process reads it on every get().
  if (const int err = SharedRegion::populate(base_, data_offset); err != 0) {
    throw Error(posix::errno_message(
        fmt::format("CachedDataset: cannot back the cache's index of {} samples ({})", num_samples,
                    format_bytes(data_offset)),
        err));
  }
  CacheHeader* h = new (base_) CacheHeader();
  h->magic = kCacheMagic;
  h->version = kCacheVersion;
  h->num_samples = num_samples;
  h->budget = budget_bytes;
  h->data_offset = data_offset;
  Entry* e = Impl::entries(base_);
  for (std::size_t i = 0; i < num_samples; ++i) new (&e[i]) Entry();
}

SampleCache::~SampleCache() = default;

std::optional<Sample> SampleCache::find(std::size_t i,
                                        const std::shared_ptr<const SampleCache>& self) const {
  CacheHeader& h = Impl::header(base_);
  if (i >= num_samples_ ||
      Impl::entries(base_)[i].state.load(std::memory_order_acquire) != kReady) {
    h.misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  h.hits.fetch_add(1, std::memory_order_relaxed);
  const Entry& e = Impl::entries(base_)[i];
  // Read-only memory (see the constructor): the views must not be written to.
  auto* start = const_cast<std::byte*>(read_only_ + h.data_offset + e.offset);
  try {
    std::vector<Field> fields = read_field_table(start, e.bytes, start, e.bytes, self);
    Sample sample;
    for (Field& field : fields) sample.set(field.name, std::move(field.tensor));
    return sample;
  } catch (const FieldTableError& error) {
    throw Error(fmt::format(
        "CachedDataset: the cached sample {} is malformed ({}); something wrote over the cache, "
        "most likely memory corruption in user code",
        i, error.what()));
  }
}

void SampleCache::store(std::size_t i, const Sample& sample) noexcept {
  if (i >= num_samples_) return;
  CacheHeader& h = Impl::header(base_);
  Entry& e = Impl::entries(base_)[i];
  std::uint32_t expected = kEmpty;
  if (!e.state.compare_exchange_strong(expected, kWriting, std::memory_order_acq_rel)) return;
  std::vector<std::uint64_t> offsets;
  std::vector<FieldRecord> records;
  std::size_t bytes = 0;
  try {
    records = records_of(sample, offsets);
    bytes = round_up(offsets.empty() ? field_table_bytes(records)
                                     : offsets.back() + sample.fields().back().tensor.nbytes(),
                     kCacheLine);
  } catch (...) {  // out of memory: leave it uncached
    e.state.store(kRejected, std::memory_order_release);
    h.rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // Reserve [offset, offset + bytes) of the data area, unless it would pass the budget.
  std::uint64_t offset = h.used.load(std::memory_order_relaxed);
  do {
    if (offset + bytes > h.budget) {
      e.state.store(kRejected, std::memory_order_release);
      h.rejected.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  } while (!h.used.compare_exchange_weak(offset, offset + bytes, std::memory_order_relaxed));
  std::byte* start = base_ + h.data_offset + offset;
  if (SharedRegion::populate(start, bytes) != 0) {
    // Memory is short: the sample stays uncached rather than risk SIGBUS.
    e.state.store(kRejected, std::memory_order_release);
    h.rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  write_field_table(start, records);
  for (std::size_t f = 0; f < records.size(); ++f) {
    const Tensor& t = sample.fields()[f].tensor;
    if (t.nbytes() != 0) std::memcpy(start + offsets[f], t.raw_data(), t.nbytes());
  }
  e.offset = offset;
  e.bytes = bytes;
  e.state.store(kReady, std::memory_order_release);
  h.entries.fetch_add(1, std::memory_order_relaxed);
}

CacheStats SampleCache::stats() const noexcept {
  const CacheHeader& h = Impl::header(base_);
  CacheStats s;
  s.hits = h.hits.load(std::memory_order_relaxed);
  s.misses = h.misses.load(std::memory_order_relaxed);
  s.entries = h.entries.load(std::memory_order_relaxed);
  s.bytes_used = std::min(h.used.load(std::memory_order_relaxed), h.budget);
  s.budget_bytes = h.budget;
  s.rejected = h.rejected.load(std::memory_order_relaxed);
  return s;
}

}  // namespace stoker::detail
