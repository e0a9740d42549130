#include "loader/slot_table.hpp"

#include <algorithm>

#include "os/assert.hpp"

namespace stoker::detail {
namespace {

// The arrows of the life cycle (slot_table.hpp); used by the assertions only.
[[maybe_unused]] constexpr bool allowed(Phase from, Phase to) noexcept {
  switch (from) {
    case Phase::kFree:
      return to == Phase::kIssued;
    case Phase::kIssued:
      return to == Phase::kReady || to == Phase::kFree;
    case Phase::kReady:
      return to == Phase::kHeld || to == Phase::kFree;
    case Phase::kHeld:
      return to == Phase::kFree;
  }
  return false;
}

}  // namespace

SlotTable::SlotTable(std::size_t num_slots, std::size_t slots_per_channel)
    : slots_(num_slots), per_channel_(slots_per_channel) {
  STOKER_ASSERT(slots_per_channel > 0 && num_slots % slots_per_channel == 0,
                "a ring has whole channels of slots");
}

void SlotTable::set_phase(std::size_t s, Phase from, Phase to) noexcept {
  STOKER_ASSERT(s < slots_.size(), "a slot number is below the ring's size");
  STOKER_ASSERT(slots_[s].phase == from, "INV-SLOT-1: a slot changes phase from the one it is in");
  STOKER_ASSERT(allowed(from, to), "INV-SLOT-1: a slot changes phase along the life cycle");
  slots_[s].phase = to;
}

void SlotTable::issue(std::size_t s, std::uint64_t plan, std::uint64_t k,
                      std::uint32_t part) noexcept {
  set_phase(s, Phase::kFree, Phase::kIssued);
  slots_[s].plan = plan;
  slots_[s].batch = k;
  slots_[s].part = part;
}

void SlotTable::make_whole(std::size_t s) noexcept {
  STOKER_ASSERT(slots_[s].phase == Phase::kReady && slots_[s].part == 0,
                "only a ready host slot of a split batch is made whole");
  slots_[s].part = kWholeBatch;
}

std::optional<std::size_t> SlotTable::issued_slot(std::uint64_t plan,
                                                  std::uint64_t k) const noexcept {
  for (std::size_t s = 0; s < slots_.size(); ++s) {
    const SlotState& slot = slots_[s];
    if (slot.phase == Phase::kIssued && slot.plan == plan && slot.batch == k) return s;
  }
  return std::nullopt;
}

std::optional<std::size_t> SlotTable::free_slot(std::size_t c) const noexcept {
  const std::size_t first = c * per_channel_;
  for (std::size_t s = first; s < first + per_channel_; ++s) {
    if (slots_[s].phase == Phase::kFree) return s;
  }
  return std::nullopt;
}

bool SlotTable::reclaim(const std::atomic<bool>* held) noexcept {
  bool any = false;
  for (std::size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].phase == Phase::kHeld && !held[s].load(std::memory_order_acquire)) {
      set_phase(s, Phase::kHeld, Phase::kFree);
      any = true;
    }
  }
  return any;
}

void SlotTable::free_issued(std::optional<std::size_t> c) noexcept {
  const std::size_t first = c ? *c * per_channel_ : 0;
  const std::size_t last = c ? first + per_channel_ : slots_.size();
  for (std::size_t s = first; s < last; ++s) {
    if (slots_[s].phase == Phase::kIssued) set_phase(s, Phase::kIssued, Phase::kFree);
  }
}

void SlotTable::drop_ready_unless(const std::function<bool(std::uint64_t)>& live) noexcept {
  for (std::size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].phase == Phase::kReady && !live(slots_[s].plan)) {
      set_phase(s, Phase::kReady, Phase::kFree);
    }
  }
}

std::vector<LostTask> SlotTable::take_issued(std::size_t c) {
  std::vector<LostTask> lost;
  const std::size_t first = c * per_channel_;
  for (std::size_t s = first; s < first + per_channel_; ++s) {
    if (slots_[s].phase != Phase::kIssued) continue;
    lost.push_back({slots_[s].plan, slots_[s].batch, slots_[s].part});
    set_phase(s, Phase::kIssued, Phase::kFree);
  }
  std::sort(lost.begin(), lost.end());
  return lost;
}

std::optional<std::size_t> SlotTable::deliverable(std::uint64_t plan, bool ordered,
                                                  std::uint64_t next_in_order) const noexcept {
  std::optional<std::size_t> found;
  for (std::size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].phase != Phase::kReady || slots_[s].plan != plan) continue;
    if (slots_[s].part != kWholeBatch) continue;  // a part is delivered with its batch
    if (ordered && slots_[s].batch == next_in_order) return s;
    if (!ordered && (!found || slots_[s].batch < slots_[*found].batch)) found = s;
  }
  return found;
}

std::vector<std::size_t> SlotTable::ready_parts(std::uint64_t plan, std::uint64_t k,
                                                std::size_t parts) const {
  std::vector<std::size_t> found(parts, slots_.size());
  std::size_t count = 0;
  for (std::size_t s = 0; s < slots_.size(); ++s) {
    const SlotState& slot = slots_[s];
    if (slot.phase != Phase::kReady || slot.plan != plan || slot.batch != k ||
        slot.part == kWholeBatch || slot.part >= parts) {
      continue;
    }
    found[slot.part] = s;
    ++count;
  }
  if (count != parts) found.clear();
  return found;
}

std::optional<std::size_t> SlotTable::oldest_issued(std::uint64_t plan) const noexcept {
  std::optional<std::size_t> owing;
  for (std::size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].phase == Phase::kIssued && slots_[s].plan == plan &&
        (!owing || slots_[s].batch < slots_[*owing].batch)) {
      owing = s;
    }
  }
  return owing;
}

bool SlotTable::pending(std::uint64_t plan) const noexcept {
  return std::any_of(slots_.begin(), slots_.end(), [plan](const SlotState& slot) {
    return slot.plan == plan && (slot.phase == Phase::kIssued || slot.phase == Phase::kReady);
  });
}

bool SlotTable::all_held(std::size_t c) const noexcept {
  const std::size_t first = c * per_channel_;
  for (std::size_t s = first; s < first + per_channel_; ++s) {
    if (slots_[s].phase != Phase::kHeld) return false;
  }
  return true;
}

std::size_t SlotTable::in_use(std::size_t c) const noexcept {
  std::size_t n = 0;
  for (std::size_t s = c * per_channel_; s < (c + 1) * per_channel_; ++s) {
    n += slots_[s].phase != Phase::kFree ? 1U : 0U;
  }
  return n;
}

std::size_t SlotTable::held(std::size_t c) const noexcept {
  std::size_t n = 0;
  for (std::size_t s = c * per_channel_; s < (c + 1) * per_channel_; ++s) {
    n += slots_[s].phase == Phase::kHeld ? 1U : 0U;
  }
  return n;
}

std::size_t SlotTable::count(Phase phase) const noexcept {
  return static_cast<std::size_t>(std::count_if(
      slots_.begin(), slots_.end(), [phase](const SlotState& s) { return s.phase == phase; }));
}

std::size_t SlotTable::count_ready(std::uint64_t plan) const noexcept {
  return static_cast<std::size_t>(std::count_if(
      slots_.begin(), slots_.end(),
      [plan](const SlotState& s) { return s.phase == Phase::kReady && s.plan == plan; }));
}

}  // namespace stoker::detail
