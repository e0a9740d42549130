// Sample: what a dataset's get(i) returns, an ordered set of named tensors ("image", "label").
// Field order is the order of the first set() of each name. The default collate stacks each
// field of the samples of a batch into one tensor of the same name.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoker/tensor.hpp"

namespace stoker {

// One named tensor: a field of a Sample, or the stacked field of a Batch.
struct Field {
  std::string name;
  Tensor tensor;
};

class Sample {
 public:
  Sample() = default;

  // Adds a field, or replaces the tensor of an existing one. Returns *this, for chaining.
  // Throws std::invalid_argument for an empty name or an undefined tensor.
  Sample& set(std::string_view name, Tensor tensor);

  // Throws std::out_of_range naming the field and the fields there are.
  const Tensor& operator[](std::string_view name) const;
  // nullptr when there is no such field.
  const Tensor* find(std::string_view name) const noexcept;
  bool contains(std::string_view name) const noexcept { return find(name) != nullptr; }

  std::size_t size() const noexcept { return fields_.size(); }
  bool empty() const noexcept { return fields_.empty(); }
  const std::vector<Field>& fields() const noexcept { return fields_; }
  std::vector<Field>::const_iterator begin() const noexcept { return fields_.begin(); }
  std::vector<Field>::const_iterator end() const noexcept { return fields_.end(); }
  // Sum of the fields' payload bytes.
  std::size_t nbytes() const noexcept;

 private:
  std::vector<Field> fields_;
};

namespace detail {
const Tensor* find_field(const std::vector<Field>& fields, std::string_view name) noexcept;
[[noreturn]] void throw_missing_field(std::string_view owner, std::string_view name,
                                      const std::vector<Field>& fields);
}  // namespace detail

}  // namespace stoker
