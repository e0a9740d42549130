#include "stoker/collate.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "stoker/errors.hpp"

namespace stoker {
namespace {

// "sample 17" for a map-style batch; "row 3 of the batch" when samples have no index.
std::string sample_name(const BatchBuilder& out, std::size_t row) {
  const std::span<const std::size_t> indices = out.indices();
  return row < indices.size() ? fmt::format("sample {}", indices[row])
                              : fmt::format("row {} of the batch", row);
}

std::vector<std::size_t> involved(const BatchBuilder& out, std::size_t row) {
  const std::span<const std::size_t> indices = out.indices();
  std::vector<std::size_t> ids;
  if (!indices.empty()) ids.push_back(indices[0]);
  if (row < indices.size() && row != 0) ids.push_back(indices[row]);
  return ids;
}

// Row `row` of the batch does not match its first row in field `field`.
[[noreturn]] void throw_mismatch(const BatchBuilder& out, std::size_t row, const std::string& field,
                                 DType want_dtype, const std::string& want_shape, const Tensor* got,
                                 std::string_view what, std::string_view remedy) {
  const std::string here = sample_name(out, row);
  const std::string first = sample_name(out, 0) + " (the batch's first)";
  std::string message;
  if (got == nullptr) {
    message = fmt::format(
        "collate: {} has no field '{}', which {} has; every sample of a batch must have the "
        "same fields",
        here, field, first);
  } else if (what == "dtype") {
    message = fmt::format(
        "collate: field '{}' of {} is {} but {} has {}; convert it in get() so every sample "
        "has the same dtype",
        field, here, dtype_name(got->dtype()), first, dtype_name(want_dtype));
  } else {
    message = fmt::format("collate: field '{}' of {} has shape {} but {} has {}; {}", field, here,
                          got->shape().to_string(), first, want_shape, remedy);
  }
  throw CollateError(field, involved(out, row), std::move(message));
}

[[noreturn]] void throw_extra_field(const BatchBuilder& out, std::size_t row,
                                    const std::string& field) {
  throw CollateError(field, involved(out, row),
                     fmt::format("collate: {} has a field '{}' that {} (the batch's first) does "
                                 "not have; every sample of a batch must have the same fields",
                                 sample_name(out, row), field, sample_name(out, 0)));
}

constexpr std::string_view kStackRemedy =
    "samples must have equal shapes to be stacked: resize or pad them in get(), or use "
    "collate_ragged for fields whose first dimension varies";

}  // namespace

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
    const Tensor* t = j < fields.size() && fields[j].name == column.name
                          ? &fields[j].tensor
                          : sample.find(column.name);
    if (t == nullptr) mismatch(column, nullptr, "missing");
    if (t->dtype() != column.dtype) mismatch(column, t, "dtype");
    if (!(t->shape() == column.shape)) mismatch(column, t, "shape");
    std::memcpy(column.dst + count_ * column.row_bytes, t->raw_data(), column.row_bytes);
  }
  if (fields.size() != columns_.size()) {
    for (const auto& [name, tensor] : fields) {
      bool known = false;
      for (const Column& column : columns_) known = known || column.name == name;
      if (!known) throw_extra_field(out_, count_, name);
    }
  }
  ++count_;
}

void StackCollator::mismatch(const Column& column, const Tensor* got, std::string_view what) const {
  throw_mismatch(out_, count_, column.name, column.dtype, column.shape.to_string(), got, what,
                 kStackRemedy);
}

void collate_stack(std::span<const Sample> samples, BatchBuilder& out) {
  StackCollator stack(out);
  for (const Sample& sample : samples) stack.add(sample);
}

CollateFn collate_ragged(std::vector<std::string> ragged_fields) {
  return [ragged = std::move(ragged_fields)](std::span<const Sample> samples, BatchBuilder& out) {
    if (samples.empty()) return;
    const Sample& first = samples[0];
    for (std::size_t row = 1; row < samples.size(); ++row) {
      for (const auto& [name, tensor] : samples[row]) {
        if (!first.contains(name)) throw_extra_field(out, row, name);
      }
    }
    for (const auto& [name, proto] : first) {
      const bool is_ragged = std::find(ragged.begin(), ragged.end(), name) != ragged.end();
      // Every row's tensor for this field, checked against the first.
      std::vector<const Tensor*> column(samples.size());
      for (std::size_t row = 0; row < samples.size(); ++row) {
        const Tensor* t = samples[row].find(name);
        if (t == nullptr) {
          throw_mismatch(out, row, name, proto.dtype(), proto.shape().to_string(), nullptr, "", "");
        }
        if (t->dtype() != proto.dtype()) {
          throw_mismatch(out, row, name, proto.dtype(), proto.shape().to_string(), t, "dtype", "");
        }
        column[row] = t;
      }
      if (!is_ragged) {
        Tensor dst = out.alloc(name, proto.dtype(),
                               proto.shape().prepend(static_cast<std::int64_t>(samples.size())));
        for (std::size_t row = 0; row < samples.size(); ++row) {
          if (!(column[row]->shape() == proto.shape())) {
            throw_mismatch(out, row, name, proto.dtype(), proto.shape().to_string(), column[row],
                           "shape", kStackRemedy);
          }
          std::memcpy(dst.raw_data() + row * proto.nbytes(), column[row]->raw_data(),
                      proto.nbytes());
        }
        continue;
      }
      // Ragged: the rows' values one after another, and where each row starts.
      if (proto.dim() == 0) {
        throw CollateError(name, involved(out, 0),
                           fmt::format("collate_ragged: field '{}' of {} is a scalar; a ragged "
                                       "field needs a first dimension to vary",
                                       name, sample_name(out, 0)));
      }
      const std::span<const std::int64_t> tail = proto.shape().dims().subspan(1);
      const std::string want = fmt::format("[n, {}]", fmt::join(tail, ", "));
      std::int64_t total = 0;
      for (std::size_t row = 0; row < samples.size(); ++row) {
        const Shape& shape = column[row]->shape();
        const bool same_tail =
            shape.size() == proto.dim() &&
            std::equal(tail.begin(), tail.end(), shape.dims().subspan(1).begin());
        if (!same_tail) {
          throw_mismatch(out, row, name, proto.dtype(), want, column[row], "shape",
                         "a ragged field may vary only in its first dimension");
        }
        total += shape[0];
      }
      std::vector<std::int64_t> values_dims{total};
      values_dims.insert(values_dims.end(), tail.begin(), tail.end());
      Tensor values =
          out.alloc(name, proto.dtype(), Shape(std::span<const std::int64_t>(values_dims)));
      Tensor offsets = out.alloc(name + ".offsets", DType::kInt64,
                                 {static_cast<std::int64_t>(samples.size() + 1)});
      std::int64_t* off = offsets.data<std::int64_t>();
      std::byte* dst = values.raw_data();
      off[0] = 0;
      for (std::size_t row = 0; row < samples.size(); ++row) {
        std::memcpy(dst, column[row]->raw_data(), column[row]->nbytes());
        dst += column[row]->nbytes();
        off[row + 1] = off[row] + column[row]->shape()[0];
      }
    }
  };
}

}  // namespace stoker
