// WorkerPool: the worker processes of one loader and the ring channels they serve — forking,
// asking to stop, reaping, the task push with its doorbell, and the descriptors the main
// process sleeps on. Which batch goes where, and what a death means, is LoaderCore's.
//
// Channels and workers: channel c is a fixed set of slots and queues; the worker process serving
// it can change (a respawn after a crash; a retirement under max_batches_per_worker, when the
// worker's replacement starts on the spare channel while the old one drains its queue).
// INV-QUEUE-2: a channel's task queue never holds more than slots_per_channel batch messages
//   plus two stop messages (a retirement's, then a shutdown's), because a task is pushed only
//   for one of the channel's kFree slots and its result comes back before the slot is kFree
//   again; its result queue holds at most slots_per_channel messages. push_task() and
//   request_stop() assert it.
// Main process only; not thread-safe.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "ipc/ring.hpp"
#include "ipc/worker_process.hpp"
#include "loader/resolved_options.hpp"
#include "loader/slot_table.hpp"
#include "os/posix.hpp"
#include "stoker/options.hpp"

namespace stoker::detail {

// INV-QUEUE-2 needs room for a batch message per slot and two stops; slots_per_channel <=
// kMaxPrefetchFactor (LoaderOptions::validate).
static_assert(kQueueCapacity >= kMaxPrefetchFactor + 2,
              "INV-QUEUE-2: a task queue holds a batch message per slot and two stop messages");

// One channel of the ring and the worker process (if any) serving it.
struct ChannelState {
  WorkerProcess process;        // pid -1 when no worker runs here
  std::size_t position = 0;     // the worker id (0 .. num_workers - 1) it serves
  bool retiring = false;        // given its last task and a stop message: its exit is expected
  std::size_t issued = 0;       // batches given to the current process
  std::size_t outstanding = 0;  // its kIssued slots

  bool running() const noexcept { return !process.reaped(); }
};

// How long stopping workers waits before SIGTERM, and again before SIGKILL.
inline constexpr std::chrono::milliseconds kStopGrace{500};

class WorkerPool {
 public:
  // What every worker is forked with; pointers into the loader, which outlives its workers.
  struct Launch {
    const ProduceFn* produce = nullptr;
    const std::function<void(std::size_t)>* worker_init = nullptr;
    std::uint64_t seed = 0;
    bool skip_samples = false;
    bool collect_stats = true;
    bool bind_workers = false;
  };

  WorkerPool() = default;
  // Stops and reaps every worker (bounded). Never throws.
  ~WorkerPool() { stop_all(nullptr); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Once the ring exists: the channels, and an eventfd for each when there are workers.
  // Throws stoker::Error when eventfds cannot be made.
  void attach(const Ring& ring, int main_eventfd, const ResolvedOptions& resolved, Launch launch);

  std::size_t num_workers() const noexcept { return position_channel_.size(); }
  std::size_t num_channels() const noexcept { return channels_.size(); }
  ChannelState& channel(std::size_t c) noexcept { return channels_[c]; }
  const ChannelState& channel(std::size_t c) const noexcept { return channels_[c]; }
  // The channel serving worker id p.
  std::size_t channel_of_worker(std::size_t p) const noexcept { return position_channel_[p]; }
  bool serves_a_worker(std::size_t c) const noexcept;

  // Forks every worker unless all run (stopping any that are left first). Throws what fork
  // throws, after stopping the ones it had started; issued slots are freed in `slots`.
  // Without bind_workers, two or more workers run their first tasks (the parts of batch 0) on
  // different CPUs, starting with the one after the caller's, then wherever the scheduler
  // puts them. `after_first` (when set) runs once worker 0 is forked, before the others are,
  // with the nanoseconds its fork took; when it returns false, the others are forked later,
  // by start_deferred() (deferred() until then).
  void start_all(SlotTable& slots,
                 const std::function<bool(std::uint64_t fork_ns)>& after_first = {});
  // Forks the workers start_all() left for later. Throws what fork throws, after stopping
  // every worker (issued slots are freed in `slots`).
  void start_deferred(SlotTable& slots);
  bool deferred() const noexcept { return deferred_; }
  // Forks a worker for id p on channel c (whose previous process, if any, is reaped) and makes
  // c serve p; its first task runs on `first_task_cpu` alone when that is >= 0. Throws
  // stoker::Error when fork fails.
  void spawn_on(std::size_t c, std::size_t p, int first_task_cpu = -1);
  // Asks channel c's worker to exit: at once (`now`: between samples) or after its queued
  // tasks.
  void request_stop(std::size_t c, bool now) noexcept;
  // Stops and reaps every worker; what they were loading becomes kFree in `slots` (when
  // given). A worker still busy after `grace` gets SIGTERM, and SIGKILL after as long again.
  void stop_all(SlotTable* slots, std::chrono::milliseconds grace = kStopGrace) noexcept;
  // Pushes the task for slot s to channel c's worker and rings its doorbell.
  void push_task(std::size_t c, std::size_t s) noexcept;

  std::size_t running() const noexcept;
  bool all_running() const noexcept;
  // Live worker processes by worker id (0 where none runs).
  std::vector<pid_t> pids_by_worker() const;

  // Reaps the workers that have exited; returns their channels (each reaped, its status kept).
  std::vector<std::size_t> reap_exited();
  // Reaps channel c's retiring worker if it has exited. True when it was reaped now.
  bool try_reap_retired(std::size_t c) noexcept;
  // The descriptors to sleep on: the main eventfd, then each running worker's pidfd.
  std::vector<pollfd>& wait_fds() noexcept { return wait_fds_; }
  // False on kernels without pidfds (before 5.3): deaths are then found by polling.
  bool watches_deaths() const noexcept { return wait_fds_.size() == running() + 1; }
  void rebuild_wait_fds();

 private:
  // Empties channel c: its queues and flags in the ring, and main's count of what it gave it.
  void reset_channel(std::size_t c) noexcept;
  // Where worker p's first task runs (-1: anywhere), from spread_.
  int first_task_cpu(std::size_t p) const noexcept {
    return spread_.empty() ? -1 : spread_[p % spread_.size()];
  }

  const Ring* ring_ = nullptr;
  int main_eventfd_ = -1;
  Launch launch_;
  std::size_t num_workers_ = 0;
  std::vector<ChannelState> channels_;
  // Worker id -> the channel serving it.
  std::vector<std::size_t> position_channel_;
  std::vector<int> spread_;               // CPUs for the workers' first tasks (start_all)
  bool deferred_ = false;                 // workers 1.. are still to be forked (start_deferred)
  std::vector<posix::Fd> task_eventfds_;  // per channel
  std::vector<std::vector<int>> worker_cpus_;  // bind_workers: per worker id, its core's CPUs
  std::vector<pollfd> wait_fds_;
};

}  // namespace stoker::detail
