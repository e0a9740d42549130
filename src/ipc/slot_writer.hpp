// Writing a batch into a slot (in whichever process loads it: a worker, or the main process
// when num_workers == 0) and reading it back as zero-copy tensors (main process).
//
// A slot, from its start: SlotHeader | indices (uint64) | fields, each kFieldAlignment-aligned |
// the field table (field_codec.hpp), written last, with offsets from the slot's start.
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ipc/field_codec.hpp"
#include "ipc/ring.hpp"
#include "stoker/detail/batch_sink.hpp"
#include "stoker/sample.hpp"

namespace stoker::detail {

// Thrown by SlotWriter::begin_sample when the main process asked the worker to stop.
struct Cancelled {};

class SlotWriter final : public BatchSink {
 public:
  // `channel` is the loading worker's, or nullptr in the main process; `main_eventfd` the main
  // doorbell's eventfd (a worker's; -1 in the main process). `skip_samples`:
  // OnSampleError::kSkip.
  SlotWriter(const Ring& ring, SlotMemory& memory, std::size_t slot, Channel* channel,
             int main_eventfd, bool skip_samples, bool time_stages);

  Tensor alloc(std::string_view name, DType dtype, const Shape& shape) override;
  std::span<const std::size_t> indices() const noexcept override { return indices_; }
  std::size_t batch_size() const noexcept override { return rows_; }
  std::uint64_t epoch() const noexcept override { return header_.epoch; }
  bool begin_sample(std::size_t index) override;
  void begin_stream_sample(std::uint64_t position) override;
  std::uint64_t epoch_run() const noexcept override { return header_.plan; }
  void mark_exhausted() noexcept override { header_.exhausted = 1; }
  void begin_collate(std::size_t rows) noexcept override;
  bool skips_samples() const noexcept override { return skip_samples_; }
  void skip_sample() noexcept override;
  bool time_stages() const noexcept override { return time_stages_; }
  void add_stage_times(std::uint64_t get_ns, std::uint64_t collate_ns) noexcept override {
    header_.get_ns += get_ns;
    header_.collate_ns += collate_ns;
    header_.stages_timed = 1;
  }
  // With report_memory in a worker: the first-sample gate (ring.hpp, Channel::first_gate).
  void first_sample_loaded(const Sample& sample) override;

  // SlotHeader::claim: takes the next row; false when main gave the rest to other workers.
  bool claim_row() noexcept;
  // Writes the descriptor and marks the slot kOk.
  void finish();
  // Inside a catch block: records the exception being handled and marks the slot kError.
  void fail_with_current_exception() noexcept;

 private:
  struct AllocatedField {
    std::string name;
    DType dtype;
    Shape shape;
    std::size_t offset;
    std::size_t nbytes;
    operator FieldRecord() const noexcept {
      return {name, dtype, std::span<const std::int64_t>(shape.begin(), shape.size()), offset,
              nbytes};
    }
  };
  const Ring& ring_;
  SlotMemory& memory_;
  std::size_t slot_;
  Channel* channel_;
  int main_eventfd_;
  SlotHeader& header_;
  std::span<const std::size_t> indices_;
  std::vector<AllocatedField> fields_;
  std::size_t cursor_;
  std::size_t rows_;
  std::uint64_t sample_ = kNoSample;
  std::size_t position_ = 0;  // begin_sample() calls so far: the current sample is position_ - 1
  const char* where_ = "get()";
  bool skip_samples_;
  bool time_stages_;
  bool claimable_;                    // SlotHeader::claimable: each row taken through claim_row()
  std::vector<std::size_t> skipped_;  // positions of skipped samples (reserved when skipping)
  std::vector<std::uint64_t> scratch_;
};

enum class LoadOutcome { kOk, kError, kCancelled };

// Loads the batch described by slot `s`'s header: runs `produce` through a SlotWriter and leaves
// the slot kOk or kError, with its start and end times (and, when `time_stages`, the time
// inside get() and the collate) in the header. When `error` is given, a failure's exception is
// stored there too (the main process nests it in the WorkerException). Never throws.
// In a worker, after the task whose first sample reported for the first-sample gate (and
// after its result was posted): measures the worker's own memory, stores it in the channel's
// first_private_bytes, sets private_reported (release) and rings the main doorbell. Nothing
// when no such task ran since the last call.
void report_private_memory(Channel& channel, Doorbell& main_doorbell, int main_eventfd) noexcept;

LoadOutcome load_batch(const Ring& ring, SlotMemory& memory, std::size_t s, Channel* channel,
                       int main_eventfd, const ProduceFn& produce, bool skip_samples,
                       bool time_stages, std::exception_ptr* error) noexcept;

// Which batches a loading process times stage by stage: every one that is slow enough for a
// few clock reads per sample not to matter, and one in kEvery otherwise (the per-stage split
// is then an estimate from those; the busy time is measured on every batch).
class StagePolicy {
 public:
  bool next() noexcept { return last_ns_ >= kSlowNs || count_++ % kEvery == 0; }
  void record(const SlotHeader& header) noexcept { last_ns_ = header.end_ns - header.start_ns; }

 private:
  static constexpr std::uint64_t kSlowNs = 200'000;
  static constexpr std::uint64_t kEvery = 64;
  std::uint64_t count_ = 0;
  std::uint64_t last_ns_ = 0;
};

// Main process: the fields of the kOk batch in slot `s`, as views kept alive by `keeper`.
// Throws stoker::Error when the descriptor is malformed.
std::vector<Field> read_fields(const Ring& ring, std::size_t s,
                               const std::shared_ptr<const void>& keeper);

}  // namespace stoker::detail
