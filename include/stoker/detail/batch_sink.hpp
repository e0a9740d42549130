// BatchSink: the builder a DataLoader's produce function writes one batch through (a
// BatchBuilder with the loader's hooks for error reports, streams and the memory check), and
// ProduceFn, the type-erased "write this batch" function. Implemented by the slot writer
// (src/ipc/slot_writer.hpp) in whichever process loads the batch; header-only here so that the
// ipc layer and DataLoader<D> share it without either reaching into the other.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "stoker/collate.hpp"
#include "stoker/sample.hpp"

namespace stoker::detail {

// The builder the produce function writes through; the loader's hooks for error reports.
class BatchSink : public BatchBuilder {
 public:
  // Called before loading each sample, so a crash or an exception can name it. Throws an
  // internal exception when the loader asked the worker to stop: let it propagate. False: this
  // task loads no more samples (it became one part of a split batch): end the loop there.
  [[nodiscard]] virtual bool begin_sample(std::size_t index) = 0;
  // Iterable datasets: called before each next() with the sample's position in this worker's
  // stream this epoch (it has no index; sample_rng() is seeded from the position).
  virtual void begin_stream_sample(std::uint64_t position) = 0;
  // Which run of an epoch this batch belongs to: different for every begin(), even of the same
  // epoch number, so a stream knows when to restart.
  virtual std::uint64_t epoch_run() const noexcept = 0;
  // Iterable datasets: the stream ended (next() returned nullopt).
  virtual void mark_exhausted() noexcept = 0;
  // Called once the samples are loaded, before a collate that receives them all: `rows` of
  // them. From then on batch_size() is rows, and indices() lists only the samples kept.
  virtual void begin_collate(std::size_t rows) noexcept = 0;
  // True when a sample whose get() throws is to be dropped (OnSampleError::kSkip).
  virtual bool skips_samples() const noexcept = 0;
  // Inside a catch block around get(): drops the current sample and records why.
  virtual void skip_sample() noexcept = 0;
  // Whether this batch's stages are to be timed sample by sample (a clock read per sample is
  // too dear to pay on every batch of tiny samples: the loader times one batch in several).
  virtual bool time_stages() const noexcept = 0;
  // Nanoseconds spent inside get() / next() and inside the collate, for stats.
  virtual void add_stage_times(std::uint64_t get_ns, std::uint64_t collate_ns) noexcept = 0;
  // The default collate's first sample of the batch, before anything is allocated for it. In
  // the first task a worker gets while the memory check waits for figures, this reports the
  // sample's bytes and the worker's memory, and blocks until the check has passed (or the
  // loader stops the worker): one get() per worker, never a whole batch, before a refusal.
  virtual void first_sample_loaded(const Sample& sample) = 0;
};

// A steady-clock reading in nanoseconds (the same clock in every process of a loader).
inline std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

using ProduceFn = std::function<void(BatchSink&)>;

// The memory probe's child: sample_rng() inside the next get() is seeded as for `index` in
// epoch 0 (the probe only measures sizes, but get() may draw random numbers).
void begin_probe_sample(std::size_t index) noexcept;

}  // namespace stoker::detail
