#include "data/buffer_cache.hpp"

#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <new>
#include <vector>

#include "data/spin.hpp"

namespace stoker::detail {
namespace {

constexpr std::align_val_t kAlign{64};

// Size classes: four per doubling above kMinCachedBytes, so a block is at most 25% larger than
// asked for and nearby sizes share blocks.
std::size_t size_class(std::size_t bytes) noexcept {
  if (bytes < kMinCachedBytes) return bytes;
  const std::size_t shift = std::bit_width(bytes) - 3;  // a quarter of the power of two below
  const std::size_t step = std::size_t{1} << shift;
  return (bytes + step - 1) / step * step;
}

struct Cache {
  // A spin lock rather than a mutex: it is held for a few instructions, and a child re-arms it
  // after fork() with one store (reset_buffer_cache_after_fork).
  std::atomic<bool> locked{false};
  std::vector<std::pair<std::size_t, void*>> blocks;  // (size class, block), oldest first
  std::size_t bytes = 0;

  void lock() noexcept {
    while (locked.exchange(true, std::memory_order_acquire)) {
      while (locked.load(std::memory_order_relaxed)) cpu_relax();
    }
  }
  void unlock() noexcept { locked.store(false, std::memory_order_release); }
};

Cache& cache() {
  static Cache* instance = new Cache();  // never destroyed: blocks may be freed at exit
  return *instance;
}

void* take(std::size_t cls) noexcept {
  Cache& c = cache();
  c.lock();
  void* found = nullptr;
  for (auto it = c.blocks.end(); it != c.blocks.begin();) {
    --it;
    if (it->first == cls) {
      found = it->second;
      c.bytes -= cls;
      c.blocks.erase(it);
      break;
    }
  }
  c.unlock();
  return found;
}

void give_back(std::size_t cls, void* block) noexcept {
  Cache& c = cache();
  // Blocks evicted to respect the limits, freed after the lock is dropped: at most every block
  // cached before this one.
  std::array<void*, kMaxCachedBlocks + 1> evicted{};
  std::size_t n_evicted = 0;
  bool kept = false;
  c.lock();
  if (cls <= kMaxCachedBytesTotal) {
    try {
      c.blocks.emplace_back(cls, block);
      c.bytes += cls;
      kept = true;
      while (c.blocks.size() > kMaxCachedBlocks || c.bytes > kMaxCachedBytesTotal) {
        evicted[n_evicted++] = c.blocks.front().second;
        c.bytes -= c.blocks.front().first;
        c.blocks.erase(c.blocks.begin());
      }
    } catch (...) {
      kept = false;
    }
  }
  c.unlock();
  if (!kept) ::operator delete(block, kAlign);
  for (std::size_t i = 0; i < n_evicted; ++i) ::operator delete(evicted[i], kAlign);
}

struct CachedDeleter {
  std::size_t cls;
  void operator()(std::byte* p) const noexcept { give_back(cls, p); }
};

}  // namespace

std::shared_ptr<std::byte> allocate_storage(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  const std::size_t cls = size_class(bytes);
  if (cls < kMinCachedBytes) {
    // One allocation holding the control block and the bytes, aligned by hand: a separate
    // aligned operator new goes through glibc's memalign, which cost more than the rest of a
    // small sample's get() (callgrind, stoker-bench --workload tiny).
    const std::size_t align = static_cast<std::size_t>(kAlign);
    std::shared_ptr<std::byte[]> block =
        std::make_shared_for_overwrite<std::byte[]>(cls + align - 1);
    const auto address = reinterpret_cast<std::uintptr_t>(block.get());
    std::byte* aligned = block.get() + ((align - address % align) % align);
    return std::shared_ptr<std::byte>(std::move(block), aligned);
  }
  void* block = take(cls);
  if (block == nullptr) block = ::operator new(cls, kAlign);
  // If the control block cannot be allocated, shared_ptr calls the deleter: nothing leaks.
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(block), CachedDeleter{cls});
}

void reset_buffer_cache_after_fork() noexcept {
  cache().locked.store(false, std::memory_order_relaxed);
}

std::size_t cached_block_count() noexcept {
  Cache& c = cache();
  c.lock();
  const std::size_t n = c.blocks.size();
  c.unlock();
  return n;
}

}  // namespace stoker::detail
