#include "ipc/slot_io.hpp"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "data/error_text.hpp"
#include "data/format.hpp"
#include "data/random_state.hpp"
#include "stoker/errors.hpp"
#include "stoker/worker_info.hpp"

namespace stoker::detail {
namespace {

struct DescriptorHead {
  std::uint32_t num_fields;
  std::uint32_t reserved;
};
struct FieldHead {
  std::uint64_t offset;
  std::uint64_t nbytes;
  std::uint32_t name_length;
  std::uint8_t dtype;
  std::uint8_t ndim;
  std::uint16_t reserved;
};
static_assert(sizeof(DescriptorHead) == 8 && sizeof(FieldHead) == 24);

std::size_t record_bytes(std::size_t ndim, std::size_t name_length) {
  return sizeof(FieldHead) + ndim * sizeof(std::int64_t) + round_up(name_length, 8);
}

[[noreturn]] void malformed(std::size_t slot, std::string_view what) {
  throw Error(fmt::format(
      "DataLoader: batch slot {} holds a malformed descriptor ({}); something wrote over the "
      "slot, most likely memory corruption in user code in a worker",
      slot, what));
}

}  // namespace

SlotWriter::SlotWriter(const Ring& ring, SlotMemory& memory, std::size_t slot, Channel* channel,
                       bool skip_samples, bool time_stages)
    : ring_(ring),
      memory_(memory),
      slot_(slot),
      channel_(channel),
      header_(ring.header(slot)),
      indices_(reinterpret_cast<const std::size_t*>(ring.indices(slot)), header_.num_indices),
      cursor_(Ring::payload_start(header_.num_indices)),
      rows_(header_.num_indices),
      skip_samples_(skip_samples),
      time_stages_(time_stages) {
  header_.num_kept = header_.num_indices;
  header_.exhausted = 0;
  header_.num_skipped = 0;
  if (skip_samples_) {
    skipped_.reserve(indices_.size());
    scratch_.reserve(indices_.size());
  }
}

void SlotWriter::skip_sample() noexcept {
  if (skipped_.empty()) {
    const CaughtException caught = describe_current_exception();
    header_.skipped.set(sample_, header_.batch, where_, caught.type_name, caught.message);
  }
  ++header_.num_skipped;
  try {
    skipped_.push_back(position_ - 1);  // reserved for map-style batches: cannot allocate
  } catch (...) {
    // An iterable batch has no indices to reorder: its skipped positions are not needed.
  }
}

void SlotWriter::begin_stream_sample(std::uint64_t position) {
  const WorkerInfo* info = worker_info();
  const std::uint64_t worker = info == nullptr ? 0 : info->id;
  sample_ = kNoSample;
  ++position_;
  begin_sample_rng(header_.seed, header_.epoch, (worker << 40) | position);
  if (channel_ != nullptr && channel_->stop_requested.load(std::memory_order_relaxed) != 0) {
    throw Cancelled{};
  }
}

void SlotWriter::begin_collate(std::size_t rows) noexcept {
  where_ = "collate";
  rows_ = rows;
  header_.num_kept = rows;
  // An error or a crash from here on is in the collate, not in any one sample's get().
  sample_ = kNoSample;
  end_sample_rng();
  if (channel_ != nullptr) channel_->current_sample.store(kNoSample, std::memory_order_relaxed);
  if (skipped_.empty()) return;
  // Kept indices first, in batch order, then the skipped ones: main reads both.
  std::uint64_t* indices = ring_.indices(slot_);
  const std::size_t n = header_.num_indices;
  std::size_t next_skipped = 0;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (next_skipped < skipped_.size() && skipped_[next_skipped] == i) {
      scratch_.push_back(indices[i]);
      ++next_skipped;
    } else {
      indices[kept++] = indices[i];
    }
  }
  for (std::size_t i = 0; i < scratch_.size(); ++i) indices[kept + i] = scratch_[i];
  indices_ = std::span<const std::size_t>(reinterpret_cast<const std::size_t*>(indices), kept);
}

Tensor SlotWriter::alloc(std::string_view name, DType dtype, const Shape& shape) {
  if (name.empty()) throw std::invalid_argument("BatchBuilder::alloc: the field name is empty");
  for (const FieldRecord& field : fields_) {
    if (field.name == name) {
      throw std::invalid_argument(
          fmt::format("BatchBuilder::alloc: the batch already has a field named '{}'", name));
    }
  }
  std::size_t nbytes = dtype_size(dtype);
  if (nbytes == 0) {
    throw std::invalid_argument(fmt::format(
        "BatchBuilder::alloc: dtype value {} is not a stoker::DType", static_cast<int>(dtype)));
  }
  for (const std::int64_t d : shape) {
    if (__builtin_mul_overflow(nbytes, static_cast<std::size_t>(d), &nbytes)) {
      nbytes = ~std::size_t{0};
      break;
    }
  }
  const std::size_t offset = round_up(cursor_, kCacheLine);
  if (nbytes > ring_.slot_bytes() - offset) {
    throw Error(fmt::format(
        "BatchBuilder::alloc: field '{}' ({} x {}, {}) does not fit in the slot: {} are used of "
        "{} (LoaderOptions::max_batch_bytes); raise max_batch_bytes or lower batch_size",
        name, shape.to_string(), dtype_name(dtype),
        nbytes == ~std::size_t{0} ? std::string("more than 16 EiB") : format_bytes(nbytes),
        format_bytes(offset), format_bytes(ring_.slot_bytes())));
  }
  memory_.ensure(slot_, offset + nbytes);
  fields_.push_back({std::string(name), dtype, shape, offset, nbytes});
  cursor_ = offset + nbytes;
  return Tensor::view(dtype, shape, ring_.slot(slot_) + offset, nullptr);
}

void SlotWriter::begin_sample(std::size_t index) {
  sample_ = index;
  ++position_;
  begin_sample_rng(header_.seed, header_.epoch, index);
  if (channel_ != nullptr) {
    channel_->current_sample.store(index, std::memory_order_relaxed);
    // Relaxed: main's stop request needs no ordering, only to be seen soon.
    if (channel_->stop_requested.load(std::memory_order_relaxed) != 0) throw Cancelled{};
  }
}

void SlotWriter::finish() {
  std::size_t bytes = sizeof(DescriptorHead);
  for (const FieldRecord& f : fields_) bytes += record_bytes(f.shape.size(), f.name.size());
  const std::size_t offset = round_up(cursor_, 8);
  if (bytes > ring_.slot_bytes() - offset) {
    throw Error(fmt::format(
        "DataLoader: the batch's description does not fit in the slot ({} used of {}); raise "
        "LoaderOptions::max_batch_bytes",
        format_bytes(offset), format_bytes(ring_.slot_bytes())));
  }
  memory_.ensure(slot_, offset + bytes);
  std::byte* out = ring_.slot(slot_) + offset;
  const DescriptorHead head{static_cast<std::uint32_t>(fields_.size()), 0};
  std::memcpy(out, &head, sizeof head);
  out += sizeof head;
  for (const FieldRecord& f : fields_) {
    const FieldHead field{f.offset,
                          f.nbytes,
                          static_cast<std::uint32_t>(f.name.size()),
                          static_cast<std::uint8_t>(f.dtype),
                          static_cast<std::uint8_t>(f.shape.size()),
                          0};
    std::memcpy(out, &field, sizeof field);
    out += sizeof field;
    std::memcpy(out, f.shape.begin(), f.shape.size() * sizeof(std::int64_t));
    out += f.shape.size() * sizeof(std::int64_t);
    std::memcpy(out, f.name.data(), f.name.size());
    std::memset(out + f.name.size(), 0, round_up(f.name.size(), 8) - f.name.size());
    out += round_up(f.name.size(), 8);
  }
  header_.descriptor_offset = offset;
  header_.descriptor_bytes = bytes;
  header_.status = SlotStatus::kOk;
}

void SlotWriter::fail_with_current_exception() noexcept {
  const CaughtException caught = describe_current_exception();
  header_.error.set(sample_, header_.batch, caught.is_collate_error ? "collate" : where_,
                    caught.type_name, caught.message);
  header_.status = SlotStatus::kError;
}

LoadOutcome load_batch(const Ring& ring, SlotMemory& memory, std::size_t s, Channel* channel,
                       const ProduceFn& produce, bool skip_samples, bool time_stages,
                       std::exception_ptr* error) noexcept {
  SlotHeader& header = ring.header(s);
  header.status = SlotStatus::kEmpty;
  header.exhausted = 0;  // read with an error too: never left over from the slot's last batch
  header.start_ns = now_ns();
  header.get_ns = 0;
  header.collate_ns = 0;
  header.stages_timed = 0;
  if (channel != nullptr) channel->current_batch.store(header.batch + 1, std::memory_order_relaxed);
  LoadOutcome outcome = LoadOutcome::kOk;
  std::optional<SlotWriter> writer;
  try {
    writer.emplace(ring, memory, s, channel, skip_samples, time_stages);
    produce(*writer);
    writer->finish();
  } catch (const Cancelled&) {
    outcome = LoadOutcome::kCancelled;
  } catch (...) {
    if (writer) {
      writer->fail_with_current_exception();
    } else {
      header.error.set(kNoSample, header.batch, "loader", "std::bad_alloc", "out of memory");
      header.status = SlotStatus::kError;
    }
    if (error != nullptr) *error = std::current_exception();
    outcome = LoadOutcome::kError;
  }
  end_sample_rng();
  header.end_ns = now_ns();
  if (channel != nullptr) {
    channel->current_sample.store(kNoSample, std::memory_order_relaxed);
    channel->current_batch.store(0, std::memory_order_relaxed);
  }
  return outcome;
}

std::vector<Field> read_fields(const Ring& ring, std::size_t s,
                               const std::shared_ptr<const void>& keeper) {
  const SlotHeader& header = ring.header(s);
  const std::size_t capacity = ring.slot_bytes();
  const std::size_t offset = header.descriptor_offset;
  const std::size_t bytes = header.descriptor_bytes;
  if (offset > capacity || bytes > capacity - offset || bytes < sizeof(DescriptorHead)) {
    malformed(s, fmt::format("descriptor at {} of {} bytes", offset, bytes));
  }
  std::byte* const base = ring.slot(s);
  const std::byte* in = base + offset;
  const std::byte* const end = in + bytes;
  DescriptorHead head;
  std::memcpy(&head, in, sizeof head);
  in += sizeof head;
  std::vector<Field> fields;
  fields.reserve(head.num_fields);
  for (std::uint32_t i = 0; i < head.num_fields; ++i) {
    FieldHead field;
    if (static_cast<std::size_t>(end - in) < sizeof field) malformed(s, "truncated field record");
    std::memcpy(&field, in, sizeof field);
    in += sizeof field;
    if (!is_valid_dtype(field.dtype)) malformed(s, fmt::format("dtype {}", field.dtype));
    if (field.ndim > Shape::kMaxDims) malformed(s, fmt::format("{} dimensions", field.ndim));
    const std::size_t rest = static_cast<std::size_t>(end - in);
    if (rest < record_bytes(field.ndim, field.name_length) - sizeof field) {
      malformed(s, "truncated field record");
    }
    std::int64_t dims[Shape::kMaxDims];
    std::memcpy(dims, in, field.ndim * sizeof(std::int64_t));
    in += field.ndim * sizeof(std::int64_t);
    std::string name(reinterpret_cast<const char*>(in), field.name_length);
    in += round_up(field.name_length, 8);
    for (std::size_t d = 0; d < field.ndim; ++d) {
      if (dims[d] < 0) malformed(s, fmt::format("negative dimension in field '{}'", name));
    }
    const Shape shape(std::span<const std::int64_t>(dims, field.ndim));
    const auto dtype = static_cast<DType>(field.dtype);
    if (field.offset > capacity || field.nbytes > capacity - field.offset ||
        field.nbytes != shape.numel() * dtype_size(dtype)) {
      malformed(s, fmt::format("field '{}' at {} of {} bytes", name, field.offset, field.nbytes));
    }
    fields.emplace_back(std::move(name), Tensor::view(dtype, shape, base + field.offset,
                                                      std::shared_ptr<const void>(keeper)));
  }
  return fields;
}

}  // namespace stoker::detail
