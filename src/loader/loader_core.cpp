// The main process's side of the ring: epoch plans, issuing batches to workers, collecting and
// ordering results, handing out zero-copy batches, and noticing dead, hung or missing workers.
//
// Main-side slot life cycle (Phase):
//   kFree --issue (header + indices written, task pushed)--> kIssued
//   kIssued --result popped--> kReady (or kFree when its plan is stale)
//   kReady --delivered as a Batch--> kHeld (or kFree when it carried an error)
//   kHeld --last copy of the Batch destroyed (SlotLease)--> kFree
// INV-SLOT-1: a slot is written by exactly one process at a time: by main while kFree (its
//   header and indices), by the worker of its channel while kIssued, by nobody while kReady or
//   kHeld. The task push (release) and the result pop (acquire) hand it over.
// INV-SLOT-2: in flight (kIssued + kReady + kHeld) <= num_slots = channels x prefetch_factor,
//   which is what bounds memory and what the consumer can hold.
// INV-QUEUE-2: a channel's task queue never holds more than slots_per_channel batch messages
//   plus two stop messages (a retirement's, then a shutdown's), because a task is pushed only
//   for one of the channel's kFree slots and its result comes back before the slot is kFree
//   again; its result queue holds at most slots_per_channel messages.
// INV-ORDER-1: with in_order, batch k goes to worker k mod num_workers (whichever channel
//   serves that worker) and batch k is delivered before batch k + 1; batches of a plan are
//   issued in increasing k.
//
// Channels and workers: channel c is a fixed set of slots and queues; the worker process
// serving it can change (respawn after a crash; retirement under max_batches_per_worker, when
// the worker's replacement starts on a spare channel while the old one drains its queue).

#include "stoker/data_loader.hpp"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>
#include <map>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include "os/log.hpp"

#include "os/cgroup.hpp"
#include "loader/crash_report.hpp"
#include "data/format.hpp"
#include "datasets/order.hpp"
#include "os/posix.hpp"
#include "ipc/ring.hpp"
#include "ipc/slot_io.hpp"
#include "ipc/spin.hpp"
#include "loader/stats_collector.hpp"
#include "stoker/distributed.hpp"
#include "stoker/errors.hpp"
#include "stoker/memory.hpp"
#include "stoker/pinned_allocator.hpp"
#include "stoker/random.hpp"
#include "stoker/topology.hpp"
#include "ipc/worker.hpp"

namespace stoker::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The consumer polls for a result this long before it sleeps.
constexpr std::chrono::microseconds kMainSpin{10};
// Dead workers are looked for at least this often even while results keep arriving.
constexpr milliseconds kLivenessInterval{50};
// How long stopping workers waits before SIGTERM, and again before SIGKILL.
constexpr milliseconds kStopGrace{500};
// How far behind the live OOM-kill count the SIGKILL baseline stays (see oom_at_spawn).
constexpr std::chrono::seconds kOomBaselineLag{2};
// While the consumer's own batches block progress and another thread might release one.
constexpr milliseconds kHeldWarningInterval{10000};
// How long the sample-size probe may load its few samples before it is killed.
constexpr std::chrono::seconds kProbeTimeout{10};

// What a Batch keeps alive: the mapping, the slot flags and the eventfd that wakes the main
// thread when a slot is released. Outlives the loader when the program keeps batches.
struct RingShared {
  std::unique_ptr<Ring> ring;
  // pin_mode kRegister: the locked range of each slot, from its start (declared after `ring`,
  // so they are unlocked before it is unmapped).
  std::vector<PinnedRange> pins;  // per slot, empty until first pinned
  // held[s]: true from delivery until the last copy of the Batch is gone. Written by main at
  // delivery (relaxed, before the Batch exists) and by ~SlotLease (release, in whichever thread
  // drops the last copy); read by main's reclaim() (acquire, pairs with that release so the
  // consumer's last reads of the slot happen before a worker overwrites it).
  std::unique_ptr<std::atomic<bool>[]> held;
  posix::Fd main_eventfd;
};

struct SlotLease {
  SlotLease(std::shared_ptr<RingShared> ring, std::size_t s) noexcept
      : shared(std::move(ring)), slot(s) {}
  SlotLease(const SlotLease&) = delete;  // one lease per delivery: its destructor frees the slot
  SlotLease& operator=(const SlotLease&) = delete;
  std::shared_ptr<RingShared> shared;
  std::size_t slot;
  ~SlotLease() {
    shared->held[slot].store(false, std::memory_order_release);
    ring_doorbell(shared->ring->control().main_doorbell, shared->main_eventfd.get());
  }
};

enum class Phase : std::uint8_t { kFree, kIssued, kReady, kHeld };

struct SlotState {
  Phase phase = Phase::kFree;
  std::uint64_t plan = 0;
  std::uint64_t batch = 0;
};

// One epoch's batches.
struct Plan {
  std::uint64_t id = 0;
  std::uint64_t epoch = 0;
  std::size_t dataset_size = 0;
  std::size_t batch_size = 1;
  std::size_t num_batches = 0;
  std::vector<std::size_t> order;
  // Batch k is order[offsets[k] .. offsets[k + 1]); empty when every batch has batch_size
  // samples but the last (no batch sampler).
  std::vector<std::size_t> offsets;
  // Iterable datasets: no indices and no known length. Batch k goes to worker k mod W (in
  // order); a worker whose stream ended is `exhausted` and gets no more batches, and batches
  // k >= last_issued[w] of an exhausted worker w are void (skipped in the order).
  bool iterable = false;
  std::vector<std::uint8_t> exhausted;     // per worker id
  std::vector<std::uint64_t> last_issued;  // per worker id: highest batch given + 1
  std::size_t issued = 0;                  // batches 0..issued-1 have been issued (INV-ORDER-1)
  std::size_t delivered = 0;               // batches handed out, or reported as errors
  std::size_t next_in_order = 0;
  // Per batch: handed out (or reported as an error), or skipped on resuming; what state()
  // saves beyond the in-order prefix.
  std::vector<std::uint8_t> done;

  std::span<const std::size_t> batch(std::size_t k) const noexcept {
    if (iterable) return {};
    if (!offsets.empty()) return {order.data() + offsets[k], offsets[k + 1] - offsets[k]};
    const std::size_t begin = k * batch_size;
    return {order.data() + begin, std::min(batch_size, order.size() - begin)};
  }
  bool all_exhausted() const noexcept {
    for (const std::uint8_t e : exhausted) {
      if (e == 0) return false;
    }
    return true;
  }
  bool fully_issued() const noexcept { return iterable ? all_exhausted() : issued == num_batches; }
  bool has_batches() const noexcept { return iterable || num_batches > 0; }
};

// The launcher's ranks, or a single process when its variables are inconsistent (the
// DistributedSampler, not the loader, reports those).
LaunchInfo detect_launch_quietly() {
  try {
    return detect_launch();
  } catch (...) {
    return LaunchInfo{};
  }
}

std::string loader_trace_path(const LoaderOptions& o) {
  const LaunchInfo launch = detect_launch_quietly();
  return trace_path_for(o.trace_path,
                        launch.world_size > 1 ? std::optional(launch.rank) : std::nullopt);
}

std::size_t batches_for(std::size_t n, const LoaderOptions& o) noexcept {
  return o.drop_last ? n / o.batch_size : (n + o.batch_size - 1) / o.batch_size;
}

}  // namespace

// One channel of the ring and the worker process (if any) serving it.
struct ChannelState {
  WorkerProcess process;        // pid -1 when no worker runs here
  std::size_t position = 0;     // the worker id (0 .. num_workers - 1) it serves
  bool retiring = false;        // given its last task and a stop message: its exit is expected
  std::size_t issued = 0;       // batches given to the current process
  std::size_t outstanding = 0;  // its kIssued slots

  bool running() const noexcept { return !process.reaped(); }
};

struct LoaderCore::Impl {
  LoaderOptions options;
  std::function<std::size_t()> dataset_size;
  ProduceFn produce;
  std::size_t num_workers;
  bool iterable;  // the dataset is a stream (next()), not size() and get(i)
  DatasetProbe dataset_probe;
  std::optional<std::size_t> measured_sample_bytes;
  std::optional<std::size_t> measured_worker_base;  // the probe process's private memory
  bool probe_failed = false;
  bool prepared = false;  // kAuto resolved and the memory checked (at the first epoch)
  std::uint64_t next_epoch = 0;
  std::uint64_t next_plan_id = 1;

  // Created at the first begin() that has batches to load.
  std::shared_ptr<RingShared> shared;
  std::optional<SlotMemory> memory;  // what this process has pre-faulted of each slot
  std::vector<SlotState> slots;
  std::vector<ChannelState> channels;
  // Worker id -> the channel serving it. Channels number num_workers, plus one spare with
  // max_batches_per_worker, which a replacement takes over while the old worker finishes.
  std::vector<std::size_t> position_channel;
  std::vector<posix::Fd> task_eventfds;       // per channel
  std::vector<std::vector<int>> worker_cpus;  // bind_workers: per worker id, its core's CPUs
  std::vector<pollfd> wait_fds;               // main eventfd, then the running workers' pidfds
  std::exception_ptr inline_error;            // num_workers == 0: the failure of the inline batch

  std::optional<Plan> current;
  std::optional<Plan> next;  // persistent workers: the following epoch, prefetched
  Clock::time_point last_liveness_check{};
  // The OOM-kill count a SIGKILL is compared with, to tell the OOM killer from anyone else.
  // It follows the current count at least kOomBaselineLag behind: a worker the OOM killer has
  // already counted may take a while to die and be reaped (tearing down a large address space),
  // and must still be compared with the count from before its kill.
  std::optional<OomCount> oom_at_spawn;
  std::optional<OomCount> oom_candidate;
  Clock::time_point oom_candidate_time{};
  std::size_t respawns_this_epoch = 0;
  std::size_t skipped_this_epoch = 0;
  LoaderStats stats;  // the epoch's counters; skipped/respawns filled on read
  Clock::time_point epoch_start{};
  Clock::time_point epoch_end{};  // set when the epoch's last batch has been delivered
  StatsCollector collector;       // the rest of stats(), the trace
  StagePolicy inline_stages;      // num_workers == 0: which batches to time stage by stage
  bool pin_warned = false;        // a batch was delivered unpinned (logged once)
  Clock::time_point last_health_log{};

  Impl(LoaderOptions o, std::function<std::size_t()> size, ProduceFn p, DatasetProbe dp)
      : options(std::move(o)),
        dataset_size(std::move(size)),
        produce(std::move(p)),
        num_workers(options.num_workers == kAuto ? 0
                                                 : static_cast<std::size_t>(options.num_workers)),
        iterable(!dataset_size),
        dataset_probe(std::move(dp)),
        collector(options.collect_stats, loader_trace_path(options)) {
    if (!iterable) return;
    const char* conflict = options.sampler                                   ? "sampler"
                           : options.batch_sampler                           ? "batch_sampler"
                           : options.shuffle                                 ? "shuffle"
                           : options.on_worker_crash != OnWorkerCrash::kFail ? "on_worker_crash"
                           : options.max_batches_per_worker != 0 ? "max_batches_per_worker"
                                                                 : nullptr;
    if (conflict != nullptr) {
      throw std::invalid_argument(fmt::format(
          "LoaderOptions::{} does not apply to an iterable dataset: its samples have no "
          "indices to order, and a worker's place in its stream cannot be moved to a new "
          "process; shard and shuffle inside the dataset instead",
          conflict));
    }
  }

  ~Impl() { stop_workers(); }

  const Ring& ring() const noexcept { return *shared->ring; }
  std::size_t per_channel() const noexcept { return ring().slots_per_channel(); }
  bool skip_samples() const noexcept { return options.on_sample_error == OnSampleError::kSkip; }

  // ---- set-up ----

  // The epoch's batches: from the batch sampler, the sampler, or 0..n-1 (shuffled or not).
  // Main process. Throws std::out_of_range for an index past the dataset's end.
  Plan make_plan(std::uint64_t epoch, std::size_t n) {
    Plan plan;
    plan.id = next_plan_id++;
    plan.epoch = epoch;
    plan.dataset_size = n;
    plan.batch_size = options.batch_size;
    if (iterable) {
      plan.iterable = true;
      plan.exhausted.assign(std::max<std::size_t>(num_workers, 1), 0);
      plan.last_issued.assign(plan.exhausted.size(), 0);
      return plan;
    }
    if (options.batch_sampler) {
      const std::vector<std::vector<std::size_t>> batches = options.batch_sampler->batches(epoch);
      plan.offsets.reserve(batches.size() + 1);
      plan.offsets.push_back(0);
      for (std::size_t k = 0; k < batches.size(); ++k) {
        if (batches[k].empty()) {
          throw std::invalid_argument(fmt::format(
              "DataLoader: the batch sampler's batch {} of epoch {} is empty; every batch needs "
              "at least one index",
              k, epoch));
        }
        plan.order.insert(plan.order.end(), batches[k].begin(), batches[k].end());
        plan.offsets.push_back(plan.order.size());
      }
      plan.num_batches = batches.size();
    } else {
      plan.order = options.sampler ? options.sampler->indices(epoch)
                                   : epoch_order(n, options.shuffle, options.seed, epoch);
      plan.num_batches = batches_for(plan.order.size(), options);
    }
    plan.done.assign(plan.num_batches, 0);
    for (std::size_t i = 0; i < plan.order.size(); ++i) {
      if (plan.order[i] >= n) {
        throw std::out_of_range(fmt::format(
            "DataLoader: the {} gave index {} (position {} of epoch {}), but the dataset has {} "
            "samples",
            options.batch_sampler ? "batch sampler" : "sampler", plan.order[i], i, epoch, n));
      }
    }
    return plan;
  }

  // Batches of epoch next_epoch. With a sampler that is only known by asking it: the plan is
  // made then and kept for begin().
  std::size_t next_num_batches() {
    if (iterable) throw std::logic_error("DataLoader: an iterable dataset has no length");
    const std::size_t n = dataset_size();
    if (!options.sampler && !options.batch_sampler) return batches_for(n, options);
    if (next && next->epoch == next_epoch && next->dataset_size == n) return next->num_batches;
    if (next && next->issued > 0) return make_plan(next_epoch, n).num_batches;  // in flight
    next = make_plan(next_epoch, n);
    return next->num_batches;
  }

  void ensure_ring() {
    if (shared) return;
    auto fresh = std::make_shared<RingShared>();
    std::size_t count = std::max<std::size_t>(num_workers, 1);
    if (num_workers > 0 && options.max_batches_per_worker > 0) ++count;  // the spare
    fresh->ring = std::make_unique<Ring>(count, options.prefetch_factor, options.max_batch_bytes);
    const std::size_t n = fresh->ring->num_slots();
    fresh->held = std::make_unique<std::atomic<bool>[]>(n);
    fresh->main_eventfd.reset(posix::make_eventfd());
    if (!fresh->main_eventfd.valid()) {
      throw Error(posix::errno_message("DataLoader: creating an eventfd failed", errno) +
                  "; raise `ulimit -n`");
    }
    std::vector<posix::Fd> eventfds;
    for (std::size_t c = 0; c < count && num_workers > 0; ++c) {
      eventfds.emplace_back(posix::make_eventfd());
      if (!eventfds.back().valid()) {
        throw Error(posix::errno_message("DataLoader: creating an eventfd failed", errno) +
                    "; raise `ulimit -n` or lower num_workers");
      }
    }
    memory.emplace(*fresh->ring);
    slots.assign(n, SlotState{});
    channels = std::vector<ChannelState>(count);
    position_channel.resize(num_workers);
    for (std::size_t p = 0; p < num_workers; ++p) position_channel[p] = p;
    task_eventfds = std::move(eventfds);
    shared = std::move(fresh);
  }

  bool all_workers_running() const noexcept {
    for (const std::size_t c : position_channel) {
      if (!channels[c].running() || channels[c].retiring) return false;
    }
    return true;
  }

  void ensure_workers() {
    if (all_workers_running()) return;
    stop_workers();
    warn_if_multithreaded();
    if (options.bind_workers) {
      worker_cpus = worker_cores(Topology::detect(), num_workers, ::sched_getcpu());
    }
    try {
      for (std::size_t p = 0; p < num_workers; ++p) {
        position_channel[p] = p;
        spawn_on(p, p);
      }
    } catch (...) {
      stop_workers();
      throw;
    }
    last_liveness_check = Clock::now();
  }

  // Forks a worker for position p on channel c, whose previous process (if any) is reaped.
  void spawn_on(std::size_t c, std::size_t p) {
    reset_channel(c);
    WorkerLaunch launch;
    launch.id = p;
    launch.num_workers = num_workers;
    launch.seed = Generator::from({options.seed, p}).next();
    launch.ring = &ring();
    launch.channel = c;
    launch.task_eventfd = task_eventfds[c].get();
    launch.main_eventfd = shared->main_eventfd.get();
    launch.produce = &produce;
    launch.skip_samples = skip_samples();
    launch.collect_stats = collector.enabled();
    launch.cpus = p < worker_cpus.size() ? &worker_cpus[p] : nullptr;
    launch.worker_init = &options.worker_init;
    ChannelState& channel = channels[c];
    channel.process = WorkerProcess::spawn(launch);
    channel.position = p;
    channel.retiring = false;
    channel.issued = 0;
    channel.outstanding = 0;
    rebuild_wait_fds();
  }

  void rebuild_wait_fds() {
    wait_fds.clear();
    wait_fds.push_back({shared->main_eventfd.get(), POLLIN, 0});
    for (const ChannelState& channel : channels) {
      if (channel.running() && channel.process.pidfd() >= 0) {
        wait_fds.push_back({channel.process.pidfd(), POLLIN, 0});
      }
    }
  }

  std::size_t running_workers() const noexcept {
    std::size_t n = 0;
    for (const ChannelState& channel : channels) n += channel.running() ? 1U : 0U;
    return n;
  }

  // Only while channel c has no worker.
  void reset_channel(std::size_t c) noexcept {
    Channel& channel = ring().channel(c);
    channel.tasks.reset();
    channel.results.reset();
    channel.doorbell.sleeping.store(0, std::memory_order_relaxed);
    channel.current_sample.store(kNoSample, std::memory_order_relaxed);
    channel.current_batch.store(0, std::memory_order_relaxed);
    channel.stop_requested.store(0, std::memory_order_relaxed);
    channel.fatal_valid.store(0, std::memory_order_relaxed);
  }

  // Asks channel c's worker to exit: at once (`now`: between samples) or after its queued tasks.
  void request_stop(std::size_t c, bool now) noexcept {
    Channel& channel = ring().channel(c);
    if (now) channel.stop_requested.store(1, std::memory_order_relaxed);
    channel.tasks.try_push(Message{MessageKind::kStop, 0});  // INV-QUEUE-2 leaves room
    ring_doorbell(channel.doorbell, task_eventfds[c].get());
  }

  // Stops and reaps every worker; slots they were loading become free. A worker still busy
  // after `grace` gets SIGTERM, and SIGKILL after as long again. Never throws.
  void stop_workers(milliseconds grace = kStopGrace) noexcept {
    std::vector<WorkerProcess> running;
    for (std::size_t c = 0; c < channels.size(); ++c) {
      if (!channels[c].running()) continue;
      request_stop(c, true);
      running.push_back(std::move(channels[c].process));
    }
    if (!running.empty()) reap_all(running, grace);
    for (ChannelState& channel : channels) {
      channel.retiring = false;
      channel.outstanding = 0;
    }
    for (SlotState& slot : slots) {
      if (slot.phase == Phase::kIssued) slot.phase = Phase::kFree;
    }
    if (shared) rebuild_wait_fds();
  }

  // ---- the epoch ----

  // The epoch starts only when everything it needs exists: a failure (fork, memory) leaves
  // next_epoch where it was, so the next begin() runs the same epoch.
  void begin_epoch() {
    abandon_current();
    const std::uint64_t epoch = next_epoch;
    const std::size_t n = iterable ? 0 : dataset_size();
    current = next && next->epoch == epoch && next->dataset_size == n ? std::move(*next)
                                                                      : make_plan(epoch, n);
    next.reset();
    std::size_t resumed_skipped = 0;  // samples the saved epoch had skipped already
    if (resume) {
      try {
        resumed_skipped = apply_resume(*current);
      } catch (...) {
        current.reset();
        throw;
      }
    }
    if (current->has_batches()) {
      try {
        prepare();
        ensure_ring();
        drop_stale_ready();  // keeps what was prefetched for this plan, now current
        if (num_workers > 0) ensure_workers();
      } catch (...) {
        current.reset();
        throw;
      }
    }
    next_epoch = epoch + 1;
    respawns_this_epoch = 0;
    skipped_this_epoch = resumed_skipped;
    const std::uint64_t recycled = stats.workers_recycled;
    stats = LoaderStats{};
    stats.epoch = epoch;
    stats.workers_recycled = recycled;
    epoch_start = Clock::now();
    epoch_end = {};
    collector.begin_epoch(num_workers, epoch, now_ns());
    last_health_log = epoch_start;
    oom_at_spawn = read_oom_kill_count();
    oom_candidate_time = {};
  }

  // ---- memory ----

  // The probe's time limit: kProbeTimeout, or half of LoaderOptions::timeout when that is
  // shorter, so a get() that hangs still ends in LoaderTimeout about `timeout` after begin()
  // (the probe's half, then the worker's wait), not seconds later.
  milliseconds probe_timeout() const {
    const milliseconds cap = kProbeTimeout;
    if (options.timeout.count() <= 0) return cap;
    return std::clamp(std::chrono::duration_cast<milliseconds>(options.timeout) / 2,
                      milliseconds{1}, cap);
  }

  std::optional<std::size_t> sample_bytes() {
    if (options.sample_bytes > 0) return options.sample_bytes;
    if (!measured_sample_bytes && dataset_probe.sample_bytes && !probe_failed) {
      // In a child process: get() may keep state, count calls or expect a worker around it.
      const ProbeResult probe =
          run_probe_in_child(dataset_probe.sample_bytes, num_workers, probe_timeout());
      measured_sample_bytes = probe.largest;
      measured_worker_base = probe.private_bytes;
      probe_failed = !probe.largest;
      try {
        if (!probe.largest) {
          logger().warn(
              "stoker: could not measure the bytes per sample (the first get() threw, crashed "
              "or took over {} ms in a probe process), so the loader's memory is not checked; "
              "give LoaderOptions::sample_bytes to check it",
              probe_timeout().count());
        } else if (!probe.complete) {
          logger().warn(
              "stoker: measured only some of the probe samples ({} bytes the largest; a later "
              "get() threw, crashed or took over {} ms in total); give "
              "LoaderOptions::sample_bytes if samples can be larger",
              *probe.largest, probe_timeout().count());
        }
      } catch (...) {
      }
    }
    return measured_sample_bytes;
  }

  MemoryEstimate estimate(std::size_t workers, std::size_t batch, std::size_t bytes) const {
    EstimateInputs in;
    in.num_workers = workers;
    in.prefetch_factor = options.prefetch_factor;
    in.batch_size = batch;
    in.bytes_per_sample = bytes;
    in.streaming = !options.collate && options.on_sample_error != OnSampleError::kSkip && !iterable;
    in.cache_bytes = dataset_probe.cache_bytes;
    in.worker_base_bytes = measured_worker_base;
    if (options.pin_memory && options.pin_mode == PinMode::kCopy && bytes > 0) {
      // The staging blocks: the batch the consumer holds and the next one being copied, each
      // its samples, their indices and up to 64 bytes of alignment per field.
      constexpr std::size_t kFieldAlignmentSlack = 64 * 16;  // 16 fields
      in.pinned_bytes = 2 * PinnedAllocator::size_class(batch * (bytes + sizeof(std::size_t)) +
                                                        kFieldAlignmentSlack);
    }
    return estimate_memory(in);
  }

  // pin_memory: refuse, before forking, a loader whose locked memory would pass the pinned
  // allocator's budget (the ring itself for kRegister, the staging blocks for kCopy).
  void check_pinned(std::size_t bytes) {
    if (!options.pin_memory) return;
    const MemoryEstimate e = estimate(num_workers, options.batch_size, bytes);
    const bool ring = options.pin_mode == PinMode::kRegister;
    const std::size_t locked = ring ? e.ring_bytes : e.pinned_bytes;
    const PinnedStats now = pinned().stats();
    // Cached blocks count as free: the allocator releases them when it needs the room.
    const std::size_t free = now.budget_bytes - std::min(now.budget_bytes, now.in_use_bytes);
    if (locked <= free) return;
    throw PinnedMemoryError(
        fmt::format(
            "DataLoader: pin_memory would lock about {} ({}) but the pinned allocator "
            "has {} of its {} budget left (backend {}). Lower batch_size, num_workers or "
            "prefetch_factor{}, raise the budget (PinnedOptions::budget_bytes, and "
            "`ulimit -l` for mlock), or set pin_memory = false",
            format_bytes(locked),
            ring ? fmt::format("the ring: {} slots x {}", e.num_slots, format_bytes(e.slot_bytes))
                 : std::string("two staging blocks of a batch"),
            format_bytes(free), format_bytes(now.budget_bytes), to_string(now.backend),
            ring ? ", or use pin_mode = kCopy (locks two batches, not the ring)" : ""),
        locked, now.budget_bytes, now.in_use_bytes + now.cached_bytes);
  }

  // At the first epoch, before anything is forked or mapped: pick num_workers for kAuto, then
  // refuse a loader whose estimate passes the memory it may use.
  void prepare() {
    if (prepared) return;
    const std::optional<std::size_t> bytes = sample_bytes();
    const bool need_system =
        options.num_workers == kAuto || (options.check_memory && !options.memory_limit);
    const SystemInfo system = need_system ? probe_system() : SystemInfo{};
    if (options.num_workers == kAuto) {
      const MemoryEstimate one = estimate(1, options.batch_size, bytes.value_or(0));
      const WorkerRecommendation r = recommend_num_workers(
          system, one.worker_private_bytes + options.prefetch_factor * one.slot_bytes,
          options.memory_fraction, detect_launch_quietly().local_world_size);
      num_workers = r.num_workers;
      options.num_workers = static_cast<int>(r.num_workers);
      try {
        logger().info("stoker: num_workers = kAuto chose {}: {}", r.num_workers, r.reason);
      } catch (...) {
      }
    }
    if (options.check_memory && bytes) check_memory(*bytes, system);
    if (bytes) check_pinned(*bytes);
    prepared = true;
  }

  void check_memory(std::size_t bytes, const SystemInfo& system) {
    std::uint64_t allowed = 0;
    std::string limit;
    if (options.memory_limit) {
      allowed = *options.memory_limit;
      limit = "LoaderOptions::memory_limit";
    } else {
      const std::optional<std::uint64_t> usable = system.usable_memory();
      if (!usable) return;  // nothing to check against
      allowed = static_cast<std::uint64_t>(static_cast<double>(*usable) * options.memory_fraction);
      const bool cgroup = system.cgroup_limit.value &&
                          (!system.mem_available.value ||
                           *system.cgroup_limit.value - system.cgroup_usage.value.value_or(0) <
                               *system.mem_available.value);
      limit = fmt::format(
          "{:.3g}% (LoaderOptions::memory_fraction) of the {} free {}",
          options.memory_fraction * 100, format_bytes(*usable),
          cgroup ? "under the memory cgroup's limit (" + system.cgroup_limit.source + ")"
                 : "by MemAvailable");
    }
    const MemoryEstimate e = estimate(num_workers, options.batch_size, bytes);
    if (e.loader_bytes <= allowed) return;
    auto fits = [&](std::size_t w, std::size_t b) {
      return estimate(w, b, bytes).loader_bytes <= allowed;
    };
    std::string advice;
    std::optional<std::size_t> fitting_workers;
    std::optional<std::size_t> fitting_batch;
    for (std::size_t w = num_workers; w-- > 0;) {
      if (fits(w, options.batch_size)) {
        advice = fmt::format("num_workers={} (with batch_size={})", w, options.batch_size);
        fitting_workers = w;
        break;
      }
    }
    std::size_t low = 0;  // largest batch size that fits, by bisection
    std::size_t high = options.batch_size;
    while (high - low > 1) {
      const std::size_t mid = low + (high - low) / 2;
      (fits(num_workers, mid) ? low : high) = mid;
    }
    if (low > 0) {
      advice += fmt::format("{}batch_size={} (with num_workers={})", advice.empty() ? "" : " or ",
                            low, num_workers);
      fitting_batch = low;
    }
    advice = advice.empty() ? "No smaller num_workers or batch_size would fit either: free "
                              "memory or raise the limit first."
                            : advice + " would fit.";
    throw MemoryBudgetError(
        fmt::format(
            "DataLoader: not enough memory: this loader needs about {} (a ring of {} slots x {} "
            "= {}, {} workers x {}{}{}) but may use {}: {}. {} (LoaderOptions::"
            "check_memory = false skips this check.)",
            format_bytes(e.loader_bytes), e.num_slots, format_bytes(e.slot_bytes),
            format_bytes(e.ring_bytes), e.num_workers, format_bytes(e.worker_private_bytes),
            e.cache_bytes > 0 ? fmt::format(", a sample cache of {}", format_bytes(e.cache_bytes))
                              : std::string(),
            e.pinned_bytes > 0 ? fmt::format(", {} pinned", format_bytes(e.pinned_bytes))
                               : std::string(),
            format_bytes(allowed), limit, advice),
        e, allowed, fitting_workers, fitting_batch);
  }

  // ---- resume ----

  // What load_state() read, applied by the next begin_epoch().
  struct Resume {
    std::uint64_t epoch = 0;
    std::size_t dataset_size = 0;
    std::size_t num_batches = 0;
    std::size_t position = 0;             // batches 0..position-1 are done
    std::vector<std::size_t> extra_done;  // and these, beyond the prefix (out of order)
    std::size_t skipped = 0;
  };
  std::optional<Resume> resume;

  // Marks the saved epoch's delivered batches done; returns the samples it had skipped.
  std::size_t apply_resume(Plan& plan) {
    const Resume r = *std::exchange(resume, std::nullopt);
    if (plan.epoch != r.epoch) return 0;  // set_epoch() chose another epoch since: start afresh
    if (plan.dataset_size != r.dataset_size || plan.num_batches != r.num_batches) {
      throw std::invalid_argument(fmt::format(
          "DataLoader::load_state: the state was saved for {} samples in {} batches, but epoch "
          "{} here has {} samples in {} batches; resume with the same dataset, batch_size, "
          "drop_last and sampler",
          r.dataset_size, r.num_batches, r.epoch, plan.dataset_size, plan.num_batches));
    }
    for (std::size_t k = 0; k < r.position; ++k) plan.done[k] = 1;
    for (const std::size_t k : r.extra_done) plan.done[k] = 1;
    plan.delivered = r.position + r.extra_done.size();
    plan.next_in_order = r.position;
    plan.issued = r.position;
    return r.skipped;
  }

  std::string save_state() {
    if (iterable) {
      throw std::logic_error(
          "DataLoader::state: an iterable dataset's position is inside its workers' streams, "
          "which stoker cannot save; save your stream's own position (e.g. in start_epoch) "
          "instead");
    }
    std::uint64_t epoch = next_epoch;
    std::size_t n = dataset_size();
    std::size_t batches = 0;
    std::size_t position = 0;
    std::string extra;
    std::size_t skipped = 0;
    if (current) {
      const Plan& plan = *current;
      epoch = plan.epoch;
      n = plan.dataset_size;
      batches = plan.num_batches;
      while (position < batches && plan.done[position] != 0) ++position;
      for (std::size_t k = position; k < batches; ++k) {
        if (plan.done[k] != 0) extra += fmt::format(" {}", k);
      }
      skipped = skipped_this_epoch;
    } else {
      batches = next_num_batches();
    }
    return fmt::format(
        "stoker-loader-state 1\nepoch {}\nseed {}\nsamples {}\nbatches {}\nposition {}\n"
        "done{}\nskipped {}\n",
        epoch, options.seed, n, batches, position, extra, skipped);
  }

  void load_state(std::string_view text) {
    if (iterable) {
      throw std::logic_error(
          "DataLoader::load_state: an iterable dataset's loader has no state to load (its "
          "position is inside its workers' streams); restore your stream's own position "
          "instead");
    }
    std::istringstream in{std::string(text)};
    std::string magic;
    int version = 0;
    in >> magic >> version;
    if (magic != "stoker-loader-state" || version != 1) {
      throw std::invalid_argument(
          "DataLoader::load_state: this is not a state saved by DataLoader::state() (version 1)");
    }
    Resume r;
    std::uint64_t seed = 0;
    std::map<std::string, bool> seen;
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string key;
      fields >> key;
      seen[key] = true;
      if (key == "epoch")
        fields >> r.epoch;
      else if (key == "seed")
        fields >> seed;
      else if (key == "samples")
        fields >> r.dataset_size;
      else if (key == "batches")
        fields >> r.num_batches;
      else if (key == "position")
        fields >> r.position;
      else if (key == "skipped")
        fields >> r.skipped;
      else if (key == "done") {
        for (std::size_t k; fields >> k;) r.extra_done.push_back(k);
        fields.clear();
      }
      if (fields.fail()) {
        throw std::invalid_argument(
            fmt::format("DataLoader::load_state: cannot read the line '{}'", line));
      }
    }
    for (const char* key : {"epoch", "seed", "samples", "batches", "position"}) {
      if (!seen[key]) {
        throw std::invalid_argument(
            fmt::format("DataLoader::load_state: the state has no '{}' line", key));
      }
    }
    if (seed != options.seed) {
      throw std::invalid_argument(fmt::format(
          "DataLoader::load_state: the state was saved by a loader with seed {}, this one has "
          "seed {}: the order would differ; build the loader with LoaderOptions::seed = {}",
          seed, options.seed, seed));
    }
    if (r.position > r.num_batches) {
      throw std::invalid_argument(
          fmt::format("DataLoader::load_state: position {} is past the epoch's {} batches",
                      r.position, r.num_batches));
    }
    for (const std::size_t k : r.extra_done) {
      if (k < r.position || k >= r.num_batches) {
        throw std::invalid_argument(
            fmt::format("DataLoader::load_state: batch {} in 'done' is out of place", k));
      }
    }
    abandon_current();
    next.reset();
    next_epoch = r.epoch;
    resume = std::move(r);
  }

  // Ends the running epoch early (its iterator went away, or a new epoch starts). Without
  // persistent workers the workers are stopped; with them, their in-flight batches come back
  // stale and their slots are freed then.
  void abandon_current() noexcept {
    if (!current) return;
    current.reset();
    if (!options.persistent_workers) stop_workers();
    drop_stale_ready();
  }

  // After an error that leaves the workers' state unknown: stop them all.
  void fail_epoch(milliseconds grace = kStopGrace) noexcept {
    current.reset();
    next.reset();
    stop_workers(grace);
    drop_stale_ready();
  }

  Plan* live_plan(std::uint64_t plan) noexcept {
    if (current && current->id == plan) return &*current;
    if (next && next->id == plan) return &*next;
    return nullptr;
  }

  void drop_stale_ready() noexcept {
    for (SlotState& slot : slots) {
      if (slot.phase == Phase::kReady && live_plan(slot.plan) == nullptr) {
        slot.phase = Phase::kFree;
      }
    }
  }

  // kHeld slots whose Batch is gone become free.
  bool reclaim() noexcept {
    bool any = false;
    for (std::size_t s = 0; s < slots.size(); ++s) {
      if (slots[s].phase == Phase::kHeld && !shared->held[s].load(std::memory_order_acquire)) {
        slots[s].phase = Phase::kFree;
        any = true;
      }
    }
    return any;
  }

  std::optional<std::size_t> free_slot(std::size_t c) const noexcept {
    const std::size_t first = c * per_channel();
    for (std::size_t s = first; s < first + per_channel(); ++s) {
      if (slots[s].phase == Phase::kFree) return s;
    }
    return std::nullopt;
  }

  // Main process owns the slot (kFree): write what the loading process needs to know.
  void write_task(std::size_t s, const Plan& plan, std::size_t k) {
    const std::span<const std::size_t> indices = plan.batch(k);
    memory->ensure(s, Ring::payload_start(indices.size()));
    SlotHeader& header = ring().header(s);
    header.plan = plan.id;
    header.batch = k;
    header.epoch = plan.epoch;
    header.seed = options.seed;
    header.num_indices = indices.size();
    header.status = SlotStatus::kEmpty;
    if (!indices.empty()) std::memcpy(ring().indices(s), indices.data(), indices.size_bytes());
    slots[s] = SlotState{Phase::kIssued, plan.id, k};
  }

  // Issues batch k of `plan` into slot s of channel c (a kFree slot of a running worker).
  void send_task(std::size_t c, std::size_t s, const Plan& plan, std::size_t k) {
    write_task(s, plan, k);
    ++channels[c].issued;
    ++channels[c].outstanding;
    Channel& channel = ring().channel(c);
    channel.tasks.try_push(Message{MessageKind::kBatch, static_cast<std::uint32_t>(s)});
    ring_doorbell(channel.doorbell, task_eventfds[c].get());
  }

  // The plan whose batches are issued next: the current epoch's, then (persistent workers)
  // the following epoch's, so a new epoch's first batches are ready when it starts. Only when
  // the order depends on (seed, epoch) alone: a user's sampler is asked at begin(), as its
  // interface promises, since it may change between epochs.
  Plan* plan_to_issue() {
    if (current && !current->fully_issued()) return &*current;
    if (!options.persistent_workers || options.sampler || options.batch_sampler) return nullptr;
    if (!next) {
      const std::uint64_t epoch = current ? current->epoch + 1 : next_epoch;
      if (epoch != next_epoch) return nullptr;  // set_epoch() chose another epoch
      next = make_plan(epoch, iterable ? 0 : dataset_size());
    }
    return next->fully_issued() ? nullptr : &*next;
  }

  // max_batches_per_worker: once position p's worker has been given its quota, fork its
  // replacement into the spare channel and let the old worker finish what it has, then exit.
  // Delivery does not pause: the old worker's batches are already queued and the new one
  // starts loading at once. The spare must have no worker and nothing being loaded; batches a
  // retired worker left there (ready or held) stay until delivered and released. When no
  // channel is spare yet, the old worker goes on until one is.
  void maybe_recycle(std::size_t p) {
    if (options.max_batches_per_worker == 0) return;
    const std::size_t old = position_channel[p];
    if (channels[old].issued < options.max_batches_per_worker) return;
    // A retired worker that has finished frees its channel: reap it now rather than at the
    // next liveness check (one waitpid per retiring worker, only when a recycle is due).
    bool reaped = false;
    for (ChannelState& channel : channels) {
      if (channel.retiring && channel.running() && channel.process.try_reap()) {
        check_exit(channel);
        reaped = true;
      }
    }
    if (reaped) rebuild_wait_fds();  // a reaped worker's pidfd is closed
    collect();                       // a retired worker's last results, before its channel is reset
    for (std::size_t c = 0; c < channels.size(); ++c) {
      const bool mapped =
          std::find(position_channel.begin(), position_channel.end(), c) != position_channel.end();
      if (mapped || channels[c].running() || channels[c].outstanding != 0 || !free_slot(c)) {
        continue;
      }
      spawn_on(c, p);
      position_channel[p] = c;
      channels[old].retiring = true;
      request_stop(old, false);
      ++stats.workers_recycled;
      return;
    }
  }

  std::optional<std::size_t> channel_for(const Plan& plan, std::size_t k) {
    if (options.in_order) {
      // INV-ORDER-1: batch k belongs to worker k mod num_workers.
      const std::size_t p = k % num_workers;
      maybe_recycle(p);
      const std::size_t c = position_channel[p];
      return free_slot(c) ? std::optional<std::size_t>(c) : std::nullopt;
    }
    // Whichever worker has a free slot and the least work queued, so a slow worker gets less.
    std::optional<std::size_t> best;
    for (std::size_t p = 0; p < num_workers; ++p) {
      if (plan.iterable && plan.exhausted[p] != 0) continue;
      maybe_recycle(p);
      const std::size_t c = position_channel[p];
      if (free_slot(c) && (!best || channels[c].outstanding < channels[*best].outstanding)) {
        best = c;
      }
    }
    return best;
  }

  void issue() {
    if (num_workers == 0 || running_workers() == 0) return;
    for (Plan* plan = plan_to_issue(); plan != nullptr; plan = plan_to_issue()) {
      const std::size_t k = plan->issued;
      if (!plan->iterable && plan->done[k] != 0) {
        ++plan->issued;  // delivered before a resume: not loaded again
        continue;
      }
      if (plan->iterable && options.in_order && plan->exhausted[k % num_workers] != 0) {
        ++plan->issued;  // a void batch: that worker's stream has ended
        continue;
      }
      const std::optional<std::size_t> c = channel_for(*plan, k);
      if (!c) return;
      send_task(*c, *free_slot(*c), *plan, k);
      if (plan->iterable) plan->last_issued[channels[*c].position] = k + 1;
      ++plan->issued;
    }
  }

  // Pops every published result. True when anything came back (a ready batch, or a stale one
  // whose slot is now free for issue()). Results of workers that have since exited count.
  bool collect() noexcept {
    bool any = false;
    for (std::size_t c = 0; c < channels.size() && num_workers > 0; ++c) {
      Channel& channel = ring().channel(c);
      Message message;
      while (channel.results.try_pop(message)) {
        const std::size_t s = message.slot;
        if (s / per_channel() != c || slots[s].phase != Phase::kIssued) continue;
        --channels[c].outstanding;
        slots[s].phase = live_plan(slots[s].plan) != nullptr ? Phase::kReady : Phase::kFree;
        if (collector.enabled() && slots[s].phase == Phase::kReady &&
            ring().header(s).status == SlotStatus::kOk) {
          collector.on_batch_loaded(channels[c].position, channels[c].process.pid(),
                                    ring().header(s));
        }
        any = true;
      }
    }
    return any;
  }

  // In order, over an iterable dataset: steps past batches that will never come because
  // their worker's stream ended before they were given out.
  void skip_void_batches() noexcept {
    Plan& plan = *current;
    if (!plan.iterable || !(options.in_order || num_workers == 0)) return;
    const std::size_t workers = plan.exhausted.size();
    while (plan.next_in_order < plan.issued) {
      const std::size_t w = plan.next_in_order % workers;
      if (plan.exhausted[w] == 0 || plan.next_in_order < plan.last_issued[w]) return;
      ++plan.next_in_order;
    }
  }

  // Whether the epoch has delivered everything it will.
  bool epoch_done() const noexcept {
    const Plan& plan = *current;
    if (!plan.iterable) return plan.delivered == plan.num_batches;
    if (!plan.all_exhausted()) return false;
    for (const SlotState& slot : slots) {
      if (slot.plan == plan.id && (slot.phase == Phase::kIssued || slot.phase == Phase::kReady)) {
        return false;
      }
    }
    return true;
  }

  std::optional<std::size_t> deliverable() const noexcept {
    const Plan& plan = *current;
    std::optional<std::size_t> found;
    const bool ordered = options.in_order || num_workers == 0;
    for (std::size_t s = 0; s < slots.size(); ++s) {
      if (slots[s].phase != Phase::kReady || slots[s].plan != plan.id) continue;
      if (ordered && slots[s].batch == plan.next_in_order) return s;
      if (!ordered && (!found || slots[s].batch < slots[*found].batch)) found = s;
    }
    return found;
  }

  // num_workers == 0: load the next batch here, into a free slot, with the workers' code.
  bool load_inline() {
    Plan& plan = *current;
    while (!plan.iterable && !plan.fully_issued() && plan.done[plan.issued] != 0) ++plan.issued;
    if (plan.fully_issued()) return false;
    const std::optional<std::size_t> s = free_slot(0);
    if (!s) return false;
    write_task(*s, plan, plan.issued);
    ++plan.issued;
    inline_error = nullptr;
    load_batch(ring(), *memory, *s, nullptr, produce, skip_samples(),
               collector.enabled() && inline_stages.next(), &inline_error);
    inline_stages.record(ring().header(*s));
    if (collector.enabled() && ring().header(*s).status == SlotStatus::kOk) {
      collector.on_batch_loaded(0, ::getpid(), ring().header(*s));
    }
    slots[*s].phase = Phase::kReady;
    return true;
  }

  // The batch in slot s, or nullopt when every sample of it was skipped. Throws the batch's
  // error, or WorkerException once too many samples were skipped.
  std::optional<Batch> deliver(std::size_t s) {
    Plan& plan = *current;
    SlotState& state = slots[s];
    const SlotHeader& header = ring().header(s);
    const std::uint64_t k = state.batch;
    ++plan.delivered;
    if (k < plan.done.size()) plan.done[k] = 1;
    plan.next_in_order = std::max<std::size_t>(plan.next_in_order, k + 1);
    if (header.status != SlotStatus::kOk) {
      // A worker that cannot go on with its stream (worker_init failed) says so with its error.
      if (plan.iterable && header.exhausted != 0) {
        plan.exhausted[num_workers == 0 ? 0 : channels[ring().channel_of(s)].position] = 1;
      }
      state.phase = Phase::kFree;
      throw_batch_error(s, header.error, k);
    }
    const std::span<const std::size_t> expected = plan.batch(k);
    if (header.num_indices != expected.size() ||
        (!plan.iterable && header.num_kept > header.num_indices) || header.plan != plan.id ||
        header.batch != k) {
      state.phase = Phase::kFree;
      throw Error(fmt::format(
          "DataLoader: the header of batch slot {} was overwritten (batch {} of epoch {}); "
          "something wrote outside its batch, most likely memory corruption in user code",
          s, k, plan.epoch));
    }
    if (plan.iterable && header.exhausted != 0) {
      plan.exhausted[num_workers == 0 ? 0 : channels[ring().channel_of(s)].position] = 1;
    }
    if (header.num_skipped != 0) note_skipped(s, k);
    if (header.num_kept == 0) {
      state.phase = Phase::kFree;
      return std::nullopt;
    }
    shared->held[s].store(true, std::memory_order_relaxed);
    state.phase = Phase::kHeld;
    auto lease = std::make_shared<SlotLease>(shared, s);
    const bool pin_slot =
        options.pin_memory && options.pin_mode == PinMode::kRegister && pin_committed(s);
    std::vector<Field> fields = read_fields(ring(), s, lease);
    const std::span<const std::size_t> indices(
        reinterpret_cast<const std::size_t*>(ring().indices(s)),
        plan.iterable ? 0 : header.num_kept);
    Batch batch(std::move(fields), indices, plan.epoch, k, std::move(lease), header.num_kept,
                pin_slot);
    if (options.pin_memory && options.pin_mode == PinMode::kCopy) {
      if (std::optional<Batch> staged = copy_to_pinned(batch)) return std::move(*staged);
    }
    return batch;
  }

  // A batch that cannot be pinned mid-epoch (the budget checked before forking was an
  // estimate: samples vary, other loaders share the allocator) is delivered unpinned, not
  // lost: is_pinned() says so, and the log says why, once per loader.
  void warn_unpinned(const std::exception& e) noexcept {
    if (pin_warned) return;
    pin_warned = true;
    try {
      logger().warn(
          "stoker: a batch could not be pinned and is delivered unpinned "
          "(Batch::is_pinned() is false): {}",
          e.what());
    } catch (...) {
    }
  }

  PinnedAllocator& pinned() {
    if (!options.pinned_allocator) options.pinned_allocator = PinnedAllocator::global();
    return *options.pinned_allocator;
  }

  // pin_mode kRegister: locks slot s from its start to what it has committed. A slot grows,
  // never shrinks; when it has grown, its range is unlocked and locked again whole (one
  // registration per slot, which CUDA copies treat as one pinned range). The slot is being
  // delivered, so no Batch refers to it meanwhile. False when it cannot be locked.
  bool pin_committed(std::size_t s) noexcept {
    try {
      if (shared->pins.empty()) shared->pins.resize(ring().num_slots());
      const std::size_t committed =
          std::min(round_up(ring().header(s).committed.load(std::memory_order_relaxed), kPageSize),
                   ring().slot_bytes());
      PinnedRange& range = shared->pins[s];
      if (committed <= range.size()) return true;
      range = PinnedRange();
      range = pinned().pin_range(ring().slot(s), committed);
      return true;
    } catch (const std::exception& e) {
      warn_unpinned(e);
      return false;
    }
  }

  // pin_mode kCopy: the batch, copied into one pinned staging block (fields 64-byte aligned);
  // its slot is freed when `view` goes.
  std::optional<Batch> copy_to_pinned(const Batch& view) {
    std::size_t total = view.indices().size() * sizeof(std::size_t);
    for (const Field& field : view.fields()) total = round_up(total, 64) + field.second.nbytes();
    struct Staged {
      PinnedBlock block;
    };
    std::shared_ptr<Staged> staged;
    try {
      staged = std::make_shared<Staged>(Staged{pinned().allocate(std::max<std::size_t>(total, 1))});
    } catch (const std::exception& e) {
      warn_unpinned(e);
      return std::nullopt;
    }
    std::byte* const base = staged->block.data();
    std::memcpy(base, view.indices().data(), view.indices().size() * sizeof(std::size_t));
    std::size_t at = view.indices().size() * sizeof(std::size_t);
    std::vector<Field> fields;
    fields.reserve(view.fields().size());
    for (const Field& field : view.fields()) {
      at = round_up(at, 64);
      const Tensor& t = field.second;
      if (t.nbytes() > 0) std::memcpy(base + at, t.raw_data(), t.nbytes());
      fields.emplace_back(field.first, Tensor::view(t.dtype(), t.shape(), base + at, staged));
      at += t.nbytes();
    }
    const std::span<const std::size_t> indices(reinterpret_cast<const std::size_t*>(base),
                                               view.indices().size());
    return Batch(std::move(fields), indices, view.epoch(), view.index(), std::move(staged),
                 view.size(), true);
  }

  // Counts a batch's skipped samples; past max_skipped_samples, raises the last one's error.
  void note_skipped(std::size_t s, std::uint64_t k) {
    const SlotHeader& header = ring().header(s);
    skipped_this_epoch += header.num_skipped;
    // A map-style batch's skipped indices follow its kept ones; an iterable one has none.
    const std::uint64_t* idx = ring().indices(s);
    for (std::size_t i = header.num_kept; i < header.num_indices; ++i) {
      stats.skipped_indices.push_back(idx[i]);
    }
    if (skipped_this_epoch > options.max_skipped_samples) {
      slots[s].phase = Phase::kFree;
      WorkerException::Details details = exception_details(s, header.skipped, k);
      details.where += fmt::format(
          " ({} samples skipped this epoch, more than LoaderOptions::max_skipped_samples = {})",
          skipped_this_epoch, options.max_skipped_samples);
      throw WorkerException(std::move(details));
    }
    try {
      std::string list;
      for (std::size_t i = header.num_kept; i < header.num_indices; ++i) {
        list += (list.empty() ? "" : ", ") + std::to_string(idx[i]);
      }
      if (list.empty()) list = fmt::format("({} of a stream)", header.num_skipped);
      logger().warn("stoker: skipped sample(s) {} of batch {}: {}: {} ({} skipped this epoch)",
                    list, k, header.skipped.type_name, header.skipped.message, skipped_this_epoch);
    } catch (...) {
    }
  }

  WorkerException::Details exception_details(std::size_t s, const ErrorReport& report,
                                             std::uint64_t k) const {
    WorkerException::Details details;
    details.type_name = report.type_name;
    details.message = report.message;
    details.where = report.where;
    details.batch = k;
    if (report.sample != kNoSample) details.sample_index = report.sample;
    if (num_workers == 0) {
      details.pid = ::getpid();
    } else {
      const ChannelState& channel = channels[ring().channel_of(s)];
      details.worker_id = channel.position;
      details.pid = channel.process.pid();
    }
    return details;
  }

  [[noreturn]] void throw_batch_error(std::size_t s, const ErrorReport& report, std::uint64_t k) {
    WorkerException::Details details = exception_details(s, report, k);
    const std::exception_ptr original = std::exchange(inline_error, nullptr);
    if (num_workers == 0 && original) {
      try {
        std::rethrow_exception(original);
      } catch (...) {
        std::throw_with_nested(WorkerException(std::move(details)));
      }
    }
    throw WorkerException(std::move(details));
  }

  // ---- faults ----

  // Reaps workers that have exited; a retired worker's exit is expected, any other is a crash
  // (respawned or raised). `force` checks now; otherwise at most every kLivenessInterval (a
  // pidfd in the sleep's poll set catches deaths while waiting).
  void check_workers(bool force) {
    const Clock::time_point now = Clock::now();
    if (!force && now - last_liveness_check < kLivenessInterval) return;
    last_liveness_check = now;
    const std::optional<OomCount> oom_now = read_oom_kill_count();
    bool changed = false;
    for (std::size_t c = 0; c < channels.size(); ++c) {
      ChannelState& channel = channels[c];
      if (!channel.running() || !channel.process.try_reap()) continue;
      changed = true;
      check_exit(channel);
    }
    if (changed) rebuild_wait_fds();
    // Nobody died: move the baseline up to a count seen at least kOomBaselineLag ago, so an
    // unrelated OOM kill long before is not blamed for a later SIGKILL.
    if (now - oom_candidate_time >= kOomBaselineLag) {
      if (oom_candidate_time != Clock::time_point{}) oom_at_spawn = oom_candidate;
      oom_candidate = oom_now;
      oom_candidate_time = now;
    }
  }

  // A reaped worker: a retired one that finished is expected; anything else died.
  void check_exit(ChannelState& channel) {
    // What it published before exiting is in its result queue (waitpid orders it): count it
    // before judging the exit, so only batches it never finished count as lost.
    collect();
    const int status = channel.process.status();
    const bool clean_exit = channel.process.status_known() && WIFEXITED(status) &&
                            WEXITSTATUS(status) == 0 && channel.outstanding == 0;
    if (channel.retiring && clean_exit) {
      channel.retiring = false;
      return;
    }
    worker_died(static_cast<std::size_t>(&channel - channels.data()));
  }

  WorkerCrashed::Details crash_details(std::size_t c) const {
    const ChannelState& state = channels[c];
    const WorkerProcess& process = state.process;
    const Channel& channel = ring().channel(c);
    const std::uint64_t batch = channel.current_batch.load(std::memory_order_relaxed);
    const std::uint64_t sample = channel.current_sample.load(std::memory_order_relaxed);
    WorkerCrashed::Details details;
    details.worker_id = state.position;
    details.pid = process.pid();
    if (!process.status_known()) {
      details.exit_code = -1;
      details.cause =
          "its exit status is unknown because this process ignores SIGCHLD (the kernel reaped "
          "the worker); restore SIGCHLD's default disposition to see why it died";
    } else if (WIFSIGNALED(process.status())) {
      details.signal = WTERMSIG(process.status());
      if (details.signal == SIGKILL) {
        details.cause = sigkill_cause(oom_at_spawn, read_oom_kill_count(), memory_estimate());
      } else if (details.signal == SIGBUS) {
        details.cause = sigbus_cause(ring_committed_bytes(), mem_available_bytes());
      }
    } else {
      details.exit_code = WEXITSTATUS(process.status());
    }
    if (batch != 0) details.batch = batch - 1;
    if (sample != kNoSample) details.sample_index = sample;
    return details;
  }

  // Channel c's worker died. Respawns it when the options allow, else raises.
  void worker_died(std::size_t c) {
    const ChannelState& state = channels[c];
    const Channel& channel = ring().channel(c);
    if (channel.fatal_valid.load(std::memory_order_acquire) != 0) {
      WorkerException::Details details;
      details.worker_id = state.position;
      details.pid = state.process.pid();
      details.type_name = channel.fatal.type_name;
      details.message = channel.fatal.message;
      details.where = channel.fatal.where;
      fail_epoch();
      throw WorkerException(std::move(details));
    }
    WorkerCrashed::Details details = crash_details(c);
    if (options.on_worker_crash == OnWorkerCrash::kRespawn && current &&
        respawns_this_epoch < options.max_respawns) {
      ++respawns_this_epoch;
      try {
        logger().warn("stoker: {}. Respawning worker {} ({} of at most {} this epoch)",
                      describe_crash(details), state.position, respawns_this_epoch,
                      options.max_respawns);
      } catch (...) {
      }
      respawn(c);
      return;
    }
    if (options.on_worker_crash == OnWorkerCrash::kRespawn) {
      if (details.cause.empty()) details.cause = likely_cause(details.signal, details.exit_code);
      details.cause +=
          fmt::format(" (this is death {} this epoch: LoaderOptions::max_respawns is {})",
                      respawns_this_epoch + 1, options.max_respawns);
    }
    fail_epoch();
    throw WorkerCrashed(std::move(details));
  }

  // Forks a replacement on channel c and gives it back the batches the dead worker had not
  // delivered, in their order; results it had published stay valid.
  void respawn(std::size_t c) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> lost;  // (plan, batch)
    const std::size_t first = c * per_channel();
    for (std::size_t s = first; s < first + per_channel(); ++s) {
      if (slots[s].phase != Phase::kIssued) continue;
      lost.emplace_back(slots[s].plan, slots[s].batch);
      slots[s].phase = Phase::kFree;
    }
    std::sort(lost.begin(), lost.end());
    const bool was_retiring = channels[c].retiring;
    try {
      spawn_on(c, channels[c].position);
    } catch (...) {
      fail_epoch();  // the lost batches cannot be reloaded: end the epoch, clearly
      throw;
    }
    for (const auto& [plan_id, k] : lost) {
      if (Plan* plan = live_plan(plan_id)) send_task(c, *free_slot(c), *plan, k);
    }
    if (was_retiring) {
      channels[c].retiring = true;
      request_stop(c, false);
    }
  }

  // The rule of thumb from what the ring has seen: (workers + 1) x the largest batch a slot
  // has held, beside what the ring itself holds. Empty before any batch was written.
  std::string memory_estimate() const {
    std::size_t largest = 0;
    for (std::size_t s = 0; s < slots.size(); ++s) {
      largest = std::max<std::size_t>(largest,
                                      ring().header(s).committed.load(std::memory_order_relaxed));
    }
    if (largest <= kSlotHeaderBytes) return {};
    return fmt::format("for this loader ({} + 1) x {} per batch = {}; its batch ring holds {}",
                       num_workers, format_bytes(largest),
                       format_bytes((num_workers + 1) * largest),
                       format_bytes(ring_committed_bytes()));
  }

  std::size_t ring_committed_bytes() const noexcept {
    std::size_t total = 0;
    for (std::size_t s = 0; s < slots.size(); ++s) {
      total += ring().header(s).committed.load(std::memory_order_relaxed);
    }
    return total;
  }

  [[noreturn]] void timed_out(Clock::duration waited) {
    LoaderTimeout::Details details;
    details.timeout = options.timeout;
    details.waited = std::chrono::duration_cast<milliseconds>(waited);
    details.batch = current->next_in_order;
    // The worker that owes the batch: the one holding the oldest batch still being loaded.
    std::optional<std::size_t> owing;
    for (std::size_t s = 0; s < slots.size(); ++s) {
      if (slots[s].phase == Phase::kIssued && slots[s].plan == current->id &&
          (!owing || slots[s].batch < slots[*owing].batch)) {
        owing = s;
      }
    }
    if (owing) {
      const std::size_t c = ring().channel_of(*owing);
      const Channel& channel = ring().channel(c);
      details.worker_id = channels[c].position;
      details.pid = channels[c].process.pid();
      details.batch = slots[*owing].batch;
      const std::uint64_t sample = channel.current_sample.load(std::memory_order_relaxed);
      if (sample != kNoSample) details.sample_index = sample;
    }
    // A worker that overran the timeout is not given the usual grace: SIGTERM after 50 ms.
    fail_epoch(milliseconds{50});
    throw LoaderTimeout(std::move(details));
  }

  // True when no batch can arrive until the program releases a Batch it holds: every slot
  // that could carry the next batch is held by the consumer.
  bool blocked_by_held_batches() const noexcept {
    auto all_held = [&](std::size_t c) {
      const std::size_t first = c * per_channel();
      for (std::size_t s = first; s < first + per_channel(); ++s) {
        if (slots[s].phase != Phase::kHeld) return false;
      }
      return true;
    };
    if (num_workers == 0) return all_held(0);
    if (options.in_order) {
      if (current->issued > current->next_in_order) return false;  // it is being loaded
      return all_held(position_channel[current->next_in_order % num_workers]);
    }
    for (const std::size_t c : position_channel) {
      if (!all_held(c)) return false;
    }
    return true;
  }

  std::string held_message() const {
    std::size_t held = 0;
    for (const SlotState& slot : slots) held += slot.phase == Phase::kHeld ? 1U : 0U;
    const std::string layout = num_workers == 0
                                   ? fmt::format("{} slots: prefetch_factor={}, loading in-process",
                                                 slots.size(), options.prefetch_factor)
                                   : fmt::format("{} slots per worker: prefetch_factor={}",
                                                 options.prefetch_factor, options.prefetch_factor);
    return fmt::format(
        "DataLoader: the next batch needs a slot, but the program still holds {} batches and "
        "every slot that could carry the next one is among them ({}). A Batch is a view into "
        "shared memory whose slot is reused only when the Batch is destroyed: keep "
        "batch.clone() instead of the Batch, or raise prefetch_factor",
        held, layout);
  }

  // ---- waiting ----

  // True when the caller should go round its loop again: a result came back (ready or stale,
  // either way a slot changed state) or the consumer released a slot.
  bool progress_possible() noexcept {
    const bool collected = collect();
    const bool reclaimed = reclaim();
    return collected || reclaimed;
  }

  // Sleeps until a worker publishes a result, a slot is released or a worker exits, or the
  // timeout passes (LoaderTimeout).
  void wait(Clock::time_point wait_start, bool held_blocked, Clock::time_point& warned_at) {
    if (spin_until([&] { return progress_possible(); }, kMainSpin)) return;
    Doorbell& bell = ring().control().main_doorbell;
    bell.sleeping.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // E: see Doorbell
    if (progress_possible()) {
      bell.sleeping.store(0, std::memory_order_relaxed);
      return;
    }
    const Clock::time_point now = Clock::now();
    milliseconds limit{-1};
    if (options.timeout.count() > 0) {
      const auto left = std::chrono::ceil<milliseconds>(wait_start + options.timeout - now);
      if (left.count() <= 0) {
        bell.sleeping.store(0, std::memory_order_relaxed);
        if (held_blocked) {
          throw Error(
              fmt::format("{} (waited {} ms, LoaderOptions::timeout)", held_message(),
                          std::chrono::duration_cast<milliseconds>(now - wait_start).count()));
        }
        timed_out(now - wait_start);
      }
      limit = left;
    }
    if (held_blocked) {
      const auto until_warning =
          std::chrono::ceil<milliseconds>(warned_at + kHeldWarningInterval - now);
      if (until_warning.count() <= 0) {
        logger().warn("{} (still waiting for another thread to release one)", held_message());
        warned_at = now;
      } else if (limit.count() < 0 || until_warning < limit) {
        limit = until_warning;
      }
    }
    const bool pidfds = wait_fds.size() == running_workers() + 1;
    if (!pidfds && (limit.count() < 0 || limit > milliseconds(5))) {
      limit = milliseconds(5);  // no pidfds (Linux < 5.3): look for dead workers by polling
    }
    const int ready =
        posix::poll_fds(wait_fds.data(), wait_fds.size(), static_cast<int>(limit.count()));
    bell.sleeping.store(0, std::memory_order_relaxed);
    posix::eventfd_drain(shared->main_eventfd.get());
    bool exited = !pidfds;
    for (std::size_t i = 1; ready > 0 && i < wait_fds.size(); ++i) {
      exited = exited || wait_fds[i].revents != 0;
    }
    check_workers(exited);
  }

  // One fetch, timed for stats.wait_seconds (two clock reads per batch).
  std::optional<Batch> next_batch() {
    const Clock::time_point start = Clock::now();
    struct Timer {
      Impl& impl;
      Clock::time_point start;
      ~Timer() {
        impl.stats.wait_seconds += std::chrono::duration<double>(Clock::now() - start).count();
      }
    } timer{*this, start};
    std::optional<Batch> batch = fetch_batch(start);
    if (batch) {
      ++stats.batches;
      stats.samples += batch->size();
      stats.bytes += batch->nbytes();
      if (collector.enabled() || options.log_interval.count() > 0) {
        after_delivery(start, batch->index(), batch->size(), batch->nbytes());
      }
    } else if (epoch_end == Clock::time_point{}) {
      epoch_end = Clock::now();
    }
    return batch;
  }

  // Stats beyond the counters, and the health line when it is due.
  void after_delivery(Clock::time_point start, std::uint64_t index, std::size_t samples,
                      std::size_t bytes) {
    const Clock::time_point end = Clock::now();
    auto ns = [](Clock::time_point t) {
      return static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
    };
    collector.on_delivered(ns(start), ns(end), index, samples, bytes);
    if (options.log_interval.count() > 0 && end - last_health_log >= options.log_interval &&
        logger().should_log(spdlog::level::info)) {
      last_health_log = end;
      log_health();
    }
  }

  void log_health() const {
    const LoaderStats s = public_stats();
    double busy = 0;
    for (const WorkerStats& w : s.workers) busy += w.busy_fraction;
    logger().info(
        "stoker: epoch {} batch {}: {:.0f} samples/s ({:.0f} recent), {}/s; consumer waited "
        "{:.0f}%; {} workers {:.0f}% busy; ring {:.0f}% ready; memory {} (tree PSS)",
        s.epoch, s.batches, s.samples_per_second(), s.recent_samples_per_second,
        format_bytes(static_cast<std::size_t>(s.bytes_per_second())), 100 * s.wait_fraction(),
        s.workers.size(),
        s.workers.empty() ? 0.0 : 100 * busy / static_cast<double>(s.workers.size()),
        100 * s.ring_occupancy, format_bytes(s.tree_pss_bytes()));
  }

  LoaderStats public_stats() const {
    LoaderStats out = stats;
    const auto end = epoch_end != Clock::time_point{} ? epoch_end : Clock::now();
    out.epoch_seconds = epoch_start == Clock::time_point{}
                            ? 0
                            : std::chrono::duration<double>(end - epoch_start).count();
    out.skipped_samples = skipped_this_epoch;
    out.respawns = respawns_this_epoch;
    std::vector<pid_t> pids(num_workers, 0);
    for (std::size_t p = 0; p < num_workers && p < position_channel.size(); ++p) {
      const ChannelState& channel = channels[position_channel[p]];
      if (channel.running()) pids[p] = channel.process.pid();
    }
    collector.fill(out, pids, shared ? ring().num_slots() : 0);
    if (shared) out.ring_bytes = ring_committed_bytes();
    return out;
  }

  // Ring occupancy: the batches of this epoch waiting in the ring when the consumer asks.
  void record_request() noexcept {
    std::size_t ready = 0;
    for (const SlotState& slot : slots) {
      ready += slot.phase == Phase::kReady && slot.plan == current->id ? 1U : 0U;
    }
    collector.on_request(ready, now_ns());
  }

  std::optional<Batch> fetch_batch(Clock::time_point start) {
    if (!current->has_batches()) {
      current.reset();
      return std::nullopt;
    }
    Clock::time_point warned_at = start;
    bool first = true;
    for (;;) {
      check_workers(false);  // at most every kLivenessInterval, even while batches flow
      // Collect and reclaim before issuing, so every slot they free is refilled before the
      // loop can sleep; wait() returns as soon as either finds more.
      collect();
      if (first && collector.enabled()) record_request();
      first = false;
      reclaim();
      issue();
      skip_void_batches();
      if (const std::optional<std::size_t> s = deliverable()) {
        std::optional<Batch> batch = deliver(*s);
        if (!batch) continue;  // every sample of it was skipped
        issue();  // refill the slot the consumer just freed, before it starts computing
        return batch;
      }
      if (epoch_done()) {
        current.reset();
        if (!options.persistent_workers) stop_workers();
        return std::nullopt;
      }
      if (num_workers == 0 && load_inline()) continue;
      const bool held_blocked = blocked_by_held_batches();
      if (held_blocked && count_threads() <= 1) throw Error(held_message());
      wait(start, held_blocked, warned_at);
    }
  }
};

LoaderCore::LoaderCore(LoaderOptions options, std::function<std::size_t()> dataset_size,
                       ProduceFn produce, DatasetProbe probe) {
  validate(options);
  impl_ = std::make_unique<Impl>(std::move(options), std::move(dataset_size), std::move(produce),
                                 std::move(probe));
}

LoaderCore::~LoaderCore() = default;

const LoaderOptions& LoaderCore::options() const noexcept { return impl_->options; }

std::size_t LoaderCore::num_batches() const { return impl_->next_num_batches(); }

void LoaderCore::set_epoch(std::uint64_t epoch) noexcept { impl_->next_epoch = epoch; }

std::uint64_t LoaderCore::epoch() const noexcept { return impl_->next_epoch; }

BatchIterator LoaderCore::begin() {
  impl_->begin_epoch();
  return BatchIterator(this, impl_->current->id);
}

LoaderStats LoaderCore::stats() const { return impl_->public_stats(); }

std::string LoaderCore::state() const { return impl_->save_state(); }

MemoryEstimate LoaderCore::memory_estimate() {
  Impl& m = *impl_;
  if (m.options.num_workers == kAuto) m.prepare();
  return m.estimate(m.num_workers, m.options.batch_size, m.sample_bytes().value_or(0));
}

void LoaderCore::load_state(std::string_view state) { impl_->load_state(state); }

std::vector<pid_t> LoaderCore::worker_pids() const {
  std::vector<pid_t> pids;
  for (const std::size_t c : impl_->position_channel) {
    const ChannelState& channel = impl_->channels[c];
    if (channel.running()) pids.push_back(channel.process.pid());
  }
  return pids;
}

std::optional<Batch> LoaderCore::next(std::uint64_t generation) {
  Impl& m = *impl_;
  if (!m.current || m.current->id != generation) return std::nullopt;
  return m.next_batch();
}

void LoaderCore::finish(std::uint64_t generation) noexcept {
  if (impl_->current && impl_->current->id == generation) impl_->abandon_current();
}

}  // namespace stoker::detail

namespace stoker {

BatchIterator::BatchIterator(BatchIterator&& other) noexcept
    : core_(std::exchange(other.core_, nullptr)),
      generation_(other.generation_),
      current_(std::move(other.current_)),
      fetched_(other.fetched_),
      pending_(other.pending_) {}

BatchIterator& BatchIterator::operator=(BatchIterator&& other) noexcept {
  if (this != &other) {
    BatchIterator previous(std::move(*this));  // ends this iterator's epoch when it goes
    core_ = std::exchange(other.core_, nullptr);
    generation_ = other.generation_;
    current_ = std::move(other.current_);
    fetched_ = other.fetched_;
    pending_ = other.pending_;
  }
  return *this;
}

BatchIterator::~BatchIterator() {
  current_.reset();
  if (core_ != nullptr) core_->finish(generation_);
}

void BatchIterator::fetch() const {
  pending_ = false;
  current_.reset();  // its slot can be reused for the batch being fetched
  fetched_ = false;  // if next() throws, the following fetch moves on to the next batch
  current_ = core_->next(generation_);
  fetched_ = true;
}

bool BatchIterator::at_end() const {
  if (core_ == nullptr) return true;
  if (!fetched_) fetch();
  return !current_.has_value();
}

const Batch& BatchIterator::operator*() const {
  if (at_end()) throw std::logic_error("BatchIterator: dereferenced at the end of the epoch");
  return *current_;
}

BatchIterator& BatchIterator::operator++() {
  if (core_ == nullptr) return *this;
  if (pending_) fetch();  // batch 0 is the current position: load it, then move past it
  fetch();
  return *this;
}

std::optional<Batch> BatchIterator::next() {
  if (at_end()) return std::nullopt;
  fetched_ = false;
  return std::exchange(current_, std::nullopt);
}

}  // namespace stoker
