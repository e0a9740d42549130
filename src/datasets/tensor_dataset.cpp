#include "stoker/tensor_dataset.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace stoker {

TensorDataset::TensorDataset(std::vector<Field> fields) : fields_(std::move(fields)) {
  if (fields_.empty()) throw std::invalid_argument("TensorDataset: no fields given");
  for (const auto& [name, tensor] : fields_) {
    if (!tensor.defined() || tensor.dim() == 0) {
      throw std::invalid_argument(fmt::format(
          "TensorDataset: field '{}' is {}; each field needs a first dimension indexing the "
          "samples",
          name, tensor.defined() ? "a scalar" : "undefined"));
    }
  }
  size_ = static_cast<std::size_t>(fields_[0].tensor.size(0));
  for (const auto& [name, tensor] : fields_) {
    if (static_cast<std::size_t>(tensor.size(0)) != size_) {
      throw std::invalid_argument(fmt::format(
          "TensorDataset: field '{}' has {} rows but field '{}' has {}; every field must have "
          "one row per sample",
          name, tensor.size(0), fields_[0].name, size_));
    }
  }
}

Sample TensorDataset::get(std::size_t i) const {
  if (i >= size_) {
    throw std::out_of_range(
        fmt::format("TensorDataset::get: index {} of a dataset of {} samples", i, size_));
  }
  Sample s;
  for (const auto& [name, tensor] : fields_) s.set(name, tensor.row(i));
  return s;
}

}  // namespace stoker
