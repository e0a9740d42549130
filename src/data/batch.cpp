#include "stoker/batch.hpp"

#include <utility>

namespace stoker {

namespace detail {

Batch make_batch(BatchParts parts) { return Batch(std::move(parts)); }

}  // namespace detail

Batch::Batch(detail::BatchParts parts)
    : fields_(std::move(parts.fields)),
      indices_(parts.indices),
      keeper_(std::move(parts.keeper)),
      epoch_(parts.epoch),
      index_(parts.index),
      rows_(parts.rows.value_or(parts.indices.size())),
      pinned_(parts.pinned) {}

const Tensor& Batch::operator[](std::string_view name) const {
  if (const Tensor* t = find(name)) return *t;
  detail::throw_missing_field("Batch", name, fields_);
}

const Tensor* Batch::find(std::string_view name) const noexcept {
  return detail::find_field(fields_, name);
}

std::size_t Batch::nbytes() const noexcept {
  std::size_t n = 0;
  for (const Field& field : fields_) n += field.tensor.nbytes();
  return n;
}

bool Batch::is_view() const noexcept {
  for (const Field& field : fields_) {
    if (field.tensor.is_view()) return true;
  }
  return false;
}

Batch Batch::clone() const {
  struct Owned {
    std::vector<std::size_t> indices;
  };
  auto owned = std::make_shared<Owned>();
  owned->indices.assign(indices_.begin(), indices_.end());
  std::vector<Field> fields;
  fields.reserve(fields_.size());
  for (const Field& field : fields_) fields.push_back(Field{field.name, field.tensor.clone()});
  const std::span<const std::size_t> indices(owned->indices);
  return Batch(detail::BatchParts{std::move(fields), indices, epoch_, index_, std::move(owned),
                                  rows_, false});
}

}  // namespace stoker
