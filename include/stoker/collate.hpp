// Collate: how the samples of a batch become the batch's tensors. The default stacks each field
// along a new leading dimension, writing straight into the batch's shared-memory slot one sample
// at a time (a worker never holds a whole batch of samples). A user collate receives the samples
// and allocates the batch's tensors inside the slot through a BatchBuilder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/sample.hpp"
#include "stoker/tensor.hpp"

namespace stoker {

// Where a batch is being written. Implemented by the loader; runs in the process that loads
// the batch (a worker, or the main process when num_workers == 0).
class BatchBuilder {
 public:
  virtual ~BatchBuilder() = default;

  // Allocates the batch field `name` inside the slot and returns a writable view of it with
  // uninitialised contents. Fields keep the order of their alloc() calls. Throws
  // std::invalid_argument for an empty or repeated name, and stoker::Error when the batch would
  // exceed LoaderOptions::max_batch_bytes or shared memory cannot be backed.
  virtual Tensor alloc(std::string_view name, DType dtype, const Shape& shape) = 0;

  // Dataset indices of the samples of this batch, in batch order (empty for an iterable
  // dataset, whose samples have no index).
  virtual std::span<const std::size_t> indices() const noexcept = 0;
  // Number of samples in this batch.
  virtual std::size_t batch_size() const noexcept = 0;
  virtual std::uint64_t epoch() const noexcept = 0;
};

// A user collate: build the batch from its samples (samples.size() == out.batch_size()).
using CollateFn = std::function<void(std::span<const Sample> samples, BatchBuilder& out)>;

// The default collate, fed one sample at a time. The first sample fixes the fields, dtypes and
// shapes; each later sample must match them or add() throws CollateError naming the field, the
// two sample indices and both shapes.
class StackCollator {
 public:
  explicit StackCollator(BatchBuilder& out);
  // Copies `sample` into row count() of every field.
  void add(const Sample& sample);
  std::size_t count() const noexcept { return count_; }

 private:
  struct Column {
    std::string name;
    DType dtype;
    Shape shape;  // of one sample
    std::size_t row_bytes;
    std::byte* dst;
  };
  void start(const Sample& first);
  [[noreturn]] void mismatch(const Column& column, const Tensor* got, std::string_view what) const;
  BatchBuilder& out_;
  std::vector<Column> columns_;
  std::size_t count_ = 0;
};

// The default collate as a CollateFn, for composing with user code.
void collate_stack(std::span<const Sample> samples, BatchBuilder& out);

// A collate for fields whose first dimension varies between samples (token sequences, boxes):
// each field named in `ragged_fields` becomes "<name>", the rows' values one after another
// (shape [total, ...]), and "<name>.offsets", int64[B + 1], where row r is
// values[offsets[r] .. offsets[r + 1]). The other fields are stacked. Throws CollateError when
// a ragged field's other dimensions or dtype differ between samples, or it is a scalar.
CollateFn collate_ragged(std::vector<std::string> ragged_fields);

}  // namespace stoker
