// BatchPinning: makes delivered batches page-locked (LoaderOptions::pin_memory). kRegister locks
// a slot in place, from its start to what it has committed, re-locking it whole when it grows
// (one registration per slot, which CUDA copies treat as one pinned range); kCopy copies the
// batch into a pinned staging block from the allocator, which frees its slot at once. A batch
// that cannot be pinned mid-epoch (the pre-flight budget was an estimate: samples vary, other
// loaders share the allocator) is delivered unpinned, not lost, and the log says so once.
// Main process only.
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <optional>

#include "loader/resolved_options.hpp"
#include "loader/ring_lease.hpp"
#include "stoker/batch.hpp"

namespace stoker::detail {

class BatchPinning {
 public:
  // Pinning::kRegister: locks slot s of `ring` up to its committed size. The slot is being
  // delivered, so no Batch refers to it meanwhile. False (logged once) when it cannot be locked.
  bool pin_slot(RingHandle& ring, std::size_t s, PinnedAllocator& allocator) noexcept;
  // Pinning::kCopy: `view` copied into one pinned block (fields 64-byte aligned), or nullopt
  // (logged once) when the allocator refuses; the slot is freed when `view` goes.
  std::optional<Batch> copy_to_pinned(const Batch& view, PinnedAllocator& allocator);

 private:
  void warn_unpinned(const std::exception& e) noexcept;
  bool warned_ = false;
};

}  // namespace stoker::detail
