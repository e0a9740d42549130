#include "stoker/collate.hpp"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "stoker/errors.hpp"

namespace stoker {

StackCollator::StackCollator(BatchBuilder& out) : out_(out) {}

void StackCollator::start(const Sample& first) {
  const auto rows = static_cast<std::int64_t>(out_.batch_size());
  columns_.reserve(first.size());
  for (const auto& [name, tensor] : first) {
    Tensor dst = out_.alloc(name, tensor.dtype(), tensor.shape().prepend(rows));
    columns_.push_back({name, tensor.dtype(), tensor.shape(), tensor.nbytes(), dst.raw_data()});
  }
}

void StackCollator::add(const Sample& sample) {
  if (count_ >= out_.batch_size()) {
    throw std::out_of_range(
        fmt::format("StackCollator::add: the batch holds {} samples already", out_.batch_size()));
  }
  if (count_ == 0) start(sample);
  const std::vector<Field>& fields = sample.fields();
  for (std::size_t j = 0; j < columns_.size(); ++j) {
    const Column& column = columns_[j];
    // Samples nearly always list their fields in the same order: try position j first.
    const Tensor* t = j < fields.size() && fields[j].first == column.name
                          ? &fields[j].second
                          : sample.find(column.name);
    if (t == nullptr) mismatch(column, nullptr, "is missing");
    if (t->dtype() != column.dtype) mismatch(column, t, "dtype");
    if (!(t->shape() == column.shape)) mismatch(column, t, "shape");
    std::memcpy(column.dst + count_ * column.row_bytes, t->raw_data(), column.row_bytes);
  }
  if (fields.size() != columns_.size()) {
    for (const auto& [name, tensor] : fields) {
      bool known = false;
      for (const Column& column : columns_) known = known || column.name == name;
      if (!known) {
        const std::size_t first = out_.indices()[0];
        const std::size_t here = out_.indices()[count_];
        throw CollateError(
            name, {first, here},
            fmt::format("collate: sample {} has a field '{}' that sample {} (the batch's first) "
                        "does not have; every sample of a batch must have the same fields",
                        here, name, first));
      }
    }
  }
  ++count_;
}

void StackCollator::mismatch(const Column& column, const Tensor* got, std::string_view what) const {
  const std::size_t first = out_.indices()[0];
  const std::size_t here = out_.indices()[count_];
  std::string message;
  if (got == nullptr) {
    message = fmt::format(
        "collate: sample {} has no field '{}', which sample {} (the batch's first) has; every "
        "sample of a batch must have the same fields",
        here, column.name, first);
  } else if (what == "dtype") {
    message = fmt::format(
        "collate: field '{}' of sample {} is {} but sample {} (the batch's first) has {}; "
        "convert it in get() so every sample has the same dtype",
        column.name, here, dtype_name(got->dtype()), first, dtype_name(column.dtype));
  } else {
    message = fmt::format(
        "collate: field '{}' of sample {} has shape {} but sample {} (the batch's first) has "
        "{}; samples must have equal shapes to be stacked: resize or pad them in get(), or "
        "give LoaderOptions::collate a function that handles variable sizes",
        column.name, here, got->shape().to_string(), first, column.shape.to_string());
  }
  throw CollateError(column.name, {first, here}, std::move(message));
}

void collate_stack(std::span<const Sample> samples, BatchBuilder& out) {
  StackCollator stack(out);
  for (const Sample& sample : samples) stack.add(sample);
}

}  // namespace stoker
