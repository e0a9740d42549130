// LoaderCore::Impl: the main process's orchestrator behind DataLoader<D>. It begins epochs,
// issues batches to the workers (or loads them in-process), collects their results, delivers
// them in order as zero-copy Batches, and sleeps until something changes. The parts it directs
// each own one job and one invariant:
//
//   Preflight      (preflight.hpp)       kAuto, the sample-size probe, the memory/pinned checks
//   EpochPlan      (epoch_plan.hpp)      an epoch's batches; INV-ORDER-1
//   LoaderState    (loader_state.hpp)    DataLoader::state() / load_state()
//   SlotTable      (slot_table.hpp)      slot phases; INV-SLOT-1, INV-SLOT-2
//   WorkerPool     (worker_pool.hpp)     worker processes and their channels; INV-QUEUE-2
//   FaultReport    (fault_report.hpp)    crash, timeout and OOM details
//   BatchPinning   (batch_pinning.hpp)   page-locked batches
//   StatsCollector (stats_collector.hpp) stats(), the health line, the trace
//
// What the orchestrator keeps is the policy that joins them, in four files:
//   loader_core.cpp  the epoch (begin, abandon, fail) and the public LoaderCore calls
//   dispatch.cpp     which batch goes to which worker, recycling, in-process loading, results
//   delivery.cpp     the fetch loop, delivery of a ready slot, skipped samples, waiting, stats
//   recovery.cpp     a worker's death (respawn or raise), timeouts, batches held too long
// Main process only; one thread at a time (ThreadRule, kept by LoaderCore::Call at every public
// call), which may be a different thread from one call to the next.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ipc/ring.hpp"
#include "ipc/slot_writer.hpp"
#include "loader/batch_pinning.hpp"
#include "loader/epoch_plan.hpp"
#include "loader/fault_report.hpp"
#include "loader/loader_state.hpp"
#include "loader/prefetch_depth.hpp"
#include "loader/preflight.hpp"
#include "loader/resolved_options.hpp"
#include "loader/ring_lease.hpp"
#include "loader/slot_table.hpp"
#include "loader/stats_collector.hpp"
#include "loader/thread_rule.hpp"
#include "loader/worker_pool.hpp"
#include "stoker/data_loader.hpp"

namespace stoker::detail {

struct LoaderCore::Impl {
  using Clock = std::chrono::steady_clock;
  using milliseconds = std::chrono::milliseconds;
  // The consumer polls for a result this long before it sleeps.
  static constexpr std::chrono::microseconds kMainSpin{10};
  // Dead workers are looked for at least this often even while results keep arriving.
  static constexpr milliseconds kLivenessInterval{50};
  // While the consumer's own batches block progress and another thread might release one.
  static constexpr milliseconds kHeldWarningInterval{10000};

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
  std::optional<EpochPlan> next;      // persistent workers: the following epoch, prefetched
  std::optional<LoaderState> resume;  // what load_state() read, applied by the next epoch
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
  PrefetchDepth depth;  // how many slots of a channel may be in flight
  // Per channel: when its worker ran out of tasks (the end of its last batch; 0 while it has
  // one), and how long it has waited for one this epoch (its slots were all in flight).
  std::vector<std::uint64_t> idle_since_ns;
  std::vector<std::uint64_t> blocked_ns;
  // The first-sample gate (first_batch.cpp): per channel, non-zero while its worker has a task
  // with report_memory whose report main has not taken yet; and the figures taken so far
  // (`fresh` until the memory check has seen them).
  std::vector<std::uint8_t> gated;
  // Per channel, non-zero from the task with report_memory until the worker's own-memory
  // report after it (Channel::private_reported) has been taken.
  std::vector<std::uint8_t> private_pending;
  // How long a worker takes to load a whole batch when nothing else holds it up, for
  // after_first_fork(): the fastest whole batch of the last epoch that collected one (0
  // before), and of this epoch so far. The fastest, not the mean: a fresh iterator's batch 0
  // runs while the other workers are still starting, not beside them, as the epoch's others do.
  std::uint64_t batch_ns_low = 0;
  std::uint64_t epoch_batch_ns_low = 0;
  // While WorkerPool::deferred: when to fork the other workers even if batch 0 has not come.
  std::uint64_t defer_forks_until_ns = 0;
  // issue_first_claimable(): when worker 0's gate opened (0: it did not), and its fork's time.
  std::uint64_t first_gate_opened_ns = 0;
  std::uint64_t first_fork_ns = 0;
  // first_batch_wait_ns(): when it first saw worker 0 past its first row (row 1 begun), and
  // how many rows it had begun then (0: not yet); batch 0's rate is taken from there on.
  std::uint64_t first_rate_from_ns = 0;
  std::uint64_t first_rate_from_rows = 0;
  struct FirstSamples {
    std::optional<std::size_t> bytes;  // the largest first sample
    std::optional<std::size_t> base;   // the largest worker memory after it
    bool fresh = false;
  } first_samples;
  Clock::time_point last_health_log{};
  Clock::time_point last_on_wait{};  // LoaderOptions::on_wait's last call
  ThreadRule rule;  // one thread at a time inside the public calls (LoaderCore::Call)

  Impl(LoaderOptions o, std::function<std::size_t()> size, ProduceFn p, DatasetProbe dp);

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
  std::size_t next_num_batches();

  void ensure_ring();

  // ---- the epoch ----

  // The epoch starts only when everything it needs exists: a failure (fork, memory) leaves
  // next_epoch where it was, so the next begin() runs the same epoch.
  void begin_epoch();

  // Ends the running epoch early (its iterator went away, or a new epoch starts). Without
  // persistent workers the workers are stopped; with them, their in-flight batches come back
  // stale and their slots are freed then.
  void abandon_current() noexcept;

  // After an error that leaves the workers' state unknown: stop them all.
  void fail_epoch(milliseconds grace = kStopGrace) noexcept;

  EpochPlan* live_plan(std::uint64_t plan) noexcept {
    if (current && current->id == plan) return &*current;
    if (next && next->id == plan) return &*next;
    return nullptr;
  }

  void drop_stale_ready() noexcept;

  // ---- issuing ----

  // Main process owns the slot (kFree): write what the loading process needs to know.
  void write_task(std::size_t s, const EpochPlan& plan, std::size_t k,
                  std::uint32_t part = kWholeBatch);

  // Issues batch k of `plan` into slot s of channel c (a kFree slot of a running worker).
  void send_task(std::size_t c, std::size_t s, const EpochPlan& plan, std::size_t k,
                 std::uint32_t part = kWholeBatch);
  // A free slot of channel c that the prefetch depth lets it use.
  std::optional<std::size_t> slot_for(std::size_t c) const noexcept;
  // A fresh iterator's batch 0, split across the workers when it can be: true when issued so.
  bool issue_split_first(EpochPlan& plan);
  // Whether batch 0 of `plan` can be split across the workers (the current plan, in order,
  // the default collate, ...).
  bool can_split_first(const EpochPlan& plan);
  // Called once worker 0 is forked (in `fork_ns`) and before the others are (the result:
  // whether to fork them now). Batch 0 goes to worker 0 at once and the other forks wait
  // (start_deferred_workers): whole, when batch_ns_low says a batch loads in less than two
  // forks; in a new loader, row by row (issue_first_claimable). So the batch waits neither
  // for the last fork, as its split parts would, nor for main to come back from forking the
  // others.
  bool after_first_fork(std::uint64_t fork_ns);
  // Forks quicker than this are not put off (nor is a new loader's batch 0 given to worker 0
  // alone): they delay the first batch by less than they would save the later ones. A process
  // that has imported torch forks in 2-9 ms; a small C++ trainer in a fraction of one.
  static constexpr std::uint64_t kDeferForksMinNs = 1'500'000;
  // The deferred forks (WorkerPool::deferred), once batch 0 is delivered or
  // defer_forks_until_ns has passed. Throws what fork throws, after failing the epoch.
  void start_deferred_workers();
  // Batch plan.issued, whole, to channel c's free slot s.
  void issue_whole(EpochPlan& plan, std::size_t c, std::size_t s);

  // The plan whose batches are issued next: the current epoch's, then (persistent workers)
  // the following epoch's, so a new epoch's first batches are ready when it starts. Only when
  // the order depends on (seed, epoch) alone: a user's sampler is asked at begin(), as its
  // interface promises, since it may change between epochs.
  EpochPlan* plan_to_issue();

  // max_batches_per_worker: once worker p has been given its quota, fork its replacement into
  // the spare channel and let the old worker finish what it has, then exit. Delivery does not
  // pause: the old worker's batches are already queued and the new one starts loading at once.
  // The spare must have no worker and nothing being loaded; batches a retired worker left there
  // (ready or held) stay until delivered and released. When no channel is spare yet, the old
  // worker goes on until one is.
  void maybe_recycle(std::size_t p);

  std::optional<std::size_t> channel_for(const EpochPlan& plan, std::size_t k);

  void issue();

  // num_workers == 0: load the next batch here, into a free slot, with the workers' code.
  bool load_inline();

  // ---- collecting and delivering ----

  // Pops every published result. True when anything came back (a ready batch, or a stale one
  // whose slot is now free for issue()). Results of workers that have since exited count.
  bool collect() noexcept;

  // Whether the epoch has delivered everything it will.
  bool epoch_done() const noexcept;

  // The worker id that loaded slot s (0 in-process).
  std::size_t loader_of(std::size_t s) const noexcept {
    return num_workers() == 0 ? 0 : pool.channel(ring().channel_of(s)).position;
  }
  const ChannelState* channel_state_of(std::size_t s) const noexcept {
    return num_workers() == 0 ? nullptr : &pool.channel(ring().channel_of(s));
  }

  // The batch in slot s, or nullopt when every sample of it was skipped. Throws the batch's
  // error, or WorkerException once too many samples were skipped.
  std::optional<Batch> deliver(std::size_t s);

  // Counts a batch's skipped samples; past max_skipped_samples, raises the last one's error.
  void note_skipped(std::size_t s, std::uint64_t k);

  [[noreturn]] void throw_batch_error(std::size_t s, const ErrorReport& report, std::uint64_t k);

  // ---- faults ----

  // Reaps workers that have exited; a retired worker's exit is expected, any other is a crash
  // (respawned or raised). `force` checks now; otherwise at most every kLivenessInterval (a
  // pidfd in the sleep's poll set catches deaths while waiting).
  void check_workers(bool force);

  // A reaped worker: a retired one that finished is expected; anything else died.
  void check_exit(std::size_t c);

  // Channel c's worker died. Respawns it when the options allow, else raises.
  void worker_died(std::size_t c);

  // Forks a replacement on channel c and gives it back the batches the dead worker had not
  // delivered, in their order; results it had published stay valid.
  void respawn(std::size_t c);

  [[noreturn]] void timed_out(Clock::duration waited);

  // True when no batch can arrive until the program releases a Batch it holds: every slot
  // that could carry the next batch is held by the consumer.
  bool blocked_by_held_batches() const noexcept;

  std::string held_text() const;

  // Every slot that could carry the next batch is held: at once in a single-threaded process
  // (`waited` empty), else after LoaderOptions::timeout.
  HeldBatchesTimeout held_timeout(std::optional<Clock::duration> waited) const;

  // ---- waiting ----

  // True when the caller should go round its loop again: a result came back (ready or stale,
  // either way a slot changed state) or the consumer released a slot.
  bool progress_possible() noexcept;

  // Sleeps until a worker publishes a result, a slot is released or a worker exits, or the
  // timeout passes (LoaderTimeout).
  void wait(Clock::time_point wait_start, bool held_blocked, Clock::time_point& warned_at);
  // Sleeps on the main doorbell and the workers' pidfds for at most `limit` (-1: until
  // something happens). True when a worker may have exited (a pidfd fired, or there are no
  // pidfds to watch).
  // `woken` (when given) is set when something woke it, false when the time ran out or a
  // signal interrupted it.
  bool sleep_for_progress(milliseconds limit, bool* woken = nullptr);
  // sleep_for_progress() for a fetch or the first batch: with LoaderOptions::on_wait, at most
  // kOnWaitInterval, then on_wait() when the sleep was not woken or the interval has passed
  // since its last call. An exception from on_wait() ends the epoch (fail_epoch) and
  // propagates. Returns what sleep_for_progress returned.
  bool sleep_and_notify(milliseconds limit);

  // ---- the first batch (first_batch.cpp) ----

  // All parts of a split batch 0 are kReady: their rows joined into the host slot (part 0),
  // which is returned to be delivered as the whole batch; the other parts' slots are freed.
  // A part's error is returned the same way (its slot, to be thrown by deliver()); parts whose
  // fields disagree are a WorkerException of type stoker::CollateError.
  std::size_t join_split_first(const std::vector<std::size_t>& parts);
  // begin(), when the memory check waits for figures: each worker has one task (its part of
  // a split batch 0, or its first batch) and reports its first sample's bytes and its memory
  // after that get(), then waits at its gate. The first report runs the check
  // (MemoryBudgetError / PinnedMemoryError after stopping the workers), so a refusal costs at
  // most one get() per worker; passing, every gate opens and begin() returns without waiting
  // for any batch. First samples that all fail, a worker that dies or LoaderOptions::timeout
  // passing leave the memory unchecked (logged); the fetch then reports what happened.
  void await_first_batch();
  // after_first_fork(): batch 0 to worker 0 alone (slot s of channel c), as part 0 taking its
  // rows one at a time (SlotHeader::claim) so that split_first_rest() can give the rows it has
  // not begun to the others once they are forked. For a new loader whose memory check waits
  // for figures: the task is gated, and this waits up to a fork for its first sample: in time,
  // the check runs (throwing as check_reported_first_samples), the gate opens, and true is
  // returned: fork the others later (defer_forks_until_ns). False: fork them now (no report
  // yet; or batch 0 cannot be split, and nothing was issued).
  bool issue_first_claimable(EpochPlan& plan, std::size_t c, std::size_t s, std::uint64_t fork_ns);
  // Once the other workers are forked: the rows of a claimable part 0 that its worker has not
  // begun, in equal shares (its own first), as parts 1.. to them; nothing when it has (almost)
  // finished, and the batch is then whole.
  void split_first_rest();
  // While the others' forks wait for a claimable batch 0 (issue_first_claimable): how much
  // longer to wait before asking again, when batch 0 looks like finishing within two forks at
  // its rate so far (forking would only delay it); empty: fork them now.
  std::optional<std::uint64_t> first_batch_wait_ns(std::uint64_t now);
  // issue_first_claimable(), once the gate is open: the upper half of a fresh slot s's fields
  // for a batch of about `batch_bytes` backed by main while worker 0 backs the lower half
  // (batches of kBackInMainMin bytes or more).
  void back_upper_half(std::size_t s, std::size_t batch_bytes) noexcept;
  static constexpr std::size_t kBackInMainMin = std::size_t{1} << 20;
  // Takes channel c's first-sample report, if it has made one, into first_samples.
  void take_first_report(std::size_t c) noexcept;
  // A gated channel's worker has reported (a relaxed look: take_first_report reads it).
  bool first_report_waiting() const noexcept;
  // Lets every worker waiting at its first-sample gate go on.
  void open_first_gates() noexcept;
  // The fetch: reports that came after the check passed are checked too (a larger first
  // sample may not fit). Throws what the check throws, after stopping the workers.
  void check_late_first_samples();
  // Checks the first samples reported since the last call against the memory budget and sets
  // the depth limit it chose; false when nothing new was reported. Throws MemoryBudgetError
  // (after failing the epoch) when they do not fit.
  bool check_reported_first_samples();
  // Takes the workers' own-memory reports that have come (each after its first task) into the
  // worker base; with `check`, checks the budget again with it (throws as
  // check_reported_first_samples). False when none came.
  bool take_private_reports(bool check);

  // ---- fetching ----

  // One fetch, timed for stats.wait_seconds (two clock reads per batch).
  std::optional<Batch> next_batch();

  // Stats beyond the counters, and the health line when it is due.
  void after_delivery(Clock::time_point start, std::uint64_t index, std::size_t samples,
                      std::size_t bytes);

  LoaderStats public_stats() const;

  std::optional<Batch> fetch_batch(Clock::time_point start);
};

}  // namespace stoker::detail
