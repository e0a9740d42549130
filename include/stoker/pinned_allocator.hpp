// PinnedAllocator: a caching allocator of page-locked (pinned) host memory, for batches that are
// copied to a GPU. The GPU's DMA engine reads pinned memory directly; from pageable memory the
// CUDA driver first copies through a small pinned buffer of its own, at a fraction of the speed.
//
// Where the memory comes from: with a CUDA runtime found at run time (dlopen of libcudart; stoker
// is never linked against CUDA) and at least one device, cudaHostAlloc; otherwise mmap + mlock.
// Pinned memory cannot be swapped or over-committed, so the allocator keeps to a byte budget
// (default: under RLIMIT_MEMLOCK for mlock, and at most half the memory available when it is
// created) and throws PinnedMemoryError, naming the numbers and the fixes, past it.
//
// Blocks are rounded up to a size class (four per power of two, whole pages) and cached when
// freed, so a training loop that asks for the same sizes every step allocates only at its
// start. Thread-safe. A block keeps its pool alive: it may outlive the allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "stoker/errors.hpp"

namespace stoker {

enum class PinnedBackend : std::uint8_t {
  kCuda,   // cudaHostAlloc / cudaHostRegister
  kMlock,  // mmap + mlock / mlock of the range
};

const char* to_string(PinnedBackend backend) noexcept;

// Thrown when pinning would pass the budget or the system refuses to lock more memory.
class PinnedMemoryError : public Error {
 public:
  PinnedMemoryError(std::string message, std::size_t requested, std::size_t budget,
                    std::size_t in_use)
      : Error(std::move(message)), requested_(requested), budget_(budget), in_use_(in_use) {}
  std::size_t requested() const noexcept { return requested_; }
  std::size_t budget() const noexcept { return budget_; }
  std::size_t in_use() const noexcept { return in_use_; }

 private:
  std::size_t requested_;
  std::size_t budget_;
  std::size_t in_use_;
};

struct PinnedStats {
  PinnedBackend backend = PinnedBackend::kMlock;
  std::size_t budget_bytes = 0;
  std::size_t in_use_bytes = 0;     // handed out (block capacities), and registered ranges
  std::size_t cached_bytes = 0;     // freed blocks kept for reuse (pinned, counted in budget)
  std::size_t peak_bytes = 0;       // highest in_use + cached
  std::uint64_t allocations = 0;    // allocate() calls
  std::uint64_t cache_hits = 0;     // served from a cached block
  std::uint64_t cache_misses = 0;   // a new block pinned
  std::uint64_t registrations = 0;  // ranges pinned with pin_range()
};

struct PinnedOptions {
  // Bytes the allocator may hold pinned (in use + cached). Empty: the default above.
  std::optional<std::size_t> budget_bytes;
  // false: never look for CUDA; mmap + mlock only.
  bool use_cuda = true;
};

namespace detail {
class PinnedPool;
}

// A pinned block: move-only; returns to its pool's cache when destroyed.
class PinnedBlock {
 public:
  PinnedBlock() = default;
  PinnedBlock(PinnedBlock&& other) noexcept;
  PinnedBlock& operator=(PinnedBlock&& other) noexcept;
  PinnedBlock(const PinnedBlock&) = delete;
  PinnedBlock& operator=(const PinnedBlock&) = delete;
  ~PinnedBlock();

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }          // as asked for
  std::size_t capacity() const noexcept { return capacity_; }  // its size class
  explicit operator bool() const noexcept { return data_ != nullptr; }

 private:
  friend class detail::PinnedPool;
  PinnedBlock(std::shared_ptr<detail::PinnedPool> pool, std::byte* data, std::size_t size,
              std::size_t capacity) noexcept
      : pool_(std::move(pool)), data_(data), size_(size), capacity_(capacity) {}
  std::shared_ptr<detail::PinnedPool> pool_;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

// Existing memory made page-locked for the object's lifetime (cudaHostRegister, or mlock),
// counted in its allocator's budget. Move-only.
class PinnedRange {
 public:
  PinnedRange() = default;
  PinnedRange(PinnedRange&& other) noexcept;
  PinnedRange& operator=(PinnedRange&& other) noexcept;
  PinnedRange(const PinnedRange&) = delete;
  PinnedRange& operator=(const PinnedRange&) = delete;
  ~PinnedRange();

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  explicit operator bool() const noexcept { return data_ != nullptr; }

 private:
  friend class detail::PinnedPool;
  PinnedRange(std::shared_ptr<detail::PinnedPool> pool, void* data, std::size_t size) noexcept
      : pool_(std::move(pool)), data_(data), size_(size) {}
  std::shared_ptr<detail::PinnedPool> pool_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

class PinnedAllocator {
 public:
  // Chooses the backend now: the CUDA runtime named by STOKER_CUDART (read at each
  // construction; a path, or "none") or found on the library path, when it sees a device;
  // otherwise mmap + mlock.
  explicit PinnedAllocator(PinnedOptions options = {});
  ~PinnedAllocator();
  PinnedAllocator(const PinnedAllocator&) = delete;
  PinnedAllocator& operator=(const PinnedAllocator&) = delete;

  // A block of at least `bytes` (> 0). Throws PinnedMemoryError past the budget (after freeing
  // cached blocks of other sizes), or when the system refuses to lock the memory.
  PinnedBlock allocate(std::size_t bytes);
  // Pins [data, data + bytes) in place; `data` and `bytes` must be page-aligned. Throws
  // PinnedMemoryError like allocate(), std::invalid_argument for an unaligned range.
  PinnedRange pin_range(void* data, std::size_t bytes);
  // Unpins and frees every cached block.
  void release_cached() noexcept;

  PinnedStats stats() const;
  PinnedBackend backend() const noexcept;
  std::size_t budget() const noexcept;
  // Why the backend is what it is: the CUDA runtime found (path, devices), or why none was.
  std::string backend_reason() const;

  // The size class a request of `bytes` is rounded up to.
  static std::size_t size_class(std::size_t bytes) noexcept;

  // The process's shared allocator (default options), made at first use. Loaders with
  // pin_memory use it unless given their own.
  static std::shared_ptr<PinnedAllocator> global();

 private:
  std::shared_ptr<detail::PinnedPool> pool_;
};

}  // namespace stoker
