// The storage behind owning tensors. Blocks of kMinCachedBytes and more are recycled through a
// small per-process cache instead of going back to the system: glibc serves such sizes with
// fresh mappings, and a fresh page costs ~11 us to fault in on these machines, so a dataset that
// builds one image-sized tensor per sample would otherwise pay a page fault every 4 KiB.
#pragma once

#include <cstddef>
#include <memory>

namespace stoker::detail {

inline constexpr std::size_t kMinCachedBytes = std::size_t{32} << 10;
inline constexpr std::size_t kMaxCachedBytesTotal = std::size_t{64} << 20;
inline constexpr std::size_t kMaxCachedBlocks = 32;

// Either process, any thread. 64-byte aligned, at least `bytes` (>= 1) bytes. Throws
// std::bad_alloc.
std::shared_ptr<std::byte> allocate_storage(std::size_t bytes);

// A forked child calls this first: the cache's lock may have been held by another thread of
// the parent at fork() time.
void reset_buffer_cache_after_fork() noexcept;

// Blocks currently cached, for tests.
std::size_t cached_block_count() noexcept;

}  // namespace stoker::detail
