#include "ipc/ring.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <string>

#include <fmt/format.h>

#include "data/format.hpp"
#include "os/posix.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {
namespace {

// On a machine with several NUMA nodes, the ring's pages are placed on the node of the CPU
// that creates it (the consumer's, which reads every batch) rather than wherever a worker
// first touches them. MPOL_PREFERRED through the raw system call: no libnuma needed. Best
// effort: a failure only costs locality.
void prefer_local_node(void* base, std::size_t bytes) noexcept {
  static const bool several_nodes = [] {
    std::string online;
    if (!posix::read_file("/sys/devices/system/node/online", online)) return false;
    return online.find_first_of(",-") != std::string::npos;  // "0" is one node; "0-1", "0,2"
  }();
  if (!several_nodes) return;
  unsigned node = 0;
  if (posix::current_node(node) == 0) (void)posix::prefer_node(base, bytes, node);
}

constexpr std::size_t kGrowStep = std::size_t{64} << 10;

void copy_truncated(char* dst, std::size_t capacity, std::string_view text) noexcept {
  const std::size_t n = std::min(text.size(), capacity - 1);
  std::memcpy(dst, text.data(), n);
  dst[n] = '\0';
}

}  // namespace

void ring_doorbell(Doorbell& bell, int eventfd) noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // F: see Doorbell
  if (bell.sleeping.load(std::memory_order_relaxed) != 0) posix::eventfd_post(eventfd);
}

void ErrorReport::set(std::uint64_t sample_index, std::uint64_t batch_number,
                      std::string_view where_text, std::string_view type,
                      std::string_view what) noexcept {
  sample = sample_index;
  batch = batch_number;
  copy_truncated(where, sizeof where, where_text);
  copy_truncated(type_name, sizeof type_name, type);
  copy_truncated(message, sizeof message, what);
}

RingGeometry ring_geometry(std::size_t num_workers, std::size_t prefetch_factor, bool spare_channel,
                           std::size_t slot_bytes) noexcept {
  RingGeometry g;
  g.channels = std::max<std::size_t>(num_workers, 1) + (num_workers > 0 && spare_channel ? 1 : 0);
  g.slots_per_channel = prefetch_factor;
  g.slot_bytes = slot_bytes;
  return g;
}

std::size_t Ring::slots_offset(std::size_t num_channels) noexcept {
  return round_up(round_up(sizeof(ControlBlock), kCacheLine) + num_channels * sizeof(Channel),
                  kPageSize);
}

Ring::Ring(const RingGeometry& geometry) {
  const std::size_t num_channels = geometry.channels;
  const std::size_t slots_per_channel = geometry.slots_per_channel;
  const std::size_t slot_bytes = geometry.slot_bytes;
  const std::size_t channels_offset = round_up(sizeof(ControlBlock), kCacheLine);
  const std::size_t slots_offset = Ring::slots_offset(num_channels);
  const std::size_t stride = round_up(slot_bytes, kPageSize);
  const std::size_t num_slots = num_channels * slots_per_channel;
  if (stride != 0 && num_slots > (std::size_t{1} << 46) / stride) {
    throw AddressSpaceError(fmt::format(
        "DataLoader: {} slots of {} would need more address space than a process has; lower "
        "LoaderOptions::max_batch_bytes, num_workers or prefetch_factor",
        num_slots, format_bytes(stride)));
  }
  region_ =
      SharedRegion("stoker-ring", slots_offset + num_slots * stride, "DataLoader: the batch ring",
                   fmt::format(" (for {} batch slots of {}); lower "
                               "LoaderOptions::max_batch_bytes or prefetch_factor",
                               num_slots, format_bytes(stride)));
  base_ = region_.data();
  bytes_ = region_.size();
  prefer_local_node(base_, bytes_);

  if (const int err = SharedRegion::populate(base_, slots_offset); err != 0) {
    throw Error(posix::errno_message("DataLoader: cannot back the ring's control block", err));
  }
  control_ = new (base_) ControlBlock();
  control_->magic = kRingMagic;
  control_->version = kRingVersion;
  control_->num_channels = static_cast<std::uint32_t>(num_channels);
  control_->slots_per_channel = static_cast<std::uint32_t>(slots_per_channel);
  control_->num_slots = static_cast<std::uint32_t>(num_slots);
  control_->slot_stride = stride;
  control_->slots_offset = slots_offset;
  channels_ = reinterpret_cast<Channel*>(base_ + channels_offset);
  for (std::size_t w = 0; w < num_channels; ++w) new (&channels_[w]) Channel();
  for (std::size_t s = 0; s < num_slots; ++s) {
    if (const int err = SharedRegion::populate(slot(s), kSlotHeaderBytes); err != 0) {
      throw Error(posix::errno_message(
          fmt::format("DataLoader: cannot back the header of batch slot {}", s), err));
    }
    SlotHeader* header = new (slot(s)) SlotHeader();
    header->magic = kRingMagic;
    header->committed.store(kSlotHeaderBytes, std::memory_order_relaxed);
  }
}

Ring::~Ring() = default;

SlotMemory::SlotMemory(const Ring& ring)
    : ring_(ring), ready_(std::make_unique<std::size_t[]>(ring.num_slots())) {}

void SlotMemory::ensure(std::size_t s, std::size_t bytes) {
  const std::size_t ready = ready_[s];
  if (bytes <= ready) return;
  const std::size_t capacity = ring_.slot_bytes();
  if (bytes > capacity) {
    throw Error(
        fmt::format("DataLoader: a batch needs {} but a slot holds at most {} (LoaderOptions::"
                    "max_batch_bytes); raise max_batch_bytes or lower batch_size",
                    format_bytes(bytes), format_bytes(capacity)));
  }
  const std::size_t target =
      std::min(capacity, round_up(std::max(bytes, ready + ready / 8), kGrowStep));
  const std::size_t start = ready / kPageSize * kPageSize;
  if (const int err = SharedRegion::populate(ring_.slot(s) + start, target - start); err != 0) {
    throw Error(
        posix::errno_message(
            fmt::format("DataLoader: cannot back {} of shared memory for batch slot {} (it had {})",
                        format_bytes(target), s, format_bytes(ready)),
            err) +
        "; memory is exhausted (RAM or the cgroup's limit): lower batch_size, "
        "num_workers or prefetch_factor");
  }
  ready_[s] = target;
  std::atomic<std::uint64_t>& committed = ring_.header(s).committed;
  std::uint64_t seen = committed.load(std::memory_order_relaxed);
  while (seen < target &&
         !committed.compare_exchange_weak(seen, target, std::memory_order_relaxed)) {
  }
}

}  // namespace stoker::detail
