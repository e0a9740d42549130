#include "stoker/sample.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace stoker {
namespace detail {

const Tensor* find_field(const std::vector<Field>& fields, std::string_view name) noexcept {
  for (const Field& field : fields) {
    if (field.name == name) return &field.tensor;
  }
  return nullptr;
}

void throw_missing_field(std::string_view owner, std::string_view name,
                         const std::vector<Field>& fields) {
  std::string names;
  for (const Field& field : fields) {
    if (!names.empty()) names += ", ";
    names += field.name;
  }
  throw std::out_of_range(fmt::format("{}: no field named '{}' (its fields: {})", owner, name,
                                      names.empty() ? std::string("none") : names));
}

}  // namespace detail

Sample& Sample::set(std::string_view name, Tensor tensor) {
  if (name.empty()) throw std::invalid_argument("Sample::set: the field name is empty");
  if (!tensor.defined()) {
    throw std::invalid_argument(
        fmt::format("Sample::set: the tensor for field '{}' is undefined", name));
  }
  for (Field& field : fields_) {
    if (field.name == name) {
      field.tensor = std::move(tensor);
      return *this;
    }
  }
  // Room for a typical sample's fields at the first set(): growing 1 -> 2 -> 4 moved every
  // field and cost two more allocations per sample.
  if (fields_.capacity() == 0) fields_.reserve(4);
  fields_.push_back(Field{std::string(name), std::move(tensor)});
  return *this;
}

const Tensor& Sample::operator[](std::string_view name) const {
  if (const Tensor* t = find(name)) return *t;
  detail::throw_missing_field("Sample", name, fields_);
}

const Tensor* Sample::find(std::string_view name) const noexcept {
  return detail::find_field(fields_, name);
}

std::size_t Sample::nbytes() const noexcept {
  std::size_t n = 0;
  for (const Field& field : fields_) n += field.tensor.nbytes();
  return n;
}

}  // namespace stoker
