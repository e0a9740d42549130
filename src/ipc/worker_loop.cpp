// The worker process's side: what a freshly forked worker sets up (worker info, signal
// dispositions, lifeline, CPU binding, worker_init, the first task's CPU), then its serve loop: pop
// a task, load the batch into its slot, push the result, ring the main doorbell; sleep on its own
// doorbell when idle; _exit() on a stop message or when the main process is gone.
#include "ipc/worker_loop.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <optional>
#include <vector>

#include "data/buffer_cache.hpp"
#include "data/error_text.hpp"
#include "data/spin.hpp"
#include "ipc/fork_hooks.hpp"
#include "ipc/slot_writer.hpp"
#include "ipc/worker_process.hpp"
#include "os/assert.hpp"
#include "os/posix.hpp"

namespace stoker::detail {
namespace {

// How long an idle worker polls its task queue before it sleeps on its doorbell.
constexpr std::chrono::microseconds kWorkerSpin{20};

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

}  // namespace

void reset_signals_in_child() noexcept {
  // A crash must kill the worker with its signal, so the main process can say what happened,
  // whatever handlers the parent program installed (crash reporters, sanitizers).
  for (const int sig : {SIGTERM, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGIO}) {
    posix::default_signal(sig);
  }
  // Ctrl-C reaches the whole foreground process group: the main process decides what happens
  // and stops the workers.
  posix::ignore_signal(SIGINT);
  posix::unblock_all_signals();
}

void worker_main(const WorkerLaunch& launch, pid_t parent) noexcept {
  reset_buffer_cache_after_fork();
  set_worker_info(WorkerInfo{launch.id, launch.num_workers, launch.seed, posix::self_pid()});
  close_lifelines_in_child(launch.lifeline_write);
  reset_signals_in_child();  // SIGIO's default action must be in place before the lifeline
  watch_lifeline_in_child(launch.lifeline_read, parent);
  if (launch.cpus != nullptr && !launch.cpus->empty()) {
    (void)posix::bind_to_cpus(*launch.cpus);  // best effort: a cpuset may forbid it
  }

  const Ring& ring = *launch.ring;
  STOKER_ASSERT(ring.control().magic == kRingMagic && ring.control().version == kRingVersion,
                "a worker serves a ring of this version");
  Channel& channel = ring.channel(launch.channel);
  if (launch.fork_guard != nullptr) {
    try {
      // The child hooks (stoker/fork_hooks.hpp): an embedded interpreter repairs its state
      // here, before worker_init or any batch runs its code.
      launch.fork_guard->in_child();
    } catch (...) {
      exit_with_fatal(channel, "fork hook");
    }
  }
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
  const std::vector<int> fork_cpus =
      launch.first_task_cpu >= 0 ? posix::allowed_cpus() : std::vector<int>{};
  if (launch.worker_init != nullptr && *launch.worker_init) {
    try {
      (*launch.worker_init)(launch.id);
    } catch (...) {
      init_error = describe_current_exception();
    }
  }
  // The first task on one CPU, then back on the ones it had; unless worker_init has placed the
  // worker itself (or there is nothing to spread over, or a cpuset forbids it).
  std::vector<int> first_task_from;
  if (launch.first_task_cpu >= 0) {
    first_task_from = posix::allowed_cpus();
    if (first_task_from != fork_cpus || first_task_from.size() < 2 ||
        posix::bind_to_cpus({launch.first_task_cpu}) != 0) {
      first_task_from.clear();
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
          load_batch(ring, *memory, message.slot, &channel, launch.main_eventfd, *launch.produce,
                     launch.skip_samples, launch.collect_stats && stages.next(), nullptr);
      stages.record(ring.header(message.slot));
      if (outcome == LoadOutcome::kCancelled) ::_exit(0);
    }
    // INV-QUEUE-2: at most slots_per_channel results are outstanding, so this cannot fail.
    const bool pushed = channel.results.try_push(Message{MessageKind::kBatch, message.slot});
    STOKER_ASSERT(pushed, "INV-QUEUE-2: a result queue has room for every slot of its channel");
    (void)pushed;
    ring_doorbell(ring.control().main_doorbell, launch.main_eventfd);
    report_private_memory(channel, ring.control().main_doorbell, launch.main_eventfd);
    if (!first_task_from.empty()) {
      // Unless get() has placed the worker itself. A cpuset changed meanwhile may refuse the
      // old set: then every CPU it allows.
      if (posix::allowed_cpus() == std::vector<int>{launch.first_task_cpu} &&
          posix::bind_to_cpus(first_task_from) != 0) {
        (void)posix::unbind_cpus();
      }
      first_task_from.clear();
    }
  }
}

}  // namespace stoker::detail
