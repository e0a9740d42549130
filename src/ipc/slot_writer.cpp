#include "ipc/slot_writer.hpp"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "data/error_text.hpp"
#include "data/format.hpp"
#include "data/random_state.hpp"
#include "ipc/field_codec.hpp"
#include "os/posix.hpp"
#include "os/proc.hpp"
#include "stoker/errors.hpp"
#include "stoker/worker_info.hpp"

namespace stoker::detail {
namespace {

[[noreturn]] void malformed(std::size_t slot, std::string_view what) {
  throw Error(fmt::format(
      "DataLoader: batch slot {} holds a malformed descriptor ({}); something wrote over the "
      "slot, most likely memory corruption in user code in a worker",
      slot, what));
}

// The pages only this process has written to its private mappings (not the ring's, which the
// estimate counts as the ring), and what it held and gave back (VmHWM - VmRSS: a decoder's
// buffers), as the probe counts them. A fork starts the child's VmHWM afresh, so the parent's
// peak is not in it. Empty when /proc cannot tell.
std::optional<std::uint64_t> own_memory_bytes() noexcept {
  try {
    // Yielding between its reads (thousands of mappings in a process that has imported torch:
    // milliseconds): the worker has just posted its first result, and a main process that
    // its wake-up pushed off this CPU gets it back to take that result.
    if (const std::optional<std::uint64_t> own = read_own_private_anonymous(true)) {
      const std::optional<ResidentPeak> rss = read_own_resident_peak();
      return *own + (rss ? rss->peak_bytes - rss->now_bytes : 0);
    }
  } catch (...) {  // unknown: the estimate keeps its default
  }
  return std::nullopt;
}

// Set by the first sample of a task with report_memory; this process's only loading thread
// reads it after that task (report_private_memory).
bool private_memory_pending = false;

}  // namespace

void report_private_memory(Channel& channel, Doorbell& main_doorbell, int main_eventfd) noexcept {
  if (!private_memory_pending) return;
  private_memory_pending = false;
  channel.first_private_bytes = own_memory_bytes().value_or(0);
  channel.private_reported.store(1, std::memory_order_release);  // pairs with main's acquire
  ring_doorbell(main_doorbell, main_eventfd);
}

SlotWriter::SlotWriter(const Ring& ring, SlotMemory& memory, std::size_t slot, Channel* channel,
                       int main_eventfd, bool skip_samples, bool time_stages)
    : ring_(ring),
      memory_(memory),
      slot_(slot),
      channel_(channel),
      main_eventfd_(main_eventfd),
      header_(ring.header(slot)),
      // A split batch 0's host slot loads only its part, into fields sized for the whole batch.
      indices_(reinterpret_cast<const std::size_t*>(ring.indices(slot)),
               header_.num_to_load != 0 ? header_.num_to_load : header_.num_indices),
      cursor_(Ring::payload_start(header_.num_indices)),
      rows_(header_.num_indices),
      skip_samples_(skip_samples),
      time_stages_(time_stages),
      claimable_(header_.claimable != 0) {
  header_.num_kept = indices_.size();
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
  for (const AllocatedField& field : fields_) {
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
  const std::size_t offset = round_up(cursor_, kFieldAlignment);
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

bool SlotWriter::claim_row() noexcept {
  // SlotHeader::claim: row position_ is this task's unless main has lowered the limit to it.
  std::uint64_t claim = header_.claim.load(std::memory_order_relaxed);
  for (;;) {
    const std::uint64_t begun = claim & 0xffffffffU;
    if (begun >= (claim >> 32)) return false;
    if (header_.claim.compare_exchange_weak(claim, claim + 1, std::memory_order_relaxed)) {
      return true;
    }
  }
}

bool SlotWriter::begin_sample(std::size_t index) {
  if (claimable_ && !claim_row()) return false;
  sample_ = index;
  ++position_;
  begin_sample_rng(header_.seed, header_.epoch, index);
  if (channel_ != nullptr) {
    channel_->current_sample.store(index, std::memory_order_relaxed);
    // Relaxed: main's stop request needs no ordering, only to be seen soon.
    if (channel_->stop_requested.load(std::memory_order_relaxed) != 0) throw Cancelled{};
  }
  return true;
}

void SlotWriter::first_sample_loaded(const Sample& sample) {
  if (header_.report_memory == 0 || channel_ == nullptr) return;
  std::size_t bytes = 0;
  for (const Field& field : sample.fields()) bytes += field.tensor.nbytes();
  channel_->first_sample_bytes = bytes;
  // The worker's own memory is measured after this task (report_private_memory): reading
  // smaps takes 20-30 ms in a process that has imported torch, which the first batch would
  // wait for here.
  private_memory_pending = true;
  channel_->first_reported.store(1, std::memory_order_release);  // pairs with main's acquire
  ring_doorbell(ring_.control().main_doorbell, main_eventfd_);
  // Until the check passed (first_gate, release by main: nothing else to read) or main asks
  // this worker to stop; a bounded sleep, so a stop request is seen within 10 ms.
  while (channel_->first_gate.load(std::memory_order_acquire) == 0) {
    if (channel_->stop_requested.load(std::memory_order_relaxed) != 0) throw Cancelled{};
    (void)posix::futex_wait(channel_->first_gate, 0, 10);
  }
}

void SlotWriter::finish() {
  std::vector<FieldRecord> records;
  records.reserve(fields_.size());
  for (const AllocatedField& f : fields_) records.push_back(f);
  const std::size_t bytes = field_table_bytes(records);
  const std::size_t offset = round_up(cursor_, 8);
  if (bytes > ring_.slot_bytes() - offset) {
    throw Error(fmt::format(
        "DataLoader: the batch's description does not fit in the slot ({} used of {}); raise "
        "LoaderOptions::max_batch_bytes",
        format_bytes(offset), format_bytes(ring_.slot_bytes())));
  }
  memory_.ensure(slot_, offset + bytes);
  write_field_table(ring_.slot(slot_) + offset, records);
  header_.descriptor_offset = offset;
  header_.descriptor_bytes = bytes;
  if (claimable_) header_.num_kept = position_;  // the rows it claimed; main joins the rest
  header_.status = SlotStatus::kOk;
}

void SlotWriter::fail_with_current_exception() noexcept {
  const CaughtException caught = describe_current_exception();
  header_.error.set(sample_, header_.batch, caught.is_collate_error ? "collate" : where_,
                    caught.type_name, caught.message);
  header_.status = SlotStatus::kError;
}

LoadOutcome load_batch(const Ring& ring, SlotMemory& memory, std::size_t s, Channel* channel,
                       int main_eventfd, const ProduceFn& produce, bool skip_samples,
                       bool time_stages, std::exception_ptr* error) noexcept {
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
    writer.emplace(ring, memory, s, channel, main_eventfd, skip_samples, time_stages);
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
  if (header.magic != kRingMagic) malformed(s, "the slot header's magic");
  const std::size_t capacity = ring.slot_bytes();
  const std::size_t offset = header.descriptor_offset;
  const std::size_t bytes = header.descriptor_bytes;
  if (offset > capacity || bytes > capacity - offset) {
    malformed(s, fmt::format("descriptor at {} of {} bytes", offset, bytes));
  }
  try {
    return read_field_table(ring.slot(s) + offset, bytes, ring.slot(s), capacity, keeper);
  } catch (const FieldTableError& e) {
    malformed(s, e.what());
  }
}

}  // namespace stoker::detail
