#include <fcntl.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "data/format.hpp"
#include "os/posix.hpp"
#include "ipc/ring.hpp"
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

struct FieldHead {
  std::uint32_t name_length;
  std::uint8_t dtype;
  std::uint8_t ndim;
  std::uint16_t reserved;
  std::uint64_t nbytes;
  std::uint64_t data_offset;  // from the entry's start
};
static_assert(sizeof(FieldHead) == 24);

std::size_t meta_bytes(const Sample& sample) {
  std::size_t n = 8;
  for (const auto& [name, t] : sample)
    n += sizeof(FieldHead) + 8 * t.dim() + round_up(name.size(), 8);
  return n;
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
  mapped_ = data_offset + round_up(budget_bytes, kPageSize);
  posix::Fd fd(posix::memfd("stoker-cache", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) {
    throw Error(posix::errno_message("CachedDataset: memfd_create failed", errno));
  }
  if (posix::truncate_fd(fd.get(), static_cast<off_t>(mapped_)) != 0) {
    throw Error(posix::errno_message(
        fmt::format("CachedDataset: sizing the cache to {} failed", format_bytes(mapped_)), errno));
  }
  (void)posix::add_seals(fd.get(), F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  void* base = posix::map_shared(fd.get(), mapped_);
  if (base == MAP_FAILED) {
    throw Error(posix::errno_message(
        fmt::format("CachedDataset: mapping {} for the cache failed", format_bytes(mapped_)),
        errno));
  }
  base_ = static_cast<std::byte*>(base);
  // A second, read-only mapping for the views find() hands out: a dataset that writes into a
  // cached sample then crashes at once (reported as a crash at that sample) instead of
  // silently corrupting the cache for every worker.
  void* read_only = ::mmap(nullptr, mapped_, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd.get(), 0);
  if (read_only == MAP_FAILED) {
    const int err = errno;
    ::munmap(base_, mapped_);
    base_ = nullptr;
    throw Error(posix::errno_message("CachedDataset: mapping the cache read-only failed", err));
  }
  read_only_ = static_cast<const std::byte*>(read_only);
  // The index (24 bytes a sample) is backed now: every process reads it on every get().
  if (posix::populate(base_, data_offset) != 0) {
    const int err = errno;
    ::munmap(base_, mapped_);
    ::munmap(const_cast<std::byte*>(read_only_), mapped_);
    base_ = nullptr;
    read_only_ = nullptr;
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

SampleCache::~SampleCache() {
  if (base_ != nullptr) ::munmap(base_, mapped_);
  if (read_only_ != nullptr) ::munmap(const_cast<std::byte*>(read_only_), mapped_);
}

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
  const std::byte* in = start;
  std::uint32_t n = 0;
  std::memcpy(&n, in, sizeof n);
  in += 8;
  Sample sample;
  for (std::uint32_t f = 0; f < n; ++f) {
    FieldHead head;
    std::memcpy(&head, in, sizeof head);
    in += sizeof head;
    std::int64_t dims[Shape::kMaxDims];
    std::memcpy(dims, in, 8 * head.ndim);
    in += 8 * head.ndim;
    const std::string name(reinterpret_cast<const char*>(in), head.name_length);
    in += round_up(head.name_length, 8);
    sample.set(name, Tensor::view(static_cast<DType>(head.dtype),
                                  Shape(std::span<const std::int64_t>(dims, head.ndim)),
                                  start + head.data_offset, self));
  }
  return sample;
}

void SampleCache::store(std::size_t i, const Sample& sample) noexcept {
  if (i >= num_samples_) return;
  CacheHeader& h = Impl::header(base_);
  Entry& e = Impl::entries(base_)[i];
  std::uint32_t expected = kEmpty;
  if (!e.state.compare_exchange_strong(expected, kWriting, std::memory_order_acq_rel)) return;
  std::size_t bytes = round_up(meta_bytes(sample), kCacheLine);
  for (const auto& [name, t] : sample) bytes += round_up(t.nbytes(), kCacheLine);
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
  const std::size_t first_page = reinterpret_cast<std::uintptr_t>(start) % kPageSize;
  if (posix::populate(start - first_page, bytes + first_page) != 0) {
    // Memory is short: the sample stays uncached rather than risk SIGBUS.
    e.state.store(kRejected, std::memory_order_release);
    h.rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::byte* out = start;
  const auto n = static_cast<std::uint32_t>(sample.size());
  std::memcpy(out, &n, sizeof n);
  out += 8;
  std::size_t data = round_up(meta_bytes(sample), kCacheLine);
  for (const auto& [name, t] : sample) {
    const FieldHead head{static_cast<std::uint32_t>(name.size()),
                         static_cast<std::uint8_t>(t.dtype()),
                         static_cast<std::uint8_t>(t.dim()),
                         0,
                         t.nbytes(),
                         data};
    std::memcpy(out, &head, sizeof head);
    out += sizeof head;
    std::memcpy(out, t.shape().begin(), 8 * t.dim());
    out += 8 * t.dim();
    std::memcpy(out, name.data(), name.size());
    out += round_up(name.size(), 8);
    if (t.nbytes() != 0) std::memcpy(start + data, t.raw_data(), t.nbytes());
    data += round_up(t.nbytes(), kCacheLine);
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
