// Worker processes seen from the main process: forking one (the child then runs worker_main,
// worker_loop.hpp), its lifeline, reaping with escalation, and the short-lived size-probe child.
// Only the main process forks, and only from the loader; a worker never forks and never returns
// from worker_main: it leaves with _exit().
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "ipc/ring.hpp"
#include "os/posix.hpp"
#include "stoker/detail/batch_sink.hpp"
#include "stoker/worker_info.hpp"

namespace stoker::detail {

class ForkGuard;

// A worker that exits with this status wrote Channel::fatal first.
inline constexpr int kExitFatalReported = 121;

void set_worker_info(const WorkerInfo& info) noexcept;

// A lifeline is a pipe per child (worker or size probe): the main process holds the write end,
// the child the read end. The write end closes only when the main process is gone, all of its
// threads (exit, exec, any signal, SIGKILL included); the kernel then sends SIGIO to the
// reader, whose default action ends the child even inside get(). This is the only way a child
// learns of its parent's death: PR_SET_PDEATHSIG fires when the forking *thread* exits, which
// a process that goes on (pthread_exit from main, a thread pool's thread forking) must survive.

// In a forked child: closes the lifeline write ends of every worker and probe of every loader
// in this process, so that only the main process holds each one open; also `own_write` (>= 0)
// when it is this child's own write end and the registry had no room for it.
void close_lifelines_in_child(int own_write = -1) noexcept;

// In a forked child, after reset_signals_in_child(): asks for SIGIO when the lifeline's write
// end closes, then _exit(0)s at once if the parent already died (the SIGIO would never come):
// getppid() no longer `parent` (a dead process's children go to a reaper; a dead thread's to
// another thread of its process, which keeps the pid), or the lifeline already hung up.
void watch_lifeline_in_child(int lifeline_read, pid_t parent) noexcept;

// Everything a new worker needs; it all lives in the main process's memory, which the child
// inherits at the same addresses.
struct WorkerLaunch {
  std::size_t id = 0;       // the worker id (WorkerInfo::id)
  std::size_t channel = 0;  // the ring channel it serves
  std::size_t num_workers = 0;
  std::uint64_t seed = 0;
  const Ring* ring = nullptr;
  int task_eventfd = -1;    // the worker sleeps on it
  int main_eventfd = -1;    // the worker rings it after publishing a result
  int lifeline_read = -1;   // read end of this worker's lifeline pipe
  int lifeline_write = -1;  // its write end, when the registry had no room (the child closes it)
  const ProduceFn* produce = nullptr;
  bool skip_samples = false;               // OnSampleError::kSkip
  bool collect_stats = true;               // time batches stage by stage now and then
  const std::vector<int>* cpus = nullptr;  // bind_workers: the logical CPUs to run on
  // When >= 0, the worker runs its first task on this CPU only, then on all it had: workers
  // forked together start on the caller's CPU and the scheduler can leave two of them sharing
  // one for their first milliseconds, which serialises the parts of batch 0 (WorkerPool).
  int first_task_cpu = -1;
  const std::function<void(std::size_t)>* worker_init = nullptr;
  ForkGuard* fork_guard = nullptr;  // its child hooks run first in the worker (spawn sets it)
};

class WorkerProcess {
 public:
  // Main process. Forks a worker running worker_main(launch). Throws stoker::Error naming the
  // worker and what to do when fork() fails.
  static WorkerProcess spawn(const WorkerLaunch& launch);

  WorkerProcess() = default;
  WorkerProcess(WorkerProcess&& other) noexcept;
  WorkerProcess& operator=(WorkerProcess&& other) noexcept;
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;
  // Kills and reaps a worker that is still running: a bounded wait, never throws.
  ~WorkerProcess();

  pid_t pid() const noexcept { return pid_; }
  // Readable once the worker has exited; -1 on kernels without pidfds (before 5.3).
  int pidfd() const noexcept { return pidfd_.get(); }
  bool reaped() const noexcept { return reaped_ || pid_ <= 0; }
  // Non-blocking. True once the worker has exited and been reaped; its wait status is then in
  // status() (or status_known() is false when SIGCHLD is ignored and the kernel reaped it).
  bool try_reap() noexcept;
  int status() const noexcept { return status_; }
  bool status_known() const noexcept { return status_known_; }
  void kill(int signal) const noexcept;

 private:
  void release_fds() noexcept;
  pid_t pid_ = -1;
  posix::Fd pidfd_;
  posix::Fd lifeline_;  // write end; closing it tells the worker the main process is gone
  bool reaped_ = false;
  bool status_known_ = false;
  int status_ = 0;
};

// Waits until every worker has exited, escalating: up to `grace` for them to leave on their own
// (after the caller asked them to stop), then SIGTERM and up to `grace` more, then SIGKILL.
// Reaps all of them. Never throws; returns within 2 x grace + 3 s (a process stuck in
// uninterruptible I/O can outlast SIGKILL; it is then left to ~WorkerProcess).
void reap_all(std::span<WorkerProcess> workers, std::chrono::milliseconds grace) noexcept;

// Waits up to `timeout` for any unreaped worker to exit (the caller then calls try_reap()).
void wait_for_exit(std::span<WorkerProcess> workers, std::chrono::milliseconds timeout) noexcept;

// Runs `probe` in a short-lived forked child (as worker 0 of `num_workers`, so the main
// process's state is untouched) and returns the largest value it reported before it
// finished, threw, crashed or ran out of `timeout` (the child is then killed); empty when
// it reported nothing. Main process.
struct ProbeResult {
  std::optional<std::size_t> largest;
  bool complete = false;  // the probe returned normally
  // The probe process's private memory (Private_Dirty) after its samples:
  // what a forked worker adds to the machine's memory besides the samples it holds.
  std::optional<std::size_t> private_bytes;
  // The part of private_bytes it had written before its first sample: a forked process's
  // start-up (copy-on-write of the stack, heap and globals it touches).
  std::optional<std::size_t> startup_private_bytes;
};
ProbeResult run_probe_in_child(
    const std::function<void(const std::function<void(std::size_t)>&)>& probe,
    std::size_t num_workers, std::chrono::milliseconds timeout) noexcept;

// Warns once per process (through spdlog) when the caller has more than one thread.
void warn_if_multithreaded() noexcept;

}  // namespace stoker::detail
