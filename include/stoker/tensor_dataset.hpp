// TensorDataset: samples held in memory, as named tensors whose first dimension indexes the
// samples (PyTorch's TensorDataset, with names). get(i) returns views of row i: no copy until
// the batch is collated.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <vector>

#include "stoker/sample.hpp"
#include "stoker/tensor.hpp"

namespace stoker {

class TensorDataset {
 public:
  // Throws std::invalid_argument when there are no fields, a field is a scalar, or the
  // fields' first dimensions differ (naming them).
  explicit TensorDataset(std::vector<Field> fields);
  TensorDataset(std::initializer_list<Field> fields) : TensorDataset(std::vector<Field>(fields)) {}

  std::size_t size() const noexcept { return size_; }
  // Either process. Throws std::out_of_range for i >= size().
  Sample get(std::size_t i) const;

 private:
  std::vector<Field> fields_;
  std::size_t size_ = 0;
};

}  // namespace stoker
