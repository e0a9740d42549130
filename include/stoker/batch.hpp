// Batch: the collated samples of one batch, as the consumer sees them. A batch delivered by a
// DataLoader is a zero-copy view into a shared-memory slot: its tensors point into the slot,
// and the slot goes back to the workers when the last copy of the Batch (and of any Tensor taken
// from it) is destroyed. clone() copies it out into owning memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "stoker/sample.hpp"
#include "stoker/tensor.hpp"

namespace stoker {

class Batch;

namespace detail {

// What a Batch is assembled from, by the loader (and by tests that fake one): `keeper` owns the
// memory that `indices` and the tensors' views point into, and the Batch keeps it alive. `rows`
// is the number of samples; empty: indices.size() (a batch of an iterable dataset has rows but
// no indices). `pinned`: every field lies in page-locked memory.
struct BatchParts {
  std::vector<Field> fields;
  std::span<const std::size_t> indices;
  std::uint64_t epoch = 0;
  std::uint64_t index = 0;
  std::shared_ptr<const void> keeper;
  std::optional<std::size_t> rows;
  bool pinned = false;
};
Batch make_batch(BatchParts parts);

}  // namespace detail

class Batch {
 public:
  // An empty batch: no fields, no samples.
  Batch() = default;

  // The stacked field `name`, shape [size(), ...]. Throws std::out_of_range naming the fields.
  const Tensor& operator[](std::string_view name) const;
  const Tensor* find(std::string_view name) const noexcept;
  bool contains(std::string_view name) const noexcept { return find(name) != nullptr; }
  const std::vector<Field>& fields() const noexcept { return fields_; }
  std::vector<Field>::const_iterator begin() const noexcept { return fields_.begin(); }
  std::vector<Field>::const_iterator end() const noexcept { return fields_.end(); }

  // Number of samples.
  std::size_t size() const noexcept { return rows_; }
  // The dataset indices of the samples, in batch order (empty for an iterable dataset).
  std::span<const std::size_t> indices() const noexcept { return indices_; }
  // The epoch this batch belongs to, and its position in that epoch (0-based).
  std::uint64_t epoch() const noexcept { return epoch_; }
  std::uint64_t index() const noexcept { return index_; }
  // Sum of the fields' payload bytes.
  std::size_t nbytes() const noexcept;
  // True while this batch points into memory it does not own: a loader's shared-memory slot,
  // or a pinned staging block (LoaderOptions::pin_mode = kCopy).
  bool is_view() const noexcept;
  // True when every field lies in page-locked memory (LoaderOptions::pin_memory), ready for an
  // asynchronous copy to a GPU. A clone() is not pinned.
  bool is_pinned() const noexcept { return pinned_; }

  // A deep copy in owning heap memory: it holds no slot, so keep clones, not views, when you
  // keep many batches (for example, to evaluate after the epoch).
  Batch clone() const;

 private:
  friend Batch detail::make_batch(detail::BatchParts parts);
  explicit Batch(detail::BatchParts parts);

  std::vector<Field> fields_;
  std::span<const std::size_t> indices_;
  std::shared_ptr<const void> keeper_;
  std::uint64_t epoch_ = 0;
  std::uint64_t index_ = 0;
  std::size_t rows_ = 0;
  bool pinned_ = false;
};

}  // namespace stoker
