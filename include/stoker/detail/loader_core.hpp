// LoaderCore: the non-template engine behind DataLoader<D>. The template turns a dataset and a
// collate into one ProduceFn ("write the batch whose indices the sink holds"); everything else —
// the shared-memory ring, worker processes, ordering, liveness — lives in src/ behind this.
#pragma once

#include <sys/types.h>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/batch.hpp"
#include "stoker/collate.hpp"
#include "stoker/detail/batch_sink.hpp"
#include "stoker/memory.hpp"
#include "stoker/options.hpp"
#include "stoker/stats.hpp"

namespace stoker {
class BatchIterator;
}

namespace stoker::detail {

// What the template knows of its dataset, for the memory estimate.
struct DatasetProbe {
  // Loads a few samples and reports each one's bytes; empty when it cannot.
  std::function<void(const std::function<void(std::size_t)>& report)> sample_bytes;
  std::size_t cache_bytes = 0;     // a CachedDataset's budget
  std::size_t download_bytes = 0;  // remote shards: download buffers of each loading process
  // Map-style: the dataset's size, for the epoch plans; empty for an iterable dataset.
  std::function<std::size_t()> dataset_size;
};

class LoaderCore {
 public:
  // Main process. Validates the options (std::invalid_argument). Forks nothing yet.
  // `dataset_size` is empty for an iterable dataset.
  LoaderCore(LoaderOptions options, std::function<std::size_t()> dataset_size, ProduceFn produce,
             DatasetProbe probe);
  // Stops and reaps every worker (bounded: stop message, SIGTERM, SIGKILL). Never throws.
  ~LoaderCore();
  LoaderCore(const LoaderCore&) = delete;
  LoaderCore& operator=(const LoaderCore&) = delete;

  // Every call below but options() keeps the thread rule (data_loader.hpp): it throws
  // std::logic_error when another thread is inside a call of this loader or its iterators
  // (finish() never throws: it leaves the epoch to the next call instead).
  const LoaderOptions& options() const noexcept;
  // The worker count the loader runs (kAuto resolved, at the first call if needed).
  std::size_t num_workers();
  std::size_t num_batches() const;
  void set_epoch(std::uint64_t epoch);
  std::uint64_t epoch() const;
  // Starts an epoch (ending any previous one) and returns its iterator. May fork workers.
  BatchIterator begin();
  // Live worker processes, in worker-id order; empty when none are running.
  std::vector<pid_t> worker_pids() const;
  LoaderStats stats() const;
  MemoryEstimate memory_estimate();
  std::string state() const;
  void load_state(std::string_view state);

  // The iterator protocol. `generation` identifies the epoch an iterator belongs to.
  std::optional<Batch> next(std::uint64_t generation);
  void finish(std::uint64_t generation) noexcept;

  struct Impl;

  // The thread rule for one BatchIterator call, held for its scope, so that the iterator's own
  // members are guarded as well as the loader's. Throws std::logic_error when another thread
  // is inside a call of this loader.
  class Call {
   public:
    Call(const LoaderCore& core, const char* name);
    ~Call();
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    Impl& impl_;
  };

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::detail
