// LoaderCore: the main process's orchestrator. It begins epochs, issues batches to the workers
// (or loads them in-process), collects their results, delivers them in order as zero-copy
// Batches, and sleeps until something changes. The parts it directs each own one job:
//
//   Preflight      (preflight.hpp)      kAuto, the sample-size probe, the memory/pinned checks
//   EpochPlan      (epoch_plan.hpp)     an epoch's batches; INV-ORDER-1
//   LoaderState    (loader_state.hpp)   DataLoader::state() / load_state()
//   SlotTable      (slot_table.hpp)     slot phases; INV-SLOT-1, INV-SLOT-2
//   WorkerPool     (worker_pool.hpp)    worker processes and their channels; INV-QUEUE-2
//   FaultReport    (fault_report.hpp)   crash, timeout and OOM details
//   BatchPinning   (batch_pinning.hpp)  page-locked batches
//   StatsCollector (stats_collector.hpp) stats(), the health line, the trace
//
// What this file keeps is the policy that joins them: which batch goes to which worker, what a
// worker's death means (respawn or raise), recycling under max_batches_per_worker, and when the
// epoch is over. Main process only, single-threaded.

#include "stoker/data_loader.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <stdexcept>

#include <fmt/format.h>

#include "ipc/ring.hpp"
#include "ipc/slot_io.hpp"
#include "ipc/spin.hpp"
#include "ipc/worker.hpp"
#include "data/error_text.hpp"
#include "datasets/launch.hpp"
#include "loader/batch_pinning.hpp"
#include "loader/epoch_plan.hpp"
#include "loader/fault_report.hpp"
#include "loader/loader_state.hpp"
#include "loader/preflight.hpp"
#include "loader/resolved_options.hpp"
#include "loader/ring_lease.hpp"
#include "loader/slot_table.hpp"
#include "loader/stats_collector.hpp"
#include "loader/worker_pool.hpp"
#include "os/assert.hpp"
#include "os/log.hpp"
#include "os/proc.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The consumer polls for a result this long before it sleeps.
constexpr std::chrono::microseconds kMainSpin{10};
// Dead workers are looked for at least this often even while results keep arriving.
constexpr milliseconds kLivenessInterval{50};
// While the consumer's own batches block progress and another thread might release one.
constexpr milliseconds kHeldWarningInterval{10000};

std::string loader_trace_path(const LoaderOptions& o) {
  const LaunchInfo launch = detect_launch_quietly();
  return trace_path_for(o.trace_path,
                        launch.world_size > 1 ? std::optional(launch.rank) : std::nullopt);
}

}  // namespace

struct LoaderCore::Impl {
  const LoaderOptions options;  // as the user gave them; resolved() is what runs
  std::function<std::size_t()> dataset_size;
  ProduceFn produce;
  bool iterable;  // the dataset is a stream (next()), not size() and get(i)
  Preflight preflight;
  std::uint64_t next_epoch = 0;
  std::uint64_t next_plan_id = 1;

  // Created at the first begin() that has batches to load. `shared` is declared before `pool`,
  // so the workers are stopped before the ring they use is unmapped.
  std::shared_ptr<RingHandle> shared;
  std::optional<SlotMemory> memory;  // what this process has pre-faulted of each slot
  SlotTable slots;
  WorkerPool pool;
  std::exception_ptr inline_error;  // num_workers == 0: the failure of the inline batch

  std::optional<EpochPlan> current;
  std::optional<EpochPlan> next;       // persistent workers: the following epoch, prefetched
  std::optional<LoaderState> resume;   // what load_state() read, applied by the next epoch
  Clock::time_point last_liveness_check{};
  OomWatch oom;
  std::size_t respawns_this_epoch = 0;
  std::size_t skipped_this_epoch = 0;
  LoaderStats stats;  // the epoch's counters; skipped/respawns filled on read
  Clock::time_point epoch_start{};
  Clock::time_point epoch_end{};  // set when the epoch's last batch has been delivered
  StatsCollector collector;       // the rest of stats(), the trace
  StagePolicy inline_stages;      // num_workers == 0: which batches to time stage by stage
  BatchPinning pinning;
  Clock::time_point last_health_log{};

  Impl(LoaderOptions o, std::function<std::size_t()> size, ProduceFn p, DatasetProbe dp)
      : options(std::move(o)),
        dataset_size(std::move(size)),
        produce(std::move(p)),
        iterable(!dataset_size),
        preflight(options, iterable, std::move(dp)),
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

  ~Impl() { pool.stop_all(&slots); }

  const ResolvedOptions& resolved() { return preflight.resolve(); }
  // Only once the ring exists (after resolution).
  std::size_t num_workers() const noexcept { return pool.num_workers(); }
  const Ring& ring() const noexcept { return *shared->ring; }

  EpochPlan plan_for(std::uint64_t epoch, std::size_t n) {
    const std::size_t workers = iterable ? resolved().num_workers : 0;
    return make_plan(options, iterable, workers, next_plan_id++, epoch, n);
  }

  // Batches of epoch next_epoch. With a sampler that is only known by asking it: the plan is
  // made then and kept for begin().
  std::size_t next_num_batches() {
    if (iterable) throw std::logic_error("DataLoader: an iterable dataset has no length");
    const std::size_t n = dataset_size();
    if (!options.sampler && !options.batch_sampler) return batches_for(n, options);
    if (next && next->epoch == next_epoch && next->dataset_size == n) return next->num_batches;
    if (next && next->issued > 0) return plan_for(next_epoch, n).num_batches;  // in flight
    next = plan_for(next_epoch, n);
    return next->num_batches;
  }

  void ensure_ring() {
    if (shared) return;
    const ResolvedOptions& r = resolved();
    auto fresh = std::make_shared<RingHandle>();
    fresh->ring = std::make_unique<Ring>(r.geometry);
    const std::size_t n = fresh->ring->num_slots();
    fresh->held = std::make_unique<std::atomic<bool>[]>(n);
    fresh->main_eventfd.reset(posix::make_eventfd());
    if (!fresh->main_eventfd.valid()) {
      throw Error(posix::errno_message("DataLoader: creating an eventfd failed", errno) +
                  "; raise `ulimit -n`");
    }
    WorkerPool::Launch launch;
    launch.produce = &produce;
    launch.worker_init = &options.worker_init;
    launch.seed = options.seed;
    launch.skip_samples = r.skip_samples;
    launch.collect_stats = collector.enabled();
    launch.bind_workers = options.bind_workers;
    pool.attach(*fresh->ring, fresh->main_eventfd.get(), r, launch);
    memory.emplace(*fresh->ring);
    slots = SlotTable(n, fresh->ring->slots_per_channel());
    shared = std::move(fresh);
  }

  // ---- the epoch ----

  // The epoch starts only when everything it needs exists: a failure (fork, memory) leaves
  // next_epoch where it was, so the next begin() runs the same epoch.
  void begin_epoch() {
    abandon_current();
    const std::uint64_t epoch = next_epoch;
    const std::size_t n = iterable ? 0 : dataset_size();
    current = next && next->epoch == epoch && next->dataset_size == n ? std::move(*next)
                                                                      : plan_for(epoch, n);
    next.reset();
    std::size_t resumed_skipped = 0;  // samples the saved epoch had skipped already
    try {
      if (resume) {
        const LoaderState r = *std::exchange(resume, std::nullopt);
        if (r.epoch == current->epoch) {  // else set_epoch() chose another epoch: start afresh
          apply_state(r, *current);
          resumed_skipped = r.skipped;
        }
      }
      if (current->has_batches()) {
        preflight.check();
        ensure_ring();
        drop_stale_ready();  // keeps what was prefetched for this plan, now current
        if (num_workers() > 0) {
          pool.start_all(slots);
          last_liveness_check = Clock::now();
        }
      }
    } catch (...) {
      current.reset();
      throw;
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
    collector.begin_epoch(shared ? num_workers() : 0, epoch, now_ns());
    last_health_log = epoch_start;
    oom.reset();
  }

  // Ends the running epoch early (its iterator went away, or a new epoch starts). Without
  // persistent workers the workers are stopped; with them, their in-flight batches come back
  // stale and their slots are freed then.
  void abandon_current() noexcept {
    if (!current) return;
    current.reset();
    if (!options.persistent_workers) pool.stop_all(&slots);
    drop_stale_ready();
  }

  // After an error that leaves the workers' state unknown: stop them all.
  void fail_epoch(milliseconds grace = kStopGrace) noexcept {
    current.reset();
    next.reset();
    pool.stop_all(&slots, grace);
    drop_stale_ready();
  }

  EpochPlan* live_plan(std::uint64_t plan) noexcept {
    if (current && current->id == plan) return &*current;
    if (next && next->id == plan) return &*next;
    return nullptr;
  }

  void drop_stale_ready() noexcept {
    slots.drop_ready_unless([this](std::uint64_t plan) { return live_plan(plan) != nullptr; });
  }

  // ---- issuing ----

  // Main process owns the slot (kFree): write what the loading process needs to know.
  void write_task(std::size_t s, const EpochPlan& plan, std::size_t k) {
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
    slots.issue(s, plan.id, k);
  }

  // Issues batch k of `plan` into slot s of channel c (a kFree slot of a running worker).
  void send_task(std::size_t c, std::size_t s, const EpochPlan& plan, std::size_t k) {
    write_task(s, plan, k);
    ++pool.channel(c).issued;
    ++pool.channel(c).outstanding;
    pool.push_task(c, s);
  }

  // The plan whose batches are issued next: the current epoch's, then (persistent workers)
  // the following epoch's, so a new epoch's first batches are ready when it starts. Only when
  // the order depends on (seed, epoch) alone: a user's sampler is asked at begin(), as its
  // interface promises, since it may change between epochs.
  EpochPlan* plan_to_issue() {
    if (current && !current->fully_issued()) return &*current;
    if (!options.persistent_workers || options.sampler || options.batch_sampler) return nullptr;
    if (!next) {
      const std::uint64_t epoch = current ? current->epoch + 1 : next_epoch;
      if (epoch != next_epoch) return nullptr;  // set_epoch() chose another epoch
      next = plan_for(epoch, iterable ? 0 : dataset_size());
    }
    return next->fully_issued() ? nullptr : &*next;
  }

  // max_batches_per_worker: once worker p has been given its quota, fork its replacement into
  // the spare channel and let the old worker finish what it has, then exit. Delivery does not
  // pause: the old worker's batches are already queued and the new one starts loading at once.
  // The spare must have no worker and nothing being loaded; batches a retired worker left there
  // (ready or held) stay until delivered and released. When no channel is spare yet, the old
  // worker goes on until one is.
  void maybe_recycle(std::size_t p) {
    if (options.max_batches_per_worker == 0) return;
    const std::size_t old = pool.channel_of_worker(p);
    if (pool.channel(old).issued < options.max_batches_per_worker) return;
    // A retired worker that has finished frees its channel: reap it now rather than at the
    // next liveness check (one waitpid per retiring worker, only when a recycle is due).
    bool reaped = false;
    for (std::size_t c = 0; c < pool.num_channels(); ++c) {
      if (pool.try_reap_retired(c)) {
        check_exit(c);
        reaped = true;
      }
    }
    if (reaped) pool.rebuild_wait_fds();
    collect();  // a retired worker's last results, before its channel is reset
    for (std::size_t c = 0; c < pool.num_channels(); ++c) {
      const ChannelState& channel = pool.channel(c);
      if (pool.serves_a_worker(c) || channel.running() || channel.outstanding != 0 ||
          !slots.free_slot(c)) {
        continue;
      }
      pool.spawn_on(c, p);
      pool.channel(old).retiring = true;
      pool.request_stop(old, false);
      ++stats.workers_recycled;
      return;
    }
  }

  std::optional<std::size_t> channel_for(const EpochPlan& plan, std::size_t k) {
    if (options.in_order) {
      // INV-ORDER-1: batch k belongs to worker k mod num_workers.
      const std::size_t p = k % num_workers();
      maybe_recycle(p);
      const std::size_t c = pool.channel_of_worker(p);
      return slots.free_slot(c) ? std::optional<std::size_t>(c) : std::nullopt;
    }
    // Whichever worker has a free slot and the least work queued, so a slow worker gets less.
    std::optional<std::size_t> best;
    for (std::size_t p = 0; p < num_workers(); ++p) {
      if (plan.iterable && plan.exhausted[p] != 0) continue;
      maybe_recycle(p);
      const std::size_t c = pool.channel_of_worker(p);
      if (slots.free_slot(c) &&
          (!best || pool.channel(c).outstanding < pool.channel(*best).outstanding)) {
        best = c;
      }
    }
    return best;
  }

  void issue() {
    if (num_workers() == 0 || pool.running() == 0) return;
    for (EpochPlan* plan = plan_to_issue(); plan != nullptr; plan = plan_to_issue()) {
      const std::size_t k = plan->issued;
      if (!plan->iterable && plan->done[k] != 0) {
        ++plan->issued;  // delivered before a resume: not loaded again
        continue;
      }
      if (plan->iterable && options.in_order && plan->exhausted[k % num_workers()] != 0) {
        ++plan->issued;  // a void batch: that worker's stream has ended
        continue;
      }
      const std::optional<std::size_t> c = channel_for(*plan, k);
      if (!c) return;
      send_task(*c, *slots.free_slot(*c), *plan, k);
      if (plan->iterable) plan->last_issued[pool.channel(*c).position] = k + 1;
      ++plan->issued;
    }
  }

  // num_workers == 0: load the next batch here, into a free slot, with the workers' code.
  bool load_inline() {
    EpochPlan& plan = *current;
    while (!plan.iterable && !plan.fully_issued() && plan.done[plan.issued] != 0) ++plan.issued;
    if (plan.fully_issued()) return false;
    const std::optional<std::size_t> s = slots.free_slot(0);
    if (!s) return false;
    write_task(*s, plan, plan.issued);
    ++plan.issued;
    inline_error = nullptr;
    load_batch(ring(), *memory, *s, nullptr, produce, resolved().skip_samples,
               collector.enabled() && inline_stages.next(), &inline_error);
    inline_stages.record(ring().header(*s));
    if (collector.enabled() && ring().header(*s).status == SlotStatus::kOk) {
      collector.on_batch_loaded(0, posix::self_pid(), ring().header(*s));
    }
    slots.set_phase(*s, Phase::kIssued, Phase::kReady);
    return true;
  }

  // ---- collecting and delivering ----

  // Pops every published result. True when anything came back (a ready batch, or a stale one
  // whose slot is now free for issue()). Results of workers that have since exited count.
  bool collect() noexcept {
    bool any = false;
    for (std::size_t c = 0; c < pool.num_channels() && num_workers() > 0; ++c) {
      Channel& channel = ring().channel(c);
      Message message;
      while (channel.results.try_pop(message)) {
        const std::size_t s = message.slot;
        // A result names a slot of its own channel that main issued (INV-SLOT-1).
        STOKER_ASSERT(slots.channel_of(s) == c && slots[s].phase == Phase::kIssued,
                      "INV-SLOT-1: a worker returns only the slots it was given");
        if (slots.channel_of(s) != c || slots[s].phase != Phase::kIssued) continue;
        --pool.channel(c).outstanding;
        const bool live = live_plan(slots[s].plan) != nullptr;
        slots.set_phase(s, Phase::kIssued, live ? Phase::kReady : Phase::kFree);
        if (collector.enabled() && live && ring().header(s).status == SlotStatus::kOk) {
          collector.on_batch_loaded(pool.channel(c).position, pool.channel(c).process.pid(),
                                    ring().header(s));
        }
        any = true;
      }
    }
    return any;
  }

  // Whether the epoch has delivered everything it will.
  bool epoch_done() const noexcept {
    const EpochPlan& plan = *current;
    if (!plan.iterable) return plan.delivered == plan.num_batches;
    return plan.all_exhausted() && !slots.pending(plan.id);
  }

  // The worker id that loaded slot s (0 in-process).
  std::size_t loader_of(std::size_t s) const noexcept {
    return num_workers() == 0 ? 0 : pool.channel(ring().channel_of(s)).position;
  }
  const ChannelState* channel_state_of(std::size_t s) const noexcept {
    return num_workers() == 0 ? nullptr : &pool.channel(ring().channel_of(s));
  }

  // The batch in slot s, or nullopt when every sample of it was skipped. Throws the batch's
  // error, or WorkerException once too many samples were skipped.
  std::optional<Batch> deliver(std::size_t s) {
    EpochPlan& plan = *current;
    const SlotHeader& header = ring().header(s);
    STOKER_ASSERT(header.magic == kRingMagic, "a slot header starts with the ring's magic");
    const std::uint64_t k = slots[s].batch;
    plan.mark_delivered(k);
    if (header.status != SlotStatus::kOk) {
      // A worker that cannot go on with its stream (worker_init failed) says so with its error.
      if (plan.iterable && header.exhausted != 0) plan.exhausted[loader_of(s)] = 1;
      slots.set_phase(s, Phase::kReady, Phase::kFree);
      throw_batch_error(s, header.error, k);
    }
    const std::span<const std::size_t> expected = plan.batch(k);
    if (header.magic != kRingMagic || header.num_indices != expected.size() ||
        (!plan.iterable && header.num_kept > header.num_indices) || header.plan != plan.id ||
        header.batch != k) {
      slots.set_phase(s, Phase::kReady, Phase::kFree);
      throw Error(fmt::format(
          "DataLoader: the header of batch slot {} was overwritten (batch {} of epoch {}); "
          "something wrote outside its batch, most likely memory corruption in user code",
          s, k, plan.epoch));
    }
    if (plan.iterable && header.exhausted != 0) plan.exhausted[loader_of(s)] = 1;
    if (header.num_skipped != 0) note_skipped(s, k);
    if (header.num_kept == 0) {
      slots.set_phase(s, Phase::kReady, Phase::kFree);
      return std::nullopt;
    }
    shared->held[s].store(true, std::memory_order_relaxed);
    slots.set_phase(s, Phase::kReady, Phase::kHeld);
    auto lease = std::make_shared<SlotLease>(shared, s);
    const ResolvedOptions& r = resolved();
    const bool pinned =
        r.pinning == Pinning::kRegister && pinning.pin_slot(*shared, s, *r.allocator);
    std::vector<Field> fields = read_fields(ring(), s, lease);
    const std::span<const std::size_t> indices(
        reinterpret_cast<const std::size_t*>(ring().indices(s)),
        plan.iterable ? 0 : header.num_kept);
    Batch batch(std::move(fields), indices, plan.epoch, k, std::move(lease), header.num_kept,
                pinned);
    if (r.pinning == Pinning::kCopy) {
      if (std::optional<Batch> staged = pinning.copy_to_pinned(batch, *r.allocator)) {
        return std::move(*staged);
      }
    }
    return batch;
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
      slots.set_phase(s, Phase::kReady, Phase::kFree);
      WorkerException::Details details = exception_details(header.skipped, k, channel_state_of(s));
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

  [[noreturn]] void throw_batch_error(std::size_t s, const ErrorReport& report, std::uint64_t k) {
    WorkerException::Details details = exception_details(report, k, channel_state_of(s));
    const std::exception_ptr original = std::exchange(inline_error, nullptr);
    if (num_workers() == 0 && original) {
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
    for (const std::size_t c : pool.reap_exited()) check_exit(c);
    oom.tick(now);
  }

  // A reaped worker: a retired one that finished is expected; anything else died.
  void check_exit(std::size_t c) {
    // What it published before exiting is in its result queue (waitpid orders it): count it
    // before judging the exit, so only batches it never finished count as lost.
    collect();
    ChannelState& channel = pool.channel(c);
    const int status = channel.process.status();
    const bool clean_exit = channel.process.status_known() && WIFEXITED(status) &&
                            WEXITSTATUS(status) == 0 && channel.outstanding == 0;
    if (channel.retiring && clean_exit) {
      channel.retiring = false;
      return;
    }
    worker_died(c);
  }

  // Channel c's worker died. Respawns it when the options allow, else raises.
  void worker_died(std::size_t c) {
    const ChannelState& state = pool.channel(c);
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
    WorkerCrashed::Details details = crash_details(state, channel, oom, num_workers(), ring());
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
    const std::vector<std::pair<std::uint64_t, std::uint64_t>> lost = slots.take_issued(c);
    const bool was_retiring = pool.channel(c).retiring;
    try {
      pool.spawn_on(c, pool.channel(c).position);
    } catch (...) {
      fail_epoch();  // the lost batches cannot be reloaded: end the epoch, clearly
      throw;
    }
    for (const auto& [plan_id, k] : lost) {
      if (EpochPlan* plan = live_plan(plan_id)) send_task(c, *slots.free_slot(c), *plan, k);
    }
    if (was_retiring) {
      pool.channel(c).retiring = true;
      pool.request_stop(c, false);
    }
  }

  [[noreturn]] void timed_out(Clock::duration waited) {
    const std::optional<std::size_t> owing = slots.oldest_issued(current->id);
    const std::size_t c = owing ? ring().channel_of(*owing) : 0;
    const LoaderTimeout::Details details = timeout_details(
        options.timeout, waited, current->next_in_order, owing ? &pool.channel(c) : nullptr,
        owing ? &ring().channel(c) : nullptr, owing ? slots[*owing].batch : 0);
    // A worker that overran the timeout is not given the usual grace: SIGTERM after 50 ms.
    fail_epoch(milliseconds{50});
    throw LoaderTimeout(details);
  }

  // True when no batch can arrive until the program releases a Batch it holds: every slot
  // that could carry the next batch is held by the consumer.
  bool blocked_by_held_batches() const noexcept {
    if (num_workers() == 0) return slots.all_held(0);
    if (options.in_order) {
      if (current->issued > current->next_in_order) return false;  // it is being loaded
      return slots.all_held(pool.channel_of_worker(current->next_in_order % num_workers()));
    }
    for (std::size_t p = 0; p < num_workers(); ++p) {
      if (!slots.all_held(pool.channel_of_worker(p))) return false;
    }
    return true;
  }

  std::string held_text() const {
    return held_message(slots.count(Phase::kHeld), slots.size(), num_workers(),
                        options.prefetch_factor);
  }

  // Every slot that could carry the next batch is held: at once in a single-threaded process
  // (`waited` empty), else after LoaderOptions::timeout.
  HeldBatchesTimeout held_timeout(std::optional<Clock::duration> waited) const {
    LoaderTimeout::Details details;
    details.timeout = options.timeout;
    details.batch = current->next_in_order;
    std::string message = held_text();
    if (waited) {
      details.waited = std::chrono::duration_cast<milliseconds>(*waited);
      message += fmt::format(" (waited {} ms, LoaderOptions::timeout)", details.waited.count());
    }
    return HeldBatchesTimeout(details, slots.count(Phase::kHeld), message);
  }

  // ---- waiting ----

  // True when the caller should go round its loop again: a result came back (ready or stale,
  // either way a slot changed state) or the consumer released a slot.
  bool progress_possible() noexcept {
    const bool collected = collect();
    const bool reclaimed = slots.reclaim(shared->held.get());
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
          throw held_timeout(now - wait_start);
        }
        timed_out(now - wait_start);
      }
      limit = left;
    }
    if (held_blocked) {
      const auto until_warning =
          std::chrono::ceil<milliseconds>(warned_at + kHeldWarningInterval - now);
      if (until_warning.count() <= 0) {
        logger().warn("{} (still waiting for another thread to release one)", held_text());
        warned_at = now;
      } else if (limit.count() < 0 || until_warning < limit) {
        limit = until_warning;
      }
    }
    const bool pidfds = pool.watches_deaths();
    if (!pidfds && (limit.count() < 0 || limit > milliseconds(5))) {
      limit = milliseconds(5);  // no pidfds (Linux < 5.3): look for dead workers by polling
    }
    std::vector<pollfd>& fds = pool.wait_fds();
    const int ready = posix::poll_fds(fds.data(), fds.size(), static_cast<int>(limit.count()));
    bell.sleeping.store(0, std::memory_order_relaxed);
    posix::eventfd_drain(shared->main_eventfd.get());
    bool exited = !pidfds;
    for (std::size_t i = 1; ready > 0 && i < fds.size(); ++i) {
      exited = exited || fds[i].revents != 0;
    }
    check_workers(exited);
  }

  // ---- fetching ----

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
      log_health(public_stats());
    }
  }

  LoaderStats public_stats() const {
    LoaderStats out = stats;
    const auto end = epoch_end != Clock::time_point{} ? epoch_end : Clock::now();
    out.epoch_seconds = epoch_start == Clock::time_point{}
                            ? 0
                            : std::chrono::duration<double>(end - epoch_start).count();
    out.skipped_samples = skipped_this_epoch;
    out.respawns = respawns_this_epoch;
    collector.fill(out, shared ? pool.pids_by_worker() : std::vector<pid_t>{},
                   shared ? ring().num_slots() : 0);
    if (shared) out.ring_bytes = ring_committed_bytes(ring());
    return out;
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
      if (first && collector.enabled()) collector.on_request(slots.count_ready(current->id), now_ns());
      first = false;
      slots.reclaim(shared->held.get());
      issue();
      if (options.in_order || num_workers() == 0) current->skip_void_batches();
      if (const std::optional<std::size_t> s =
              slots.deliverable(current->id, resolved().ordered, current->next_in_order)) {
        std::optional<Batch> batch = deliver(*s);
        if (!batch) continue;  // every sample of it was skipped
        issue();  // refill the slot the consumer just freed, before it starts computing
        return batch;
      }
      if (epoch_done()) {
        current.reset();
        if (!options.persistent_workers) pool.stop_all(&slots);
        return std::nullopt;
      }
      if (num_workers() == 0 && load_inline()) continue;
      const bool held_blocked = blocked_by_held_batches();
      if (held_blocked && count_threads() <= 1) throw held_timeout(std::nullopt);
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

std::size_t LoaderCore::num_workers() { return impl_->resolved().num_workers; }

std::size_t LoaderCore::num_batches() const { return impl_->next_num_batches(); }

void LoaderCore::set_epoch(std::uint64_t epoch) noexcept { impl_->next_epoch = epoch; }

std::uint64_t LoaderCore::epoch() const noexcept { return impl_->next_epoch; }

BatchIterator LoaderCore::begin() {
  impl_->begin_epoch();
  return BatchIterator(this, impl_->current->id);
}

LoaderStats LoaderCore::stats() const { return impl_->public_stats(); }

std::string LoaderCore::state() const {
  Impl& m = *impl_;
  if (m.iterable) {
    throw std::logic_error(
        "DataLoader::state: an iterable dataset's position is inside its workers' streams, "
        "which stoker cannot save; save your stream's own position (e.g. in start_epoch) "
        "instead");
  }
  if (m.current) return format_state(capture_state(*m.current, m.options.seed, m.skipped_this_epoch));
  LoaderState s;
  s.epoch = m.next_epoch;
  s.seed = m.options.seed;
  s.dataset_size = m.dataset_size();
  s.num_batches = m.next_num_batches();
  return format_state(s);
}

void LoaderCore::load_state(std::string_view text) {
  Impl& m = *impl_;
  if (m.iterable) {
    throw std::logic_error(
        "DataLoader::load_state: an iterable dataset's loader has no state to load (its "
        "position is inside its workers' streams); restore your stream's own position "
        "instead");
  }
  LoaderState r = parse_state(text);
  if (r.seed != m.options.seed) {
    throw std::invalid_argument(fmt::format(
        "DataLoader::load_state: the state was saved by a loader with seed {}, this one has "
        "seed {}: the order would differ; build the loader with LoaderOptions::seed = {}",
        r.seed, m.options.seed, r.seed));
  }
  m.abandon_current();
  m.next.reset();
  m.next_epoch = r.epoch;
  m.resume = std::move(r);
}

MemoryEstimate LoaderCore::memory_estimate() { return impl_->preflight.estimate(); }

std::vector<pid_t> LoaderCore::worker_pids() const {
  std::vector<pid_t> pids;
  if (!impl_->shared) return pids;
  for (const pid_t pid : impl_->pool.pids_by_worker()) {
    if (pid > 0) pids.push_back(pid);
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
