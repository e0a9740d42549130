// What a delivered Batch keeps alive of its loader's ring: the mapping, the per-slot "held"
// flags, the registrations of pinned slots and the eventfd that wakes the main process when a
// slot is released. A Batch may outlive its loader and be released on any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "ipc/ring.hpp"
#include "os/posix.hpp"
#include "stoker/pinned_allocator.hpp"

namespace stoker::detail {

struct RingHandle {
  std::unique_ptr<Ring> ring;
  // Pinning::kRegister: the locked range of each slot, from its start (declared after `ring`,
  // so they are unlocked before it is unmapped). Empty until a slot is first pinned.
  std::vector<PinnedRange> pins;
  // held[s]: true from delivery until the last copy of the Batch is gone. Written by main at
  // delivery (relaxed, before the Batch exists) and by ~SlotLease (release, in whichever thread
  // drops the last copy); read by SlotTable::reclaim() (acquire, pairs with that release so the
  // consumer's last reads of the slot happen before a worker overwrites it).
  std::unique_ptr<std::atomic<bool>[]> held;
  posix::Fd main_eventfd;
};

// One per delivery: its destructor releases the slot and rings the main doorbell.
struct SlotLease {
  SlotLease(std::shared_ptr<RingHandle> ring, std::size_t s) noexcept
      : shared(std::move(ring)), slot(s) {}
  SlotLease(const SlotLease&) = delete;
  SlotLease& operator=(const SlotLease&) = delete;
  ~SlotLease() {
    shared->held[slot].store(false, std::memory_order_release);
    ring_doorbell(shared->ring->control().main_doorbell, shared->main_eventfd.get());
  }
  std::shared_ptr<RingHandle> shared;
  std::size_t slot;
};

}  // namespace stoker::detail
