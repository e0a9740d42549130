// What the main process gathers for loader.stats(), the health log line and the trace, beyond
// the basic counters: per-worker figures from the times each loading process writes into a
// slot's header with the batch (no lock or system call per sample or batch), ring occupancy
// when the consumer asks for a batch, a recent throughput window, and /proc readings made only
// when stats() is called. Main process only; single-threaded like the rest of LoaderCore.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ipc/ring.hpp"
#include "os/proc.hpp"
#include "stoker/stats.hpp"

namespace stoker::detail {

// One event of a Chrome trace, kept compact until it is written.
struct TraceEvent {
  enum class Kind : std::uint8_t { kBatch, kWait, kReady } kind;
  std::int32_t pid;         // the process the event belongs to (worker or main)
  std::uint32_t worker;     // kBatch: worker id
  std::uint64_t start_ns;   // steady clock
  std::uint64_t length_ns;  // spans; kReady: 0
  std::uint64_t value;      // kBatch: batch number; kReady: batches ready
  std::uint64_t epoch;
  std::uint64_t get_ns;      // kBatch with stages timed
  std::uint64_t collate_ns;  // (both 0 otherwise)
  std::uint64_t samples;
};

// Writes a loader's events to the trace at `path` as a JSON array of Chrome trace events: the
// first loader of the process to write there starts the file, later ones append to it (it
// stays valid JSON after each). Returns false and logs a warning when the file cannot be
// written. Thread-safe.
bool write_trace(const std::string& path, const std::vector<TraceEvent>& events);

// The trace path for LoaderOptions::trace_path, or else STOKER_TRACE; under a launcher with
// several ranks, ".rank<r>" goes before the extension so that ranks do not share a file.
// Empty: no trace.
std::string trace_path_for(const std::string& option, std::optional<std::size_t> rank);

// The one-line health summary (LoaderOptions::log_interval), at info level.
void log_health(const LoaderStats& stats);

class StatsCollector {
 public:
  // `trace_path` empty: no trace.
  StatsCollector(bool enabled, std::string trace_path);
  ~StatsCollector();  // writes the trace
  StatsCollector(const StatsCollector&) = delete;
  StatsCollector& operator=(const StatsCollector&) = delete;

  bool enabled() const noexcept { return enabled_; }
  bool tracing() const noexcept { return !trace_path_.empty(); }

  // A new epoch: the per-worker figures, window and occupancy start over.
  void begin_epoch(std::size_t num_workers, std::uint64_t epoch, std::uint64_t now_ns);
  // A loading process published the batch in `header` (worker id `worker`, process `pid`).
  // `whole` is false for a part of a split batch 0 other than its host: its samples and time
  // count for the worker, its batch for the host's.
  void on_batch_loaded(std::size_t worker, pid_t pid, const SlotHeader& header,
                       bool whole = true) noexcept;
  // The consumer asked for a batch and `ready` were waiting in the ring.
  // `capacity`: the slots the loader could have had ready then (workers x prefetch depth).
  void on_request(std::size_t ready, std::size_t capacity, std::uint64_t now_ns);
  // Batch `index` was handed to the consumer after a wait of [start, end).
  void on_delivered(std::uint64_t start_ns, std::uint64_t end_ns, std::uint64_t index,
                    std::uint64_t samples, std::uint64_t bytes);

  // Fills the collector's fields of `out` (whose basic counters and epoch_seconds are set).
  // `pids` are the live processes serving each worker id (0: none), `ring_slots` the ring's.
  void fill(LoaderStats& out, const std::vector<pid_t>& pids, std::size_t ring_slots) const;

 private:
  struct WorkerAccum {
    std::uint64_t batches = 0;
    std::uint64_t samples = 0;
    std::uint64_t busy_ns = 0;
    std::uint64_t timed_busy_ns = 0;  // over the batches whose stages were timed
    std::uint64_t timed_get_ns = 0;
    std::uint64_t timed_collate_ns = 0;
  };
  struct Checkpoint {
    std::uint64_t time_ns = 0;
    std::uint64_t samples = 0;
    std::uint64_t bytes = 0;
  };
  static constexpr std::size_t kWindow = 21;  // checkpoints every 250 ms: a 5 s window
  static constexpr std::uint64_t kCheckpointNs = 250'000'000;
  static constexpr std::size_t kMaxTraceEvents = 1'000'000;

  void record(const TraceEvent& event) noexcept;

  bool enabled_;
  std::string trace_path_;
  std::uint64_t epoch_ = 0;
  std::vector<WorkerAccum> workers_;
  // Batches of another epoch, loaded ahead by persistent workers: that epoch's figures.
  std::vector<WorkerAccum> ahead_;
  std::optional<std::uint64_t> ahead_epoch_;
  std::uint64_t requests_ = 0;
  std::uint64_t ready_sum_ = 0;
  double occupancy_sum_ = 0;  // of ready / capacity at each request
  std::uint64_t samples_ = 0;
  std::uint64_t bytes_ = 0;
  std::uint64_t last_delivery_ns_ = 0;
  std::array<Checkpoint, kWindow> window_{};
  std::size_t window_next_ = 0;   // where the next checkpoint goes
  std::size_t window_count_ = 0;  // checkpoints held
  std::optional<CpuTimes> cpu_at_start_;
  std::vector<TraceEvent> trace_;
  bool trace_full_warned_ = false;
  pid_t self_ = 0;
};

}  // namespace stoker::detail
