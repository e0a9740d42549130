#include "loader/batch_pinning.hpp"

#include <algorithm>
#include <cstring>

#include "ipc/field_codec.hpp"
#include "os/log.hpp"

namespace stoker::detail {

void BatchPinning::warn_unpinned(const std::exception& e) noexcept {
  if (warned_) return;
  warned_ = true;
  try {
    logger().warn(
        "stoker: a batch could not be pinned and is delivered unpinned "
        "(Batch::is_pinned() is false): {}",
        e.what());
  } catch (...) {
  }
}

bool BatchPinning::pin_slot(RingHandle& shared, std::size_t s,
                            PinnedAllocator& allocator) noexcept {
  try {
    const Ring& ring = *shared.ring;
    if (shared.pins.empty()) shared.pins.resize(ring.num_slots());
    const std::size_t committed =
        std::min(round_up(ring.header(s).committed.load(std::memory_order_relaxed), kPageSize),
                 ring.slot_bytes());
    PinnedRange& range = shared.pins[s];
    if (committed <= range.size()) return true;
    range = PinnedRange();
    range = allocator.pin_range(ring.slot(s), committed);
    return true;
  } catch (const std::exception& e) {
    warn_unpinned(e);
    return false;
  }
}

std::optional<Batch> BatchPinning::copy_to_pinned(const Batch& view, PinnedAllocator& allocator) {
  // The indices first, then the fields placed as in a slot (field_codec.hpp).
  const std::size_t index_bytes = view.indices().size() * sizeof(std::size_t);
  std::vector<std::uint64_t> offsets;
  offsets.reserve(view.fields().size());
  const std::size_t total = place_fields(index_bytes, view.fields(), offsets);
  struct Staged {
    PinnedBlock block;
  };
  std::shared_ptr<Staged> staged;
  try {
    staged = std::make_shared<Staged>(Staged{allocator.allocate(std::max<std::size_t>(total, 1))});
  } catch (const std::exception& e) {
    warn_unpinned(e);
    return std::nullopt;
  }
  std::byte* const base = staged->block.data();
  if (index_bytes > 0) std::memcpy(base, view.indices().data(), index_bytes);
  std::vector<Field> fields;
  fields.reserve(view.fields().size());
  for (std::size_t f = 0; f < view.fields().size(); ++f) {
    const auto& [name, t] = view.fields()[f];
    if (t.nbytes() > 0) std::memcpy(base + offsets[f], t.raw_data(), t.nbytes());
    fields.push_back(Field{name, Tensor::view(t.dtype(), t.shape(), base + offsets[f], staged)});
  }
  const std::span<const std::size_t> indices(reinterpret_cast<const std::size_t*>(base),
                                             view.indices().size());
  return make_batch(BatchParts{std::move(fields), indices, view.epoch(), view.index(),
                               std::move(staged), view.size(), true});
}

}  // namespace stoker::detail
