#include "ipc/worker_process.hpp"
#include "ipc/worker_loop.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include "os/log.hpp"

#include "data/buffer_cache.hpp"
#include "data/error_text.hpp"
#include "data/spin.hpp"
#include "ipc/fork_hooks.hpp"
#include "ipc/slot_writer.hpp"
#include "os/proc.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {
namespace {

using Clock = std::chrono::steady_clock;

// The record a size probe sends after its last sample (no sample is 2^64 - 1 bytes).
constexpr std::uint64_t kProbeDone = ~std::uint64_t{0};
// Followed by one more record: the probe process's private bytes, after its samples.
constexpr std::uint64_t kProbePrivate = ~std::uint64_t{0} - 1;
// Followed by one more record: its private bytes before its first sample.
constexpr std::uint64_t kProbeStartPrivate = ~std::uint64_t{0} - 2;

// The pages this process alone has written (smaps_rollup's Private_Dirty); 0 when unknown.
// Clean private pages are left out: a memory-mapped dataset's pages that only the probe read
// are page cache the workers share, not memory each of them adds.
std::uint64_t own_private_bytes() noexcept {
  try {
    const std::optional<ProcessMemory> own = read_process_memory(0);
    return own ? own->private_dirty_bytes : 0;
  } catch (...) {
    return 0;
  }
}

// What this process had resident at its peak and has given back since (VmHWM - VmRSS): the
// buffers that live only during get() (a decoder's, unmapped when it returns), which a worker
// holds whenever it is inside get(). 0 when unknown.
std::uint64_t released_bytes() noexcept {
  try {
    const std::optional<ResidentPeak> rss = read_own_resident_peak();
    return rss ? rss->peak_bytes - rss->now_bytes : 0;
  } catch (...) {
    return 0;
  }
}

// The lifeline write ends of every live worker and probe of every loader in this process. A
// new child closes all of them, so that only the main process holds each lifeline open and its
// death (even by SIGKILL) closes them. Entries hold fd + 1; 0 is free. Lock-free, because the
// child reads it right after fork(), when another thread of the parent may have been
// mid-update.
constexpr std::size_t kMaxLifelines = 4096;
std::array<std::atomic<int>, kMaxLifelines> g_lifelines{};

// False when the registry is full: the child then closes its own write end itself, but
// siblings forked later keep it open, so that child outlives the main process until they exit.
bool register_lifeline(int fd) noexcept {
  for (std::atomic<int>& entry : g_lifelines) {
    int expected = 0;
    if (entry.compare_exchange_strong(expected, fd + 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

void unregister_lifeline(int fd) noexcept {
  for (std::atomic<int>& entry : g_lifelines) {
    int expected = fd + 1;
    if (entry.compare_exchange_strong(expected, 0, std::memory_order_relaxed)) return;
  }
}

}  // namespace

void close_lifelines_in_child(int own_write) noexcept {
  for (std::atomic<int>& entry : g_lifelines) {
    const int value = entry.exchange(0, std::memory_order_relaxed);
    if (value > 0) posix::close_fd(value - 1);
  }
  if (own_write >= 0) posix::close_fd(own_write);
}

void watch_lifeline_in_child(int lifeline_read, pid_t parent) noexcept {
  (void)posix::signal_on_io(lifeline_read);
  // Armed first, checked second: a parent that dies after this check closes the write end
  // while O_ASYNC is set, so the SIGIO comes; one that died before it is seen here.
  if (posix::parent_pid() != parent) ::_exit(0);
  pollfd fd{lifeline_read, POLLIN, 0};
  if (posix::poll_fds(&fd, 1, 0) > 0 && fd.revents != 0) ::_exit(0);  // only a hang-up
}

WorkerProcess WorkerProcess::spawn(const WorkerLaunch& launch_in) {
  int ends[2];
  if (posix::make_pipe(ends) != 0) {
    throw Error(
        posix::errno_message(
            fmt::format("DataLoader: creating worker {}'s lifeline pipe failed", launch_in.id),
            errno) +
        "; if file descriptors ran out, raise `ulimit -n` or lower num_workers");
  }
  posix::Fd read_end(ends[0]);
  posix::Fd write_end(ends[1]);
  WorkerLaunch launch = launch_in;
  launch.lifeline_read = read_end.get();
  if (!register_lifeline(write_end.get())) launch.lifeline_write = write_end.get();

  const pid_t parent = posix::self_pid();
  std::fflush(nullptr);  // or the child would inherit, and might flush, buffered output
  std::optional<ForkGuard> hooks;
  try {
    hooks.emplace();  // the fork hooks' prepare step (stoker/fork_hooks.hpp)
  } catch (...) {
    unregister_lifeline(write_end.get());
    throw;
  }
  launch.fork_guard = &*hooks;
  const pid_t pid = posix::fork_process();
  if (pid == 0) worker_main(launch, parent);  // runs the child hooks
  hooks->in_parent();
  if (pid < 0) {
    const int err = errno;
    unregister_lifeline(write_end.get());
    throw Error(posix::errno_message(
                    fmt::format("DataLoader: fork() for worker {} failed", launch_in.id), err) +
                (err == EAGAIN ? "; the process limit (`ulimit -u`, or the cgroup's pids.max) "
                                 "was reached: lower num_workers"
                               : "; memory may be exhausted: lower num_workers"));
  }
  WorkerProcess worker;
  worker.pid_ = pid;
  worker.lifeline_ = std::move(write_end);
  worker.pidfd_.reset(posix::open_pidfd(pid));
  return worker;
}

WorkerProcess::WorkerProcess(WorkerProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::move(other.pidfd_)),
      lifeline_(std::move(other.lifeline_)),
      reaped_(other.reaped_),
      status_known_(other.status_known_),
      status_(other.status_) {}

WorkerProcess& WorkerProcess::operator=(WorkerProcess&& other) noexcept {
  if (this != &other) {
    WorkerProcess previous(std::move(*this));  // reaps what this held, when it goes
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::move(other.pidfd_);
    lifeline_ = std::move(other.lifeline_);
    reaped_ = other.reaped_;
    status_known_ = other.status_known_;
    status_ = other.status_;
  }
  return *this;
}

WorkerProcess::~WorkerProcess() {
  if (!reaped()) {
    kill(SIGKILL);
    // SIGKILL ends any process except one in uninterruptible I/O: wait for it, but not
    // forever. One still there after 5 s is left to the kernel (a zombie until this process
    // exits), and said so.
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
    while (!try_reap() && Clock::now() < deadline) {
      WorkerProcess* self = this;
      wait_for_exit(std::span<WorkerProcess>(self, 1), std::chrono::milliseconds(100));
    }
    if (!reaped()) {
      try {
        logger().error(
            "stoker: worker pid {} did not die within 5 s of SIGKILL (stuck in "
            "uninterruptible I/O?); it is left unreaped",
            pid_);
      } catch (...) {
      }
    }
  }
  release_fds();
}

void WorkerProcess::release_fds() noexcept {
  if (lifeline_.valid()) {
    unregister_lifeline(lifeline_.get());
    lifeline_.reset();
  }
  pidfd_.reset();
}

bool WorkerProcess::try_reap() noexcept {
  if (reaped()) return true;
  int status = 0;
  const pid_t rc = posix::wait_pid(pid_, &status, WNOHANG);
  if (rc == pid_) {
    status_ = status;
    status_known_ = true;
  } else if (!(rc < 0 && errno == ECHILD)) {
    return false;  // still running
  }
  // ECHILD: SIGCHLD is ignored in this process, so the kernel reaped it and kept no status.
  reaped_ = true;
  release_fds();
  return true;
}

void WorkerProcess::kill(int signal) const noexcept {
  if (!reaped()) posix::send_signal(pid_, signal);
}

void wait_for_exit(std::span<WorkerProcess> workers, std::chrono::milliseconds timeout) noexcept {
  std::vector<pollfd> fds;
  bool all_have_pidfd = true;
  try {
    for (WorkerProcess& w : workers) {
      if (w.reaped()) continue;
      if (w.pidfd() < 0)
        all_have_pidfd = false;
      else
        fds.push_back({w.pidfd(), POLLIN, 0});
    }
  } catch (...) {
    all_have_pidfd = false;
  }
  // Without pidfds, poll in short steps and let the caller try_reap() each time.
  const auto step = all_have_pidfd ? timeout : std::min(timeout, std::chrono::milliseconds(2));
  posix::poll_fds(fds.data(), fds.size(), static_cast<int>(step.count()));
}

void reap_all(std::span<WorkerProcess> workers, std::chrono::milliseconds grace) noexcept {
  auto all_reaped = [&] {
    bool done = true;
    for (WorkerProcess& w : workers) done = w.try_reap() && done;
    return done;
  };
  auto wait_until = [&](Clock::time_point deadline) {
    while (!all_reaped()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      wait_for_exit(workers, left);
    }
    return true;
  };
  if (wait_until(Clock::now() + grace)) return;
  for (WorkerProcess& w : workers) w.kill(SIGTERM);
  if (wait_until(Clock::now() + grace)) return;
  for (WorkerProcess& w : workers) w.kill(SIGKILL);
  // SIGKILL cannot be caught; only a process stuck in uninterruptible I/O outlives this wait,
  // and its WorkerProcess destructor waits for it once more (bounded too).
  wait_until(Clock::now() + std::chrono::seconds(3));
}

ProbeResult run_probe_in_child(
    const std::function<void(const std::function<void(std::size_t)>&)>& probe,
    std::size_t num_workers, std::chrono::milliseconds timeout) noexcept {
  ProbeResult result;
  int ends[2];
  int life[2];
  if (posix::make_pipe(ends) != 0) return result;
  posix::Fd read_end(ends[0]);
  posix::Fd write_end(ends[1]);
  if (posix::make_pipe(life) != 0) return result;
  posix::Fd lifeline_read(life[0]);
  posix::Fd lifeline(life[1]);
  const bool registered = register_lifeline(lifeline.get());
  const pid_t parent = posix::self_pid();
  std::fflush(nullptr);
  std::optional<ForkGuard> hooks;
  try {
    hooks.emplace();  // the fork hooks' prepare step (stoker/fork_hooks.hpp)
  } catch (...) {
    if (registered) unregister_lifeline(lifeline.get());
    return result;  // nothing measured, as when fork() fails
  }
  const pid_t pid = posix::fork_process();
  if (pid != 0) hooks->in_parent();
  if (pid < 0) {
    if (registered) unregister_lifeline(lifeline.get());
    return result;
  }
  if (pid == 0) {
    reset_buffer_cache_after_fork();
    set_worker_info(WorkerInfo{0, std::max<std::size_t>(num_workers, 1), 0, posix::self_pid()});
    close_lifelines_in_child(registered ? -1 : lifeline.get());
    reset_signals_in_child();  // a crash in get() ends the probe, not the program's crash handler
    watch_lifeline_in_child(lifeline_read.get(), parent);
    try {
      hooks->in_child();
    } catch (...) {
      ::_exit(1);  // measured nothing, as when get() throws
    }
    // One record per sample, then an end marker: whatever arrived before a hang or a crash
    // still counts.
    const int out = write_end.get();
    const auto send = [out](std::uint64_t value) {
      if (posix::write_all(out, &value, sizeof value) != 0) ::_exit(1);
    };
    // What a forked process writes before it loads anything (its start-up, copy-on-write):
    // part of a worker's memory, not of the loading that num_workers = 0 does in-process.
    if (const std::uint64_t start = own_private_bytes(); start > 0) {
      send(kProbeStartPrivate);
      send(start);
    }
    try {
      probe([&send](std::size_t bytes) { send(bytes); });
    } catch (...) {
      ::_exit(1);
    }
    if (const std::uint64_t own = own_private_bytes() + released_bytes(); own > 0) {
      send(kProbePrivate);
      send(own);
    }
    send(kProbeDone);
    ::_exit(0);
  }
  write_end.reset();
  const Clock::time_point deadline = Clock::now() + timeout;
  std::optional<std::size_t>* value_next = nullptr;  // the record after a marker goes here
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd fd{read_end.get(), POLLIN, 0};
    if (left <= 0 || posix::poll_fds(&fd, 1, static_cast<int>(left)) <= 0) break;
    std::uint64_t value = 0;
    // Records are 8 bytes, far below PIPE_BUF: each write arrives whole.
    if (posix::read_full(read_end.get(), &value, sizeof value) != sizeof value)
      break;  // EOF: the probe exited or crashed
    if (value == kProbeDone) {
      result.complete = true;
      break;
    }
    if (value_next != nullptr) {
      *std::exchange(value_next, nullptr) = value;
      continue;
    }
    if (value == kProbePrivate || value == kProbeStartPrivate) {
      value_next = value == kProbePrivate ? &result.private_bytes : &result.startup_private_bytes;
      continue;
    }
    result.largest = std::max<std::size_t>(result.largest.value_or(0), value);
  }
  if (!result.complete) posix::send_signal(pid, SIGKILL);
  int status = 0;
  posix::wait_pid(pid, &status, 0);
  if (registered) unregister_lifeline(lifeline.get());
  return result;
}

void warn_if_multithreaded() noexcept {
  static std::atomic<bool> warned{false};
  if (warned.load(std::memory_order_relaxed)) return;
  const std::size_t threads = count_threads();
  if (threads <= 1 || warned.exchange(true)) return;
  try {
    logger().warn(
        "stoker: forking DataLoader workers from a process with {} threads. A worker inherits "
        "only the forking thread, so a lock another thread held at that moment stays locked in "
        "the worker and can hang it. Start the loader's first epoch before starting threads or "
        "thread pools (OpenMP, libtorch), or use persistent_workers so workers are forked once.",
        threads);
  } catch (...) {
  }
}

}  // namespace stoker::detail
