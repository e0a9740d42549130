#include "stoker/pinned_allocator.hpp"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "data/format.hpp"
#include "os/cuda_runtime.hpp"
#include "os/posix.hpp"

namespace stoker {

const char* to_string(PinnedBackend backend) noexcept {
  return backend == PinnedBackend::kCuda ? "cuda" : "mlock";
}

namespace detail {
namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kMaxPinnedBytes = std::size_t{1} << 48;  // no size-class arithmetic wraps

std::optional<std::uint64_t> meminfo_available() {
  std::string text;
  if (!posix::read_file("/proc/meminfo", text)) return std::nullopt;
  const std::size_t at = text.find("MemAvailable:");
  if (at == std::string::npos) return std::nullopt;
  return std::strtoull(text.c_str() + at + 13, nullptr, 10) * 1024;
}

// Whether this process may lock memory past RLIMIT_MEMLOCK (CAP_IPC_LOCK, bit 14). Inside a
// user namespace (rootless containers) the capability shows but the kernel checks it against
// the initial namespace, so it does not count there.
bool has_ipc_lock() {
  std::string text;
  if (posix::read_file("/proc/self/uid_map", text) &&
      text.find("4294967295") == std::string::npos) {
    return false;  // not the initial user namespace, whose map covers every id
  }
  if (!posix::read_file("/proc/self/status", text)) return false;
  const std::size_t at = text.find("CapEff:");
  if (at == std::string::npos) return false;
  const unsigned long long caps = std::strtoull(text.c_str() + at + 7, nullptr, 16);
  return (caps >> 14) & 1U;
}

// RLIMIT_MEMLOCK's soft limit; empty when unlimited.
std::optional<std::uint64_t> memlock_limit() { return posix::soft_limit(RLIMIT_MEMLOCK); }

std::string memlock_text() {
  const std::optional<std::uint64_t> limit = memlock_limit();
  return limit ? format_bytes(*limit) : std::string("unlimited");
}

// mlock(2) and munlock(2) by system call (posix::lock_memory): sanitizer runtimes replace the
// libc functions with ones that do nothing, and the allocator's accounting and errors must stay
// real under them.
int lock_pages(void* p, std::size_t bytes) noexcept { return posix::lock_memory(p, bytes); }
int unlock_pages(void* p, std::size_t bytes) noexcept { return posix::unlock_memory(p, bytes); }

constexpr const char* kFixes =
    "raise the limit (`ulimit -l unlimited` in the shell that starts training, `docker run "
    "--ulimit memlock=-1`, or LimitMEMLOCK=infinity in a systemd unit), give "
    "PinnedOptions::budget_bytes, lower batch_size, or set pin_memory = false";

}  // namespace

class PinnedPool : public std::enable_shared_from_this<PinnedPool> {
 public:
  explicit PinnedPool(const PinnedOptions& options) {
    if (options.use_cuda) {
      CudaLookup lookup = find_cuda_runtime();
      cuda_ = lookup.runtime;
      reason_ = std::move(lookup.status);
    } else {
      reason_ = "CUDA not used (PinnedOptions::use_cuda)";
    }
    backend_ = cuda_ != nullptr ? PinnedBackend::kCuda : PinnedBackend::kMlock;
    if (options.budget_bytes) {
      budget_ = *options.budget_bytes;
      budget_source_ = "PinnedOptions::budget_bytes";
      return;
    }
    const std::optional<std::uint64_t> available = meminfo_available();
    budget_ = available ? static_cast<std::size_t>(*available / 2) : std::size_t{1} << 30;
    budget_source_ = available ? "half of MemAvailable" : "1 GiB (MemAvailable unknown)";
    const std::optional<std::uint64_t> limit = memlock_limit();
    if (backend_ == PinnedBackend::kMlock && limit && !has_ipc_lock() && *limit < budget_) {
      budget_ = static_cast<std::size_t>(*limit);
      budget_source_ = "RLIMIT_MEMLOCK";
    }
  }

  ~PinnedPool() { release_cached(); }

  PinnedBackend backend() const noexcept { return backend_; }
  std::size_t budget() const noexcept { return budget_; }
  const std::string& reason() const noexcept { return reason_; }

  PinnedBlock allocate(std::size_t bytes) {
    if (bytes == 0 || bytes > kMaxPinnedBytes) {
      throw std::invalid_argument(fmt::format(
          "PinnedAllocator::allocate: {} bytes asked for; it must be 1 .. 2^48", bytes));
    }
    const std::size_t capacity = PinnedAllocator::size_class(bytes);
    std::unique_lock<std::mutex> lock(mutex_);
    ++stats_.allocations;
    auto it = cache_.find(capacity);
    if (it != cache_.end() && !it->second.empty()) {
      std::byte* p = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= capacity;
      stats_.in_use_bytes += capacity;
      ++stats_.cache_hits;
      return PinnedBlock(shared_from_this(), p, bytes, capacity);
    }
    ++stats_.cache_misses;
    make_room(capacity, "a pinned block of");
    std::byte* p = pin_new(capacity);
    stats_.in_use_bytes += capacity;
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.in_use_bytes + stats_.cached_bytes);
    return PinnedBlock(shared_from_this(), p, bytes, capacity);
  }

  void give_back(std::byte* p, std::size_t capacity) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    stats_.in_use_bytes -= capacity;
    try {
      cache_[capacity].push_back(p);
      stats_.cached_bytes += capacity;
    } catch (...) {
      unpin_free(p, capacity);
    }
  }

  PinnedRange pin_range(void* data, std::size_t bytes) {
    const auto address = reinterpret_cast<std::uintptr_t>(data);
    if (data == nullptr || bytes == 0 || bytes > kMaxPinnedBytes || address % kPage != 0 ||
        bytes % kPage != 0) {
      throw std::invalid_argument(
          fmt::format("PinnedAllocator::pin_range: the range ({}, {} bytes) must be non-empty and "
                      "page-aligned ({} bytes), at most 2^48 bytes",
                      data, bytes, kPage));
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    make_room(bytes, "a range of");
    if (cuda_ != nullptr) {
      const int rc = cuda_->host_register(data, bytes, kCudaHostRegisterPortable);
      if (rc != 0) {
        throw PinnedMemoryError(
            fmt::format("PinnedAllocator: cudaHostRegister of {} failed: {}; {}",
                        format_bytes(bytes), cuda_->error(rc), kFixes),
            bytes, budget_, stats_.in_use_bytes + stats_.cached_bytes);
      }
      // The driver marks registered ranges MADV_DONTFORK; a ring's workers are forked after
      // its slots are pinned (respawns, replacements) and must still see every slot.
      if (posix::advise(data, bytes, MADV_DOFORK) != 0) {
        const int err = errno;
        cuda_->host_unregister(data);
        throw PinnedMemoryError(
            posix::errno_message(
                fmt::format("PinnedAllocator: after cudaHostRegister of {}, madvise(MADV_DOFORK) "
                            "failed, so processes forked later would not see the range",
                            format_bytes(bytes)),
                err),
            bytes, budget_, stats_.in_use_bytes + stats_.cached_bytes);
      }
    } else if (lock_pages(data, bytes) != 0) {
      throw_lock_failed(bytes, errno);
    }
    stats_.in_use_bytes += bytes;
    ++stats_.registrations;
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.in_use_bytes + stats_.cached_bytes);
    return PinnedRange(shared_from_this(), data, bytes);
  }

  void unpin_range(void* data, std::size_t bytes) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (cuda_ != nullptr) {
      cuda_->host_unregister(data);
    } else {
      unlock_pages(data, bytes);
    }
    stats_.in_use_bytes -= bytes;
  }

  void release_cached() noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked(0);
  }

  PinnedStats stats() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    PinnedStats s = stats_;
    s.backend = backend_;
    s.budget_bytes = budget_;
    return s;
  }

 private:
  // Frees cached blocks (largest first) until `needed` more bytes fit the budget, or throws.
  void make_room(std::size_t needed, const char* what) {
    const std::size_t held = stats_.in_use_bytes + stats_.cached_bytes;
    if (held + needed <= budget_) return;
    release_cached_locked(held + needed - budget_);
    const std::size_t now = stats_.in_use_bytes + stats_.cached_bytes;
    if (now + needed <= budget_) return;
    throw PinnedMemoryError(
        fmt::format("PinnedAllocator: pinning {} {} would pass the budget of {} (set by {}; {} "
                    "pinned in use, {} cached; backend {}, RLIMIT_MEMLOCK {}). To fix: {}",
                    what, format_bytes(needed), format_bytes(budget_), budget_source_,
                    format_bytes(stats_.in_use_bytes), format_bytes(stats_.cached_bytes),
                    to_string(backend_), memlock_text(), kFixes),
        needed, budget_, now);
  }

  // Frees cached blocks, largest first, until at least `bytes` are freed (0: all of them).
  void release_cached_locked(std::size_t bytes) noexcept {
    std::size_t freed = 0;
    for (auto it = cache_.rbegin(); it != cache_.rend(); ++it) {
      while (!it->second.empty() && (bytes == 0 || freed < bytes)) {
        unpin_free(it->second.back(), it->first);
        it->second.pop_back();
        stats_.cached_bytes -= it->first;
        freed += it->first;
      }
    }
  }

  std::byte* pin_new(std::size_t capacity) {
    if (cuda_ != nullptr) {
      void* p = nullptr;
      const int rc = cuda_->host_alloc(&p, capacity, kCudaHostAllocPortable);
      if (rc != 0 || p == nullptr) {
        throw PinnedMemoryError(fmt::format("PinnedAllocator: cudaHostAlloc of {} failed: {}; {}",
                                            format_bytes(capacity), cuda_->error(rc), kFixes),
                                capacity, budget_, stats_.in_use_bytes + stats_.cached_bytes);
      }
      return static_cast<std::byte*>(p);
    }
    void* p = posix::map_anonymous(capacity);
    if (p == MAP_FAILED) {
      throw PinnedMemoryError(
          posix::errno_message(
              fmt::format("PinnedAllocator: mapping {} failed", format_bytes(capacity)), errno),
          capacity, budget_, stats_.in_use_bytes + stats_.cached_bytes);
    }
    // Workers forked later need none of the staging blocks: not copying them keeps fork()
    // cheap, and the parent's pinned pages from turning copy-on-write.
    (void)posix::advise(p, capacity, MADV_DONTFORK);
    if (lock_pages(p, capacity) != 0) {
      const int err = errno;
      posix::unmap(p, capacity);
      throw_lock_failed(capacity, err);
    }
    return static_cast<std::byte*>(p);
  }

  [[noreturn]] void throw_lock_failed(std::size_t bytes, int err) const {
    throw PinnedMemoryError(
        fmt::format("PinnedAllocator: mlock of {} failed ({}): the system refused to lock more "
                    "memory ({} locked by this allocator, RLIMIT_MEMLOCK {}{}). To fix: {}",
                    format_bytes(bytes), std::strerror(err),
                    format_bytes(stats_.in_use_bytes + stats_.cached_bytes), memlock_text(),
                    has_ipc_lock() ? "" : ", no CAP_IPC_LOCK", kFixes),
        bytes, budget_, stats_.in_use_bytes + stats_.cached_bytes);
  }

  void unpin_free(std::byte* p, std::size_t capacity) noexcept {
    if (cuda_ != nullptr) {
      cuda_->free_host(p);
    } else {
      posix::unmap(p, capacity);  // unlocks too
    }
  }

  mutable std::mutex mutex_;
  const CudaRuntime* cuda_ = nullptr;
  PinnedBackend backend_ = PinnedBackend::kMlock;
  std::string reason_;
  std::size_t budget_ = 0;
  std::string budget_source_;
  std::map<std::size_t, std::vector<std::byte*>> cache_;  // size class -> free blocks
  PinnedStats stats_;
};

}  // namespace detail

// ---- PinnedBlock / PinnedRange ----

PinnedBlock::PinnedBlock(PinnedBlock&& other) noexcept
    : pool_(std::move(other.pool_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)) {}

PinnedBlock& PinnedBlock::operator=(PinnedBlock&& other) noexcept {
  if (this != &other) {
    PinnedBlock old(std::move(*this));
    pool_ = std::move(other.pool_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

PinnedBlock::~PinnedBlock() {
  if (pool_ && data_ != nullptr) pool_->give_back(data_, capacity_);
}

PinnedRange::PinnedRange(PinnedRange&& other) noexcept
    : pool_(std::move(other.pool_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

PinnedRange& PinnedRange::operator=(PinnedRange&& other) noexcept {
  if (this != &other) {
    PinnedRange old(std::move(*this));
    pool_ = std::move(other.pool_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

PinnedRange::~PinnedRange() {
  if (pool_ && data_ != nullptr) pool_->unpin_range(data_, size_);
}

// ---- PinnedAllocator ----

PinnedAllocator::PinnedAllocator(PinnedOptions options)
    : pool_(std::make_shared<detail::PinnedPool>(options)) {}

PinnedAllocator::~PinnedAllocator() = default;

PinnedBlock PinnedAllocator::allocate(std::size_t bytes) { return pool_->allocate(bytes); }

PinnedRange PinnedAllocator::pin_range(void* data, std::size_t bytes) {
  return pool_->pin_range(data, bytes);
}

void PinnedAllocator::release_cached() noexcept { pool_->release_cached(); }
PinnedStats PinnedAllocator::stats() const { return pool_->stats(); }
PinnedBackend PinnedAllocator::backend() const noexcept { return pool_->backend(); }
std::size_t PinnedAllocator::budget() const noexcept { return pool_->budget(); }
std::string PinnedAllocator::backend_reason() const { return pool_->reason(); }

std::size_t PinnedAllocator::size_class(std::size_t bytes) noexcept {
  if (bytes <= detail::kPage) return detail::kPage;
  // Four classes per power of two: at most 25% (and a page) more than asked for.
  const std::size_t top = std::bit_floor(bytes);
  const std::size_t step = std::max(detail::kPage, top / 4);
  return (bytes + step - 1) / step * step;
}

std::shared_ptr<PinnedAllocator> PinnedAllocator::global() {
  static const std::shared_ptr<PinnedAllocator> allocator = std::make_shared<PinnedAllocator>();
  return allocator;
}

}  // namespace stoker
