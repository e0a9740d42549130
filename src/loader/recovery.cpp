// LoaderCore::Impl, recovery: a worker that exited (expected after a retirement, a death
// otherwise) is respawned with the batches it had not delivered, or raised as WorkerCrashed;
// a batch that does not come in time is a LoaderTimeout; slots held by the consumer are named.

#include "loader/loader_impl.hpp"

#include <sys/wait.h>

#include <fmt/format.h>

#include "data/error_text.hpp"
#include "os/log.hpp"
#include "os/proc.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {

void LoaderCore::Impl::check_workers(bool force) {
  const Clock::time_point now = Clock::now();
  if (!force && now - last_liveness_check < kLivenessInterval) return;
  last_liveness_check = now;
  for (const std::size_t c : pool.reap_exited()) check_exit(c);
  oom.tick(now);
}

void LoaderCore::Impl::check_exit(std::size_t c) {
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

void LoaderCore::Impl::worker_died(std::size_t c) {
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

void LoaderCore::Impl::respawn(std::size_t c) {
  const std::vector<LostTask> lost = slots.take_issued(c);
  const bool was_retiring = pool.channel(c).retiring;
  try {
    pool.spawn_on(c, pool.channel(c).position);
  } catch (...) {
    fail_epoch();  // the lost batches cannot be reloaded: end the epoch, clearly
    throw;
  }
  gated[c] = 0;  // the dead worker's report, if any, went with it (spawn_on reset the words)
  private_pending[c] = 0;
  for (const LostTask& task : lost) {
    if (EpochPlan* plan = live_plan(task.plan)) {
      send_task(c, *slots.free_slot(c), *plan, task.batch, task.part);
    }
  }
  if (was_retiring) {
    pool.channel(c).retiring = true;
    pool.request_stop(c, false);
  }
}

void LoaderCore::Impl::timed_out(Clock::duration waited) {
  const std::optional<std::size_t> owing = slots.oldest_issued(current->id);
  const std::size_t c = owing ? ring().channel_of(*owing) : 0;
  const LoaderTimeout::Details details = timeout_details(
      options.timeout, waited, current->next_in_order, owing ? &pool.channel(c) : nullptr,
      owing ? &ring().channel(c) : nullptr, owing ? slots[*owing].batch : 0);
  // A worker that overran the timeout is not given the usual grace: SIGTERM after 50 ms.
  fail_epoch(milliseconds{50});
  throw LoaderTimeout(details);
}

bool LoaderCore::Impl::blocked_by_held_batches() const noexcept {
  // A channel whose held slots fill its prefetch depth cannot take the next batch.
  auto full = [&](std::size_t c) { return slots.held(c) >= depth.depth(); };
  if (num_workers() == 0) return full(0);
  if (options.in_order) {
    if (current->issued > current->next_in_order) return false;  // it is being loaded
    return full(pool.channel_of_worker(current->next_in_order % num_workers()));
  }
  for (std::size_t p = 0; p < num_workers(); ++p) {
    if (!full(pool.channel_of_worker(p))) return false;
  }
  return true;
}

std::string LoaderCore::Impl::held_text() const {
  return held_message(slots.count(Phase::kHeld), num_workers(), depth.depth(), depth.adaptive());
}

HeldBatchesTimeout LoaderCore::Impl::held_timeout(std::optional<Clock::duration> waited) const {
  LoaderTimeout::Details details;
  details.timeout = options.timeout;
  details.batch = current->next_in_order;
  std::string message = held_text();
  if (waited) {
    details.waited = std::chrono::duration_cast<milliseconds>(*waited);
    const bool held_limit =
        options.held_timeout.count() > 0 &&
        (options.timeout.count() == 0 || options.held_timeout < options.timeout);
    if (held_limit) details.timeout = options.held_timeout;
    message += fmt::format(" (waited {} ms, LoaderOptions::{})", details.waited.count(),
                           held_limit ? "held_timeout" : "timeout");
  }
  return HeldBatchesTimeout(details, slots.count(Phase::kHeld), message);
}

}  // namespace stoker::detail
