// LoaderCore::Impl, delivery: the fetch loop of one batch (collect, reclaim, issue, deliver or
// wait), turning a ready slot into a Batch (or its error), counting skipped samples, sleeping on
// the doorbell and the workers' pidfds, and the counters and stats of what was delivered.

#include "loader/loader_impl.hpp"

#include <algorithm>
#include <atomic>

#include <fmt/format.h>

#include "data/spin.hpp"
#include "os/assert.hpp"
#include "os/log.hpp"
#include "os/posix.hpp"
#include "os/proc.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {

bool LoaderCore::Impl::epoch_done() const noexcept {
  const EpochPlan& plan = *current;
  if (!plan.iterable) return plan.delivered == plan.num_batches;
  return plan.all_exhausted() && !slots.pending(plan.id);
}

std::optional<Batch> LoaderCore::Impl::deliver(std::size_t s) {
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
  const bool pinned = r.pinning == Pinning::kRegister && pinning.pin_slot(*shared, s, *r.allocator);
  std::vector<Field> fields = read_fields(ring(), s, lease);
  const std::span<const std::size_t> indices(
      reinterpret_cast<const std::size_t*>(ring().indices(s)), plan.iterable ? 0 : header.num_kept);
  Batch batch = make_batch(BatchParts{std::move(fields), indices, plan.epoch, k, std::move(lease),
                                      header.num_kept, pinned});
  if (r.pinning == Pinning::kCopy) {
    if (std::optional<Batch> staged = pinning.copy_to_pinned(batch, *r.allocator)) {
      return std::move(*staged);
    }
  }
  return batch;
}

void LoaderCore::Impl::note_skipped(std::size_t s, std::uint64_t k) {
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
    logger().warn("stoker: skipped sample(s) {} of batch {}: {}: {} ({} skipped this epoch)", list,
                  k, header.skipped.type_name, header.skipped.message, skipped_this_epoch);
  } catch (...) {
  }
}

void LoaderCore::Impl::throw_batch_error(std::size_t s, const ErrorReport& report,
                                         std::uint64_t k) {
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

bool LoaderCore::Impl::progress_possible() noexcept {
  const bool collected = collect();
  const bool reclaimed = slots.reclaim(shared->held.get());
  return collected || reclaimed || first_report_waiting();
}

void LoaderCore::Impl::wait(Clock::time_point wait_start, bool held_blocked,
                            Clock::time_point& warned_at) {
  if (spin_until([&] { return progress_possible(); }, kMainSpin)) return;
  const Clock::time_point now = Clock::now();
  milliseconds limit{-1};
  if (options.timeout.count() > 0) {
    const auto left = std::chrono::ceil<milliseconds>(wait_start + options.timeout - now);
    if (left.count() <= 0) {
      if (progress_possible()) return;  // it came as the time ran out
      if (held_blocked) throw held_timeout(now - wait_start);
      timed_out(now - wait_start);
    }
    limit = left;
  }
  if (held_blocked && options.held_timeout.count() > 0) {
    const auto left = std::chrono::ceil<milliseconds>(wait_start + options.held_timeout - now);
    if (left.count() <= 0) {
      if (progress_possible()) return;
      throw held_timeout(now - wait_start);
    }
    if (limit.count() < 0 || left < limit) limit = left;
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
  if (pool.deferred()) {  // wake to fork the other workers (start_deferred_workers)
    const std::uint64_t at = now_ns();
    const auto left = std::chrono::ceil<milliseconds>(
        std::chrono::nanoseconds(defer_forks_until_ns > at ? defer_forks_until_ns - at : 0));
    const milliseconds until_fork = std::max(left, milliseconds{1});
    if (limit.count() < 0 || until_fork < limit) limit = until_fork;
  }
  check_workers(sleep_and_notify(limit));
}

bool LoaderCore::Impl::sleep_and_notify(milliseconds limit) {
  if (!options.on_wait) return sleep_for_progress(limit);
  if (limit.count() < 0 || limit > kOnWaitInterval) limit = kOnWaitInterval;
  bool woken = false;
  const bool exited = sleep_for_progress(limit, &woken);
  const Clock::time_point now = Clock::now();
  if (!woken || now - last_on_wait >= kOnWaitInterval) {
    last_on_wait = now;
    try {
      options.on_wait();
    } catch (...) {
      fail_epoch();
      throw;
    }
  }
  return exited;
}

bool LoaderCore::Impl::sleep_for_progress(milliseconds limit, bool* woken) {
  Doorbell& bell = ring().control().main_doorbell;
  bell.sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // E: see Doorbell
  if (progress_possible()) {
    bell.sleeping.store(0, std::memory_order_relaxed);
    if (woken != nullptr) *woken = true;
    return false;
  }
  const bool pidfds = pool.watches_deaths();
  if (!pidfds && (limit.count() < 0 || limit > milliseconds(5))) {
    limit = milliseconds(5);  // no pidfds (Linux < 5.3): look for dead workers by polling
  }
  std::vector<pollfd>& fds = pool.wait_fds();
  const int ready = posix::poll_fds(fds.data(), fds.size(), static_cast<int>(limit.count()));
  if (woken != nullptr) *woken = ready > 0;  // 0: the time ran out, or a signal came (EINTR)
  bell.sleeping.store(0, std::memory_order_relaxed);
  posix::eventfd_drain(shared->main_eventfd.get());
  bool exited = !pidfds;
  for (std::size_t i = 1; ready > 0 && i < fds.size(); ++i) {
    exited = exited || fds[i].revents != 0;
  }
  return exited;
}

std::optional<Batch> LoaderCore::Impl::next_batch() {
  const Clock::time_point start = Clock::now();
  struct Timer {
    Impl& impl;
    Clock::time_point start;
    ~Timer() {
      impl.stats.wait_seconds += std::chrono::duration<double>(Clock::now() - start).count();
    }
  } timer{*this, start};
  std::optional<Batch> batch = fetch_batch(start);
  if (batch && depth.adaptive() && num_workers() > 0) {
    const std::uint64_t end = now_ns();
    const auto begun = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count());
    std::uint64_t blocked = 0;
    for (const std::uint64_t b : blocked_ns) blocked += b;
    depth.on_delivery(end > begun ? end - begun : 0, blocked, num_workers(), end);
  }
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

void LoaderCore::Impl::after_delivery(Clock::time_point start, std::uint64_t index,
                                      std::size_t samples, std::size_t bytes) {
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

LoaderStats LoaderCore::Impl::public_stats() const {
  LoaderStats out = stats;
  const auto end = epoch_end != Clock::time_point{} ? epoch_end : Clock::now();
  out.epoch_seconds = epoch_start == Clock::time_point{}
                          ? 0
                          : std::chrono::duration<double>(end - epoch_start).count();
  out.skipped_samples = skipped_this_epoch;
  out.respawns = respawns_this_epoch;
  // The slots the loader may use now: a channel per worker, as deep as the prefetch depth.
  collector.fill(out, shared ? pool.pids_by_worker() : std::vector<pid_t>{},
                 shared ? std::max<std::size_t>(num_workers(), 1) * depth.depth() : 0);
  if (shared) {
    out.ring_bytes = ring_committed_bytes(ring());
    for (WorkerStats& w : out.workers) {
      if (w.worker_id < num_workers()) {
        w.blocked_seconds =
            static_cast<double>(blocked_ns[pool.channel_of_worker(w.worker_id)]) * 1e-9;
      }
    }
  }
  out.prefetch_adaptive = depth.adaptive();
  out.prefetch_depth = depth.depth();
  out.prefetch_depth_limit = depth.limit();
  out.prefetch_at_limit = depth.at_limit();
  return out;
}

std::optional<Batch> LoaderCore::Impl::fetch_batch(Clock::time_point start) {
  if (!current->has_batches()) {
    current.reset();
    return std::nullopt;
  }
  Clock::time_point warned_at = start;
  bool first = true;
  for (;;) {
    // The forks put off for batch 0 (after_first_fork), once it is out; before, only when the
    // fetch would otherwise sleep (below), so a batch 0 that is ready is never kept waiting.
    if (pool.deferred() && current->delivered > 0) start_deferred_workers();
    check_workers(false);  // at most every kLivenessInterval, even while batches flow
    // Collect and reclaim before issuing, so every slot they free is refilled before the
    // loop can sleep; wait() returns as soon as either finds more.
    collect();
    check_late_first_samples();  // a first sample reported after the memory check passed
    if (first && collector.enabled())
      collector.on_request(slots.count_ready(current->id),
                           std::max<std::size_t>(num_workers(), 1) * depth.depth(), now_ns());
    first = false;
    slots.reclaim(shared->held.get());
    issue();
    if (options.in_order || num_workers() == 0) current->skip_void_batches();
    std::optional<std::size_t> s =
        slots.deliverable(current->id, resolved().ordered, current->next_in_order);
    if (!s && current->first_parts > 0 && current->next_in_order == 0) {
      // A split batch 0 (dispatch.cpp): deliverable once every part is in.
      const std::vector<std::size_t> parts =
          slots.ready_parts(current->id, 0, current->first_parts);
      if (!parts.empty()) s = join_split_first(parts);
    }
    if (s) {
      std::optional<Batch> batch = deliver(*s);
      if (!batch) continue;  // every sample of it was skipped
      issue();               // refill the slot the consumer just freed, before it starts computing
      return batch;
    }
    if (epoch_done()) {
      current.reset();
      if (!options.persistent_workers) pool.stop_all(&slots);
      return std::nullopt;
    }
    if (num_workers() == 0 && load_inline()) continue;
    const bool held_blocked = blocked_by_held_batches();
    if (held_blocked && depth.grow_for_held()) continue;  // the consumer keeps batches: deeper
    if (held_blocked && count_threads() <= 1) throw held_timeout(std::nullopt);
    if (pool.deferred()) {
      start_deferred_workers();
      if (!pool.deferred()) continue;  // forked: give them their tasks before sleeping
    }
    wait(start, held_blocked, warned_at);
  }
}

}  // namespace stoker::detail
