// LoaderCore::Impl, dispatch: which batch goes to which worker (INV-ORDER-1 with in_order;
// the least loaded otherwise), the task written into a free slot, recycling workers under
// max_batches_per_worker, loading in-process when num_workers == 0, and collecting results.
//
// A fresh iterator's batch 0 is split across the workers (issue_split_first): worker j loads
// part j, in order, so the first batch comes after about one batch's work / num_workers instead
// of a whole batch's. Part 0's slot (the host) has fields sized for the whole batch; delivery
// copies the other parts' rows into it (delivery.cpp). From batch 1 on, INV-ORDER-1 as always.

#include "loader/loader_impl.hpp"

#include <sys/wait.h>
#include <algorithm>
#include <cstring>

#include "ipc/worker_process.hpp"
#include "os/assert.hpp"
#include "os/posix.hpp"

namespace stoker::detail {

void LoaderCore::Impl::write_task(std::size_t s, const EpochPlan& plan, std::size_t k,
                                  std::uint32_t part) {
  // A part j > 0 of a split batch 0 carries its own samples; the host (part 0) carries all of
  // them and loads its first ones (SlotHeader::num_to_load).
  std::span<const std::size_t> indices = plan.batch(k);
  std::size_t to_load = 0;
  if (part != kWholeBatch) {
    const std::size_t begin = plan.part_begin(part);
    const std::size_t end = plan.part_begin(part + 1);
    if (part == 0) {
      to_load = end;
    } else {
      indices = indices.subspan(begin, end - begin);
    }
  }
  memory->ensure(s, Ring::payload_start(indices.size()));
  SlotHeader& header = ring().header(s);
  header.plan = plan.id;
  header.batch = k;
  header.epoch = plan.epoch;
  header.seed = options.seed;
  header.num_indices = indices.size();
  header.num_to_load = to_load;
  header.report_memory = 0;  // send_task sets it for a worker's first-sample gate
  // Part 0 while main may still give the rows it has not begun to others (first_batch.cpp).
  const bool claimable = part == 0 && plan.first_claimable;
  header.claimable = claimable ? 1 : 0;
  header.claim.store(claimable ? std::uint64_t{indices.size()} << 32 : 0,
                     std::memory_order_relaxed);
  header.status = SlotStatus::kEmpty;
  if (!indices.empty()) std::memcpy(ring().indices(s), indices.data(), indices.size_bytes());
  slots.issue(s, plan.id, k, part);
}

void LoaderCore::Impl::send_task(std::size_t c, std::size_t s, const EpochPlan& plan, std::size_t k,
                                 std::uint32_t part) {
  write_task(s, plan, k, part);
  if (preflight.awaiting_first_batch()) {
    // The first-sample gate (first_batch.cpp): the worker reports its first sample and waits.
    // Its channel has no other task in flight (slot_for), so nobody reads these words now.
    Channel& channel = ring().channel(c);
    channel.first_reported.store(0, std::memory_order_relaxed);
    channel.first_gate.store(0, std::memory_order_relaxed);  // published by the task push (B)
    channel.private_reported.store(0, std::memory_order_relaxed);
    ring().header(s).report_memory = 1;
    gated[c] = 1;
    private_pending[c] = 1;
  }
  if (idle_since_ns[c] != 0) {  // the worker had nothing to load since then: its slots were full
    const std::uint64_t now = now_ns();
    blocked_ns[c] += now > idle_since_ns[c] ? now - idle_since_ns[c] : 0;
    idle_since_ns[c] = 0;
  }
  ++pool.channel(c).issued;
  ++pool.channel(c).outstanding;
  pool.push_task(c, s);
}

EpochPlan* LoaderCore::Impl::plan_to_issue() {
  if (current && !current->fully_issued()) return &*current;
  if (!options.persistent_workers || options.sampler || options.batch_sampler) return nullptr;
  if (!next) {
    const std::uint64_t epoch = current ? current->epoch + 1 : next_epoch;
    if (epoch != next_epoch) return nullptr;  // set_epoch() chose another epoch
    next = plan_for(epoch, iterable ? 0 : dataset_size());
  }
  return next->fully_issued() ? nullptr : &*next;
}

void LoaderCore::Impl::maybe_recycle(std::size_t p) {
  if (options.max_batches_per_worker == 0) return;
  const std::size_t old = pool.channel_of_worker(p);
  // Not running: not yet forked (WorkerPool::deferred); nothing to retire.
  if (!pool.channel(old).running() || pool.channel(old).issued < options.max_batches_per_worker) {
    return;
  }
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

std::optional<std::size_t> LoaderCore::Impl::channel_for(const EpochPlan& plan, std::size_t k) {
  if (options.in_order) {
    // INV-ORDER-1: batch k belongs to worker k mod num_workers.
    const std::size_t p = k % num_workers();
    maybe_recycle(p);
    const std::size_t c = pool.channel_of_worker(p);
    // Not running: not yet forked (WorkerPool::deferred) or being respawned.
    return pool.channel(c).running() && slot_for(c) ? std::optional<std::size_t>(c) : std::nullopt;
  }
  // Whichever worker has a free slot and the least work queued, so a slow worker gets less.
  std::optional<std::size_t> best;
  for (std::size_t p = 0; p < num_workers(); ++p) {
    if (plan.iterable && plan.exhausted[p] != 0) continue;
    maybe_recycle(p);
    const std::size_t c = pool.channel_of_worker(p);
    if (!pool.channel(c).running()) continue;
    if (slot_for(c) && (!best || pool.channel(c).outstanding < pool.channel(*best).outstanding)) {
      best = c;
    }
  }
  return best;
}

std::optional<std::size_t> LoaderCore::Impl::slot_for(std::size_t c) const noexcept {
  // INV-SLOT-2 with the prefetch depth: at most depth() slots of a channel in flight; one
  // while the memory check waits for the workers' first samples (first_batch.cpp).
  const std::size_t limit = preflight.awaiting_first_batch() ? 1 : depth.depth();
  if (slots.in_use(c) >= limit) return std::nullopt;
  return slots.free_slot(c);
}

bool LoaderCore::Impl::can_split_first(const EpochPlan& plan) {
  // Only for the current plan of a fresh iterator (a prefetched next epoch's batch 0 is ready
  // long before it is asked for), and with the default stacking collate, whose rows can be
  // joined (a user collate may combine samples).
  return &plan == &*current && !plan.iterable &&
         std::min(num_workers(), plan.batch(0).size()) >= 2 && options.in_order &&
         !options.collate && !resolved().skip_samples && plan.done[0] == 0;
}

bool LoaderCore::Impl::issue_split_first(EpochPlan& plan) {
  // With every worker taking part.
  if (!can_split_first(plan)) return false;
  const std::size_t parts = std::min(num_workers(), plan.batch(0).size());
  for (std::size_t p = 0; p < parts; ++p) {
    const std::size_t c = pool.channel_of_worker(p);
    if (!pool.channel(c).running() || pool.channel(c).retiring || !slot_for(c)) {
      return false;
    }
  }
  plan.first_parts = parts;
  for (std::size_t p = 0; p < parts; ++p) {
    const std::size_t c = pool.channel_of_worker(p);
    send_task(c, *slot_for(c), plan, 0, static_cast<std::uint32_t>(p));
  }
  return true;
}

bool LoaderCore::Impl::after_first_fork(std::uint64_t fork_ns) {
  // Split, batch 0 is ready a fork, a start-up and half a batch after the last worker's fork.
  // Whole, it is ready a start-up and a batch after the first one's, and the other forks wait
  // (main would be inside fork() when the batch came), which is sooner when a batch loads in
  // less than a fork or two: a fork of a large process (an interpreter with torch: 2-9 ms)
  // can outlast a batch of small samples. The last epoch's fastest batch tells (and the
  // others are forked after two forks' time, or once batch 0 is out). A new loader's first
  // epoch has no batch timed: batch 0 goes to worker 0 row by row and, when at its rate it
  // would take more than two forks, the others are forked and take the rows it has not begun
  // (first_batch.cpp).
  if (!current || num_workers() < 2) return true;
  EpochPlan& plan = *current;
  if (plan.issued != 0 || plan.fully_issued() || (!plan.iterable && plan.done[0] != 0)) {
    return true;
  }
  const bool defer = fork_ns >= kDeferForksMinNs;
  const std::size_t c = pool.channel_of_worker(0);
  if (!pool.channel(c).running()) return true;
  const std::optional<std::size_t> s = slot_for(c);
  if (!s) return true;
  if (preflight.awaiting_first_batch()) {
    return !defer || !issue_first_claimable(plan, c, *s, fork_ns);
  }
  if (batch_ns_low == 0 || batch_ns_low >= 2 * fork_ns) return true;
  issue_whole(plan, c, *s);
  if (!defer) return true;
  defer_forks_until_ns = now_ns() + 2 * fork_ns;
  return false;
}

void LoaderCore::Impl::start_deferred_workers() {
  // Once batch 0 is out, or when it takes longer than two forks (then the others are needed
  // for the next batches); while the batch loads, the main process waits for it instead.
  if (!pool.deferred()) return;
  if (current && current->delivered == 0) {
    const std::uint64_t now = now_ns();
    if (now < defer_forks_until_ns) return;
    if (const std::optional<std::uint64_t> wait = first_batch_wait_ns(now)) {
      defer_forks_until_ns = now + *wait;  // nearly done: a fork now would only delay it
      return;
    }
  }
  try {
    pool.start_deferred(slots);
  } catch (...) {
    fail_epoch();
    throw;
  }
  split_first_rest();
}

void LoaderCore::Impl::issue_whole(EpochPlan& plan, std::size_t c, std::size_t s) {
  const std::size_t k = plan.issued;
  send_task(c, s, plan, k);
  if (plan.iterable) plan.last_issued[pool.channel(c).position] = k + 1;
  ++plan.issued;
}

void LoaderCore::Impl::issue() {
  if (num_workers() == 0 || pool.running() == 0) return;
  for (EpochPlan* plan = plan_to_issue(); plan != nullptr; plan = plan_to_issue()) {
    const std::size_t k = plan->issued;
    if (!plan->iterable && plan->done[k] != 0) {
      ++plan->issued;  // delivered before a resume: not loaded again
      continue;
    }
    if (k == 0 && issue_split_first(*plan)) {
      ++plan->issued;
      continue;
    }
    if (plan->iterable && options.in_order && plan->exhausted[k % num_workers()] != 0) {
      ++plan->issued;  // a void batch: that worker's stream has ended
      continue;
    }
    const std::optional<std::size_t> c = channel_for(*plan, k);
    if (!c) return;
    issue_whole(*plan, *c, *slot_for(*c));
  }
}

bool LoaderCore::Impl::load_inline() {
  EpochPlan& plan = *current;
  while (!plan.iterable && !plan.fully_issued() && plan.done[plan.issued] != 0) ++plan.issued;
  if (plan.fully_issued()) return false;
  const std::optional<std::size_t> s = slot_for(0);
  if (!s) return false;
  write_task(*s, plan, plan.issued);
  ++plan.issued;
  inline_error = nullptr;
  load_batch(ring(), *memory, *s, nullptr, -1, produce, resolved().skip_samples,
             collector.enabled() && inline_stages.next(), &inline_error);
  inline_stages.record(ring().header(*s));
  if (collector.enabled() && ring().header(*s).status == SlotStatus::kOk) {
    collector.on_batch_loaded(0, posix::self_pid(), ring().header(*s));
  }
  slots.set_phase(*s, Phase::kIssued, Phase::kReady);
  return true;
}

bool LoaderCore::Impl::collect() noexcept {
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
      if (gated[c] != 0) take_first_report(c);  // the report comes before its batch's end
      const SlotHeader& header = ring().header(s);
      if (--pool.channel(c).outstanding == 0) idle_since_ns[c] = header.end_ns;
      const bool live = live_plan(slots[s].plan) != nullptr;
      if (live && slots[s].part == kWholeBatch && header.status == SlotStatus::kOk &&
          header.end_ns > header.start_ns) {
        const std::uint64_t took = header.end_ns - header.start_ns;
        if (epoch_batch_ns_low == 0 || took < epoch_batch_ns_low) epoch_batch_ns_low = took;
      }
      slots.set_phase(s, Phase::kIssued, live ? Phase::kReady : Phase::kFree);
      if (collector.enabled() && live && header.status == SlotStatus::kOk) {
        collector.on_batch_loaded(pool.channel(c).position, pool.channel(c).process.pid(), header,
                                  slots[s].part == kWholeBatch || slots[s].part == 0);
      }
      any = true;
    }
  }
  return any;
}

}  // namespace stoker::detail
