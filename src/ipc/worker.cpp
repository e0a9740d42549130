#include "ipc/worker.hpp"

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
#include "ipc/slot_io.hpp"
#include "ipc/spin.hpp"
#include "os/proc.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {
namespace {

using Clock = std::chrono::steady_clock;

// How long an idle worker polls its task queue before it sleeps on its doorbell.
constexpr std::chrono::microseconds kWorkerSpin{20};

// The record a size probe sends after its last sample (no sample is 2^64 - 1 bytes).
constexpr std::uint64_t kProbeDone = ~std::uint64_t{0};
// Followed by one more record: the probe process's private bytes.
constexpr std::uint64_t kProbePrivate = ~std::uint64_t{0} - 1;

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

// The lifeline write ends of every live worker of every loader in this process. A new worker
// closes all of them, so that only the main process holds each lifeline open and its death
// (even by SIGKILL) closes them. Entries hold fd + 1; 0 is free. Lock-free, because the child
// reads it right after fork(), when another thread of the parent may have been mid-update.
constexpr std::size_t kMaxLifelines = 4096;
std::array<std::atomic<int>, kMaxLifelines> g_lifelines{};

void register_lifeline(int fd) noexcept {
  for (std::atomic<int>& entry : g_lifelines) {
    int expected = 0;
    if (entry.compare_exchange_strong(expected, fd + 1, std::memory_order_relaxed)) return;
  }
  // Full: this worker's siblings will keep its lifeline open, and parent death then reaches it
  // through PR_SET_PDEATHSIG only. Harmless otherwise.
}

void unregister_lifeline(int fd) noexcept {
  for (std::atomic<int>& entry : g_lifelines) {
    int expected = fd + 1;
    if (entry.compare_exchange_strong(expected, 0, std::memory_order_relaxed)) return;
  }
}

void close_lifelines_in_child() noexcept {
  for (std::atomic<int>& entry : g_lifelines) {
    const int value = entry.exchange(0, std::memory_order_relaxed);
    if (value > 0) ::close(value - 1);
  }
}

// The worker is killed by SIGIO (whose default action terminates) when the main process's end
// of its lifeline closes, even while it is busy inside get(). A second path beside
// PR_SET_PDEATHSIG, which fires when the forking *thread* exits and is therefore only armed for
// workers forked from the main thread.
void arm_lifeline(int fd) noexcept {
  ::fcntl(fd, F_SETOWN, ::getpid());
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_ASYNC);
}

void reset_signals() noexcept {
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  // A crash must kill the worker with its signal, so the main process can say what happened,
  // whatever handlers the parent program installed (crash reporters, sanitizers).
  for (const int sig : {SIGTERM, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGIO}) {
    ::sigaction(sig, &dfl, nullptr);
  }
  // Ctrl-C reaches the whole foreground process group: the main process decides what happens
  // and stops the workers.
  ::signal(SIGINT, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

[[noreturn]] void exit_with_fatal(Channel& channel, const char* where) noexcept {
  const CaughtException caught = describe_current_exception();
  channel.fatal.set(kNoSample, 0, where, caught.type_name, caught.message);
  channel.fatal_valid.store(1, std::memory_order_release);
  ::_exit(kExitFatalReported);
}

// Fills a task's slot with worker_init's error instead of the batch. For an iterable dataset
// the slot also says this worker's stream has ended, so the epoch ends once the others' do
// (the loader reads the flag only for iterable datasets).
void report_init_error(SlotHeader& header, const CaughtException& caught) noexcept {
  header.exhausted = 1;
  header.start_ns = now_ns();
  header.end_ns = header.start_ns;
  header.get_ns = 0;
  header.collate_ns = 0;
  header.stages_timed = 0;
  header.error.set(kNoSample, header.batch, "worker_init", caught.type_name, caught.message);
  header.status = SlotStatus::kError;
}

// Sleeps until a task is queued. Exits the process when the main process is gone.
void wait_for_task(Channel& channel, const WorkerLaunch& launch) noexcept {
  if (spin_until([&] { return !channel.tasks.empty_approx(); }, kWorkerSpin)) return;
  channel.doorbell.sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // E: see Doorbell
  if (channel.tasks.empty_approx()) {
    pollfd fds[2] = {{launch.task_eventfd, POLLIN, 0}, {launch.lifeline_read, POLLIN, 0}};
    posix::poll_fds(fds, 2, -1);
    if (fds[1].revents != 0) ::_exit(0);  // the lifeline's write end closed: main is gone
  }
  channel.doorbell.sleeping.store(0, std::memory_order_relaxed);
  posix::eventfd_drain(launch.task_eventfd);
}

[[noreturn]] void worker_main(const WorkerLaunch& launch, pid_t parent,
                              bool forked_from_main_thread) noexcept {
  reset_buffer_cache_after_fork();
  set_worker_info(WorkerInfo{launch.id, launch.num_workers, launch.seed, ::getpid()});
  close_lifelines_in_child();
  if (forked_from_main_thread) ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(0);  // the parent died before PR_SET_PDEATHSIG took hold
  arm_lifeline(launch.lifeline_read);
  reset_signals();
  if (launch.cpus != nullptr && !launch.cpus->empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (const int cpu : *launch.cpus) CPU_SET(static_cast<std::size_t>(cpu), &set);
    ::sched_setaffinity(0, sizeof set, &set);  // best effort: a cpuset may forbid it
  }

  const Ring& ring = *launch.ring;
  Channel& channel = ring.channel(launch.channel);
  // Slots are pre-faulted as batches need them (SlotWriter), not all up front: a fresh
  // worker's first batch then waits for one slot's page tables, not for all of them.
  std::optional<SlotMemory> memory;
  try {
    memory.emplace(ring);
  } catch (...) {
    exit_with_fatal(channel, "worker start-up");
  }
  // An exception in worker_init is reported in place of every batch this worker is given (a
  // WorkerException for each, as in PyTorch, whose worker has no fetcher then): what
  // worker_init should have set up (a seed, a file, a shard) is missing, so the worker loads
  // nothing, while the other workers' batches still arrive.
  std::optional<CaughtException> init_error;
  if (launch.worker_init != nullptr && *launch.worker_init) {
    try {
      (*launch.worker_init)(launch.id);
    } catch (...) {
      init_error = describe_current_exception();
    }
  }

  StagePolicy stages;
  for (;;) {
    Message message;
    if (!channel.tasks.try_pop(message)) {
      wait_for_task(channel, launch);
      continue;
    }
    if (message.kind == MessageKind::kStop ||
        channel.stop_requested.load(std::memory_order_relaxed) != 0) {
      ::_exit(0);
    }
    if (init_error) {
      report_init_error(ring.header(message.slot), *init_error);
    } else {
      const LoadOutcome outcome =
          load_batch(ring, *memory, message.slot, &channel, *launch.produce, launch.skip_samples,
                     launch.collect_stats && stages.next(), nullptr);
      stages.record(ring.header(message.slot));
      if (outcome == LoadOutcome::kCancelled) ::_exit(0);
    }
    // INV-QUEUE-2: at most slots_per_channel results are outstanding, so this cannot fail.
    channel.results.try_push(Message{MessageKind::kBatch, message.slot});
    ring_doorbell(ring.control().main_doorbell, launch.main_eventfd);
  }
}

}  // namespace

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
  register_lifeline(write_end.get());

  const pid_t parent = ::getpid();
  const bool main_thread = ::gettid() == parent;
  std::fflush(nullptr);  // or the child would inherit, and might flush, buffered output
  const pid_t pid = posix::fork_process();
  if (pid == 0) worker_main(launch, parent, main_thread);
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
  if (!reaped()) ::kill(pid_, signal);
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
  if (posix::make_pipe(ends) != 0) return result;
  posix::Fd read_end(ends[0]);
  posix::Fd write_end(ends[1]);
  std::fflush(nullptr);
  const pid_t pid = posix::fork_process();
  if (pid < 0) return result;
  if (pid == 0) {
    reset_buffer_cache_after_fork();
    set_worker_info(WorkerInfo{0, std::max<std::size_t>(num_workers, 1), 0, ::getpid()});
    close_lifelines_in_child();
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    reset_signals();  // a crash in get() ends the probe, not the program's crash handler
    // One record per sample, then an end marker: whatever arrived before a hang or a crash
    // still counts.
    const int out = write_end.get();
    const auto send = [out](std::uint64_t value) {
      if (::write(out, &value, sizeof value) != sizeof value) ::_exit(1);
    };
    try {
      probe([&send](std::size_t bytes) { send(bytes); });
    } catch (...) {
      ::_exit(1);
    }
    if (const std::uint64_t own = own_private_bytes(); own > 0) {
      send(kProbePrivate);
      send(own);
    }
    send(kProbeDone);
    ::_exit(0);
  }
  write_end.reset();
  const Clock::time_point deadline = Clock::now() + timeout;
  bool private_next = false;  // the record after kProbePrivate
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd fd{read_end.get(), POLLIN, 0};
    if (left <= 0 || posix::poll_fds(&fd, 1, static_cast<int>(left)) <= 0) break;
    std::uint64_t value = 0;
    // Records are 8 bytes, far below PIPE_BUF: each write arrives whole.
    ssize_t got = 0;
    do {
      got = ::read(read_end.get(), &value, sizeof value);
    } while (got < 0 && errno == EINTR);
    if (got != sizeof value) break;  // EOF: the probe exited or crashed
    if (value == kProbeDone) {
      result.complete = true;
      break;
    }
    if (value == kProbePrivate) {
      private_next = true;
      continue;
    }
    if (private_next) {
      result.private_bytes = value;
      private_next = false;
      continue;
    }
    result.largest = std::max<std::size_t>(result.largest.value_or(0), value);
  }
  if (!result.complete) ::kill(pid, SIGKILL);
  int status = 0;
  posix::wait_pid(pid, &status, 0);
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
