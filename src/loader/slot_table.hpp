// SlotTable: the main process's record of every batch slot — its phase, and which batch of
// which plan it carries — and the only code that changes a phase.
//
//   kFree --issued (header + indices written, task pushed)--> kIssued
//   kIssued --result popped--> kReady, or kFree (stale plan, or its worker was stopped or died)
//   kReady --delivered as a Batch--> kHeld, or kFree (an error, all skipped, or a stale plan)
//   kHeld --the last copy of the Batch destroyed (its lease)--> kFree
//
// INV-SLOT-1: a slot is written by exactly one process at a time: by main while kFree (its
//   header and indices), by the worker of its channel while kIssued, by nobody while kReady or
//   kHeld; the one word main also writes while kIssued is SlotHeader::claim, an atomic
//   (first_batch.cpp). The task push (release) and the result pop (acquire) hand it over.
//   set_phase() asserts that every change is one of the arrows above.
// INV-SLOT-2: in flight (kIssued + kReady + kHeld) <= num_slots = channels x slots_per_channel,
//   which is what bounds memory and what the consumer can hold.
// Slot s belongs to channel s / slots_per_channel. Main process only; not thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace stoker::detail {

enum class Phase : std::uint8_t { kFree, kIssued, kReady, kHeld };

// A slot carries a whole batch, or one part of a split batch 0 (EpochPlan::first_parts): part
// 0 is the host, whose fields are sized for the whole batch and receive the other parts' rows.
inline constexpr std::uint32_t kWholeBatch = ~std::uint32_t{0};

struct SlotState {
  Phase phase = Phase::kFree;
  std::uint64_t plan = 0;
  std::uint64_t batch = 0;
  std::uint32_t part = kWholeBatch;
};

// A batch the loader lost and gives again: (plan, batch, part).
struct LostTask {
  std::uint64_t plan;
  std::uint64_t batch;
  std::uint32_t part;
  friend bool operator<(const LostTask& a, const LostTask& b) noexcept {
    return a.plan != b.plan     ? a.plan < b.plan
           : a.batch != b.batch ? a.batch < b.batch
                                : a.part < b.part;
  }
};

class SlotTable {
 public:
  SlotTable() = default;
  SlotTable(std::size_t num_slots, std::size_t slots_per_channel);

  std::size_t size() const noexcept { return slots_.size(); }
  std::size_t per_channel() const noexcept { return per_channel_; }
  std::size_t channel_of(std::size_t s) const noexcept { return s / per_channel_; }
  const SlotState& operator[](std::size_t s) const noexcept { return slots_[s]; }

  // The one way a phase changes: asserts (INV-SLOT-1) that slot s is in `from` and that
  // from -> to is an arrow of the life cycle.
  void set_phase(std::size_t s, Phase from, Phase to) noexcept;
  // kFree -> kIssued, carrying batch k of plan `plan` (or part `part` of it).
  void issue(std::size_t s, std::uint64_t plan, std::uint64_t k,
             std::uint32_t part = kWholeBatch) noexcept;

  // A split batch's host slot (part 0), once the other parts' rows are in it, carries the whole
  // batch.
  void make_whole(std::size_t s) noexcept;
  // The kIssued slot carrying batch k of `plan`, if any.
  std::optional<std::size_t> issued_slot(std::uint64_t plan, std::uint64_t k) const noexcept;
  // A kFree slot of channel c, if any.
  std::optional<std::size_t> free_slot(std::size_t c) const noexcept;
  // kHeld slots whose Batch is gone (`held[s]` false, acquire: pairs with the lease's release)
  // become kFree. True when any did.
  bool reclaim(const std::atomic<bool>* held) noexcept;
  // Every kIssued slot becomes kFree (its worker was stopped). Of channel c only, when given.
  void free_issued(std::optional<std::size_t> c = std::nullopt) noexcept;
  // kReady slots of plans for which `live(plan)` is false become kFree.
  void drop_ready_unless(const std::function<bool(std::uint64_t plan)>& live) noexcept;
  // Channel c's kIssued slots, freed, in order: what its dead worker had not delivered.
  std::vector<LostTask> take_issued(std::size_t c);

  // The ready slot of a whole batch to deliver next for `plan`: batch `next_in_order` when
  // ordered, else the lowest ready batch.
  std::optional<std::size_t> deliverable(std::uint64_t plan, bool ordered,
                                         std::uint64_t next_in_order) const noexcept;
  // The kReady slots of the parts of batch k of `plan`, by part number, when all `parts` are
  // ready; empty otherwise.
  std::vector<std::size_t> ready_parts(std::uint64_t plan, std::uint64_t k,
                                       std::size_t parts) const;
  // The kIssued slot of `plan` with the oldest batch.
  std::optional<std::size_t> oldest_issued(std::uint64_t plan) const noexcept;
  // Whether a slot of `plan` is still being loaded or waits to be delivered.
  bool pending(std::uint64_t plan) const noexcept;
  // Whether every slot of channel c is kHeld.
  bool all_held(std::size_t c) const noexcept;
  // Slots of channel c that are not kFree (in flight: issued, ready or held), and those kHeld.
  std::size_t in_use(std::size_t c) const noexcept;
  std::size_t held(std::size_t c) const noexcept;
  std::size_t count(Phase phase) const noexcept;
  std::size_t count_ready(std::uint64_t plan) const noexcept;

 private:
  std::vector<SlotState> slots_;
  std::size_t per_channel_ = 1;
};

}  // namespace stoker::detail
