// The batch ring: the layout of the one shared-memory region a loader and its workers share,
// and the small lock-free pieces inside it. The region is a sealed memfd mapped before fork(),
// so every process sees it at the same address:
//
//   [ControlBlock][Channel 0]..[Channel C-1][pad][slot 0][slot 1]..[slot S-1]
//
// A channel is served by one worker process at a time (which one can change: a respawn after a
// crash, a replacement under max_batches_per_worker): a task queue (main -> worker), a result
// queue (worker -> main), the worker's doorbell and what the worker reports about itself. Slot
// s belongs to channel s / slots_per_channel (a static partition: a worker only ever writes its
// own channel's slots). A slot
// starts with a SlotHeader, then the batch's indices, then the payload the worker writes, then
// the batch descriptor. Nothing here is a lock: a process that dies cannot leave one held.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>

#include "ipc/shared_region.hpp"

namespace stoker::detail {

inline constexpr std::uint64_t kRingMagic = 0x474e49524b4f5453ULL;  // "STOKRING"
inline constexpr std::uint32_t kRingVersion = 5;
inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kPageSize = 4096;
// A channel's queues hold at most slots_per_channel batch messages plus two stop messages
// (INV-QUEUE-2, kept by loader/worker_pool.hpp, which asserts the capacity suffices).
inline constexpr std::size_t kQueueCapacity = 128;
inline constexpr std::uint64_t kNoSample = ~std::uint64_t{0};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(std::size_t) == sizeof(std::uint64_t), "indices are stored as uint64");

constexpr std::size_t round_up(std::size_t n, std::size_t to) noexcept {
  return (n + to - 1) / to * to;
}

enum class MessageKind : std::uint32_t { kBatch = 1, kStop = 2 };

struct Message {
  MessageKind kind;
  std::uint32_t slot;  // kBatch: the slot whose header describes the batch
};
static_assert(std::is_trivially_copyable_v<Message>);

// Single-producer, single-consumer queue of Messages in shared memory.
//
// Design: tail_ is written only by the producer and head_ only by the consumer; both count
// messages since reset() and never wrap in practice (2^64). Each sits on its own cache line so
// the two sides do not false-share. The producer writes the message, then publishes it with a
// release store of tail_ (B); the consumer's acquire load of tail_ (C) pairs with B, so it sees
// the message. The consumer releases the cell with a release store of head_ (D), paired with
// the producer's acquire load of head_ (A), so the producer never overwrites a cell being read.
// INV-QUEUE-1: head_ <= tail_ <= head_ + kQueueCapacity.
class SpscQueue {
 public:
  // Only while neither side is running (before a worker is forked, after it is reaped).
  void reset() noexcept {
    head_.store(0, std::memory_order_relaxed);
    tail_.store(0, std::memory_order_relaxed);
  }

  // ---- Producer API ----
  // False when full, which INV-QUEUE-2 rules out for stoker's use.
  bool try_push(const Message& message) noexcept {
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);  // own index
    const std::uint64_t head = head_.load(std::memory_order_acquire);  // A: pairs with D
    if (tail - head >= kQueueCapacity) return false;                   // INV-QUEUE-1
    cells_[tail % kQueueCapacity] = message;
    tail_.store(tail + 1, std::memory_order_release);  // B: publishes the cell
    return true;
  }

  // ---- Consumer API ----
  bool try_pop(Message& message) noexcept {
    const std::uint64_t head = head_.load(std::memory_order_relaxed);  // own index
    const std::uint64_t tail = tail_.load(std::memory_order_acquire);  // C: pairs with B
    if (head == tail) return false;
    message = cells_[head % kQueueCapacity];
    head_.store(head + 1, std::memory_order_release);  // D: frees the cell
    return true;
  }

  // Racy by nature: either side may use it as a hint before sleeping.
  bool empty_approx() const noexcept {
    return head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire);
  }

 private:
  alignas(kCacheLine) std::atomic<std::uint64_t> head_;
  alignas(kCacheLine) std::atomic<std::uint64_t> tail_;
  alignas(kCacheLine) Message cells_[kQueueCapacity];
};

// A sleeping flag beside an eventfd: the waker makes the write(2) only when the sleeper said it
// is about to sleep, so a busy ring costs no system call per batch.
//
// Sleeper: sleeping = 1; fence(seq_cst) (E); re-check its condition; poll the eventfd;
//          sleeping = 0; drain the eventfd.
// Waker:   publish (a queue push or a slot release); fence(seq_cst) (F); if sleeping: write.
// E and F order the flag store before the re-check, and the publish before the flag load:
// either the sleeper's re-check sees the publish, or the waker sees the flag. No lost wake-up.
struct Doorbell {
  alignas(kCacheLine) std::atomic<std::uint32_t> sleeping;
};

// Rings `bell` after the caller published something its sleeper waits for. Either process.
void ring_doorbell(Doorbell& bell, int eventfd) noexcept;

// A bounded, NUL-terminated copy of an error, written by the process that saw it and read by
// the main process after the writer published it (slot result) or died (channel fatal report).
struct ErrorReport {
  std::uint64_t sample;  // dataset index being loaded, or kNoSample
  std::uint64_t batch;   // batch number within its epoch
  char where[32];        // "get()", "collate", "worker_init", ...
  char type_name[224];
  char message[1792];

  void set(std::uint64_t sample_index, std::uint64_t batch_number, std::string_view where_text,
           std::string_view type, std::string_view what) noexcept;
};

enum class SlotStatus : std::uint32_t { kEmpty = 0, kOk = 1, kError = 2 };

// The start of every slot.
struct SlotHeader {
  std::uint64_t magic;  // kRingMagic, written once at creation
  // Written by the main process before it pushes the task; the loading process reads them
  // after its acquire pop (C), so they are visible.
  std::uint64_t plan;   // which epoch plan this batch belongs to (stale ones are dropped)
  std::uint64_t batch;  // position in the epoch
  std::uint64_t epoch;
  std::uint64_t seed;         // LoaderOptions::seed: with epoch and index, seeds sample_rng()
  std::uint64_t num_indices;  // uint64 indices follow the header
  // A fresh iterator's batch 0 split across the workers (loader/dispatch.cpp): non-zero in the
  // slot that will carry the whole batch, whose loading process loads only the first
  // `num_to_load` of its num_indices samples into fields sized for all of them; the main
  // process copies the other parts' rows in. 0: load every index.
  std::uint64_t num_to_load;
  // Non-zero: this is the loading worker's first task while the memory check waits for
  // figures: report the first sample's bytes and wait at the first-sample gate (Channel).
  std::uint32_t report_memory;
  // Non-zero: rows are taken one at a time through `claim`, so that main can hand the ones
  // not yet begun to other workers (loader/first_batch.cpp, a batch 0 that went whole to
  // worker 0 before the others were forked).
  std::uint32_t claimable;
  // Written by the loading process before it pushes the result; the main process reads them
  // after its acquire pop of the result.
  SlotStatus status;
  std::uint32_t reserved;
  std::uint64_t descriptor_offset;  // from the slot's start
  std::uint64_t descriptor_bytes;
  ErrorReport error;  // status == kError
  // OnSampleError::kSkip: the indices are reordered so the kept ones come first, in batch
  // order, and the skipped ones follow; `skipped` describes the first skipped sample.
  std::uint64_t num_kept;     // rows of the batch (iterable datasets: there are no indices)
  std::uint32_t exhausted;    // iterable datasets: the worker's stream ended in this batch
  std::uint32_t num_skipped;  // samples skipped (OnSampleError::kSkip)
  ErrorReport skipped;
  // Written by the loading process with the result, for stats and the trace: when it started
  // and finished the batch (steady clock, ns), and, when `stages_timed`, the nanoseconds spent
  // inside get() and inside the collate (the rest of the span is slot writing and bookkeeping).
  std::uint64_t start_ns;
  std::uint64_t end_ns;
  std::uint64_t get_ns;
  std::uint64_t collate_ns;
  std::uint32_t stages_timed;
  std::uint32_t reserved2;
  // Bytes from the slot's start that some process has backed with memory (grows only, by CAS:
  // main backs the indices, the loading process the payload). Read for memory accounting.
  std::atomic<std::uint64_t> committed;
  // With `claimable`: the rows begun (low 32 bits) and the rows this task may begin (high 32).
  // The loading process takes row r by CAS from (r, limit) to (r + 1, limit) while r < limit;
  // main, while the task is in flight (the one word it writes then), lowers the limit by CAS
  // to no fewer than the rows begun, and gives the rest to other tasks.
  std::atomic<std::uint64_t> claim;
};
static_assert(std::is_standard_layout_v<SlotHeader>);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
inline constexpr std::size_t kSlotHeaderBytes = round_up(sizeof(SlotHeader), kCacheLine);

// What the main process and one worker share.
struct Channel {
  SpscQueue tasks;    // producer: main; consumer: the worker
  SpscQueue results;  // producer: the worker; consumer: main
  Doorbell doorbell;  // the worker sleeps on it; main rings it after pushing a task
  // Written by the worker (relaxed) as it goes; read by main after the worker died (the
  // waitpid() that reaped it orders them) to say what it was doing.
  alignas(kCacheLine) std::atomic<std::uint64_t> current_sample;  // kNoSample between samples
  std::atomic<std::uint64_t> current_batch;                       // +1; 0 when idle
  // Written by main, read by the worker between samples: abandon the batch and exit.
  std::atomic<std::uint32_t> stop_requested;
  // Written by the worker before it exits on an error outside any batch (worker_init);
  // `fatal_valid` is stored (release) after the report, read by main after reaping.
  std::atomic<std::uint32_t> fatal_valid;
  ErrorReport fatal;
  // The first-sample gate (loader/first_batch.cpp): while the memory check waits for figures,
  // a worker's first task has SlotHeader::report_memory set, and after that task's first get()
  // the worker writes `first_sample_bytes` (the sample's bytes: one row of the batch), stores
  // `first_reported` = 1 (release; main's acquire load of it makes it visible) and waits on
  // `first_gate` (a futex) until main stores 1 there (release) after the check passed, or
  // stop_requested. After that task's result, it writes `first_private_bytes` (its private
  // memory then; 0 unknown) and stores `private_reported` = 1 (release), which main checks
  // as it arrives. Main clears the flags (reset_channel, and before it issues such a task)
  // while the channel's worker has no task with report_memory in flight.
  std::atomic<std::uint32_t> first_reported;
  std::atomic<std::uint32_t> first_gate;
  std::atomic<std::uint32_t> private_reported;
  std::uint64_t first_sample_bytes;
  std::uint64_t first_private_bytes;
};
static_assert(std::is_standard_layout_v<Channel>);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

struct ControlBlock {
  std::uint64_t magic;  // kRingMagic
  std::uint32_t version;
  std::uint32_t num_channels;
  std::uint32_t slots_per_channel;
  std::uint32_t num_slots;
  std::uint64_t slot_stride;   // bytes from one slot to the next (page multiple)
  std::uint64_t slots_offset;  // from the region's start
  Doorbell main_doorbell;      // the main process sleeps on it; workers ring it after a result
};
static_assert(std::is_standard_layout_v<ControlBlock>);

// The shape of a loader's ring: one channel per worker (one when loading in-process), plus a
// spare one when workers are recycled (LoaderOptions::max_batches_per_worker), each of
// slots_per_channel slots (prefetch_factor) of slot_bytes of address space. The memory
// estimate and the ring itself are both computed from this, so they agree.
struct RingGeometry {
  std::size_t channels = 1;
  std::size_t slots_per_channel = 1;
  std::size_t slot_bytes = 0;
  std::size_t num_slots() const noexcept { return channels * slots_per_channel; }
};
RingGeometry ring_geometry(std::size_t num_workers, std::size_t prefetch_factor, bool spare_channel,
                           std::size_t slot_bytes) noexcept;

// A mapped ring. Created by the main process before forking; inherited by workers.
class Ring {
 public:
  // Throws stoker::Error when the memfd cannot be created, sized or mapped, or its header
  // pages cannot be backed.
  explicit Ring(const RingGeometry& geometry);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  ControlBlock& control() const noexcept { return *control_; }
  Channel& channel(std::size_t w) const noexcept { return channels_[w]; }
  std::size_t num_channels() const noexcept { return control_->num_channels; }
  std::size_t num_slots() const noexcept { return control_->num_slots; }
  std::size_t slots_per_channel() const noexcept { return control_->slots_per_channel; }
  std::size_t slot_bytes() const noexcept { return control_->slot_stride; }
  std::size_t channel_of(std::size_t slot) const noexcept { return slot / slots_per_channel(); }
  std::byte* slot(std::size_t s) const noexcept {
    return base_ + control_->slots_offset + s * control_->slot_stride;
  }
  SlotHeader& header(std::size_t s) const noexcept {
    return *reinterpret_cast<SlotHeader*>(slot(s));
  }
  // Written by main when it issues the batch; reordered by the loading process when it skips.
  std::uint64_t* indices(std::size_t s) const noexcept {
    return reinterpret_cast<std::uint64_t*>(slot(s) + kSlotHeaderBytes);
  }
  // Where the slots start in a ring of `num_channels` channels: the control block and the
  // channels before them, rounded up to a page.
  static std::size_t slots_offset(std::size_t num_channels) noexcept;
  // Where a batch's payload may start once its indices are written.
  static std::size_t payload_start(std::size_t num_indices) noexcept {
    return round_up(kSlotHeaderBytes + num_indices * sizeof(std::uint64_t), kCacheLine);
  }
  std::byte* base() const noexcept { return base_; }
  std::size_t mapped_bytes() const noexcept { return bytes_; }

 private:
  SharedRegion region_;
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  ControlBlock* control_ = nullptr;
  Channel* channels_ = nullptr;
};

// Makes [offset, end) of slot `s` backed and present in this process: the per-process record of
// what each slot has pre-faulted, so the hot path touches only memory that is already mapped.
class SlotMemory {
 public:
  explicit SlotMemory(const Ring& ring);
  // Ensures the first `bytes` of slot `s` are backed, growing by at least 1/8 in 64 KiB steps.
  // Throws stoker::Error (with the sizes) when shared memory cannot be backed.
  void ensure(std::size_t s, std::size_t bytes);

 private:
  const Ring& ring_;
  std::unique_ptr<std::size_t[]> ready_;  // per slot: bytes present in this process
};

}  // namespace stoker::detail
