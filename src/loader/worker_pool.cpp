#include "loader/worker_pool.hpp"

#include <sched.h>

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "os/assert.hpp"
#include "stoker/errors.hpp"
#include "stoker/random.hpp"
#include "stoker/topology.hpp"

namespace stoker::detail {

void WorkerPool::attach(const Ring& ring, int main_eventfd, const ResolvedOptions& resolved,
                        Launch launch) {
  std::vector<posix::Fd> eventfds;
  const std::size_t count = ring.num_channels();
  for (std::size_t c = 0; c < count && resolved.num_workers > 0; ++c) {
    eventfds.emplace_back(posix::make_eventfd());
    if (!eventfds.back().valid()) {
      throw Error(posix::errno_message("DataLoader: creating an eventfd failed", errno) +
                  "; raise `ulimit -n` or lower num_workers");
    }
  }
  ring_ = &ring;
  main_eventfd_ = main_eventfd;
  launch_ = launch;
  num_workers_ = resolved.num_workers;
  channels_ = std::vector<ChannelState>(count);
  position_channel_.resize(num_workers_);
  for (std::size_t p = 0; p < num_workers_; ++p) position_channel_[p] = p;
  task_eventfds_ = std::move(eventfds);
  rebuild_wait_fds();
}

bool WorkerPool::serves_a_worker(std::size_t c) const noexcept {
  return std::find(position_channel_.begin(), position_channel_.end(), c) !=
         position_channel_.end();
}

bool WorkerPool::all_running() const noexcept {
  for (const std::size_t c : position_channel_) {
    if (!channels_[c].running() || channels_[c].retiring) return false;
  }
  return true;
}

std::size_t WorkerPool::running() const noexcept {
  std::size_t n = 0;
  for (const ChannelState& channel : channels_) n += channel.running() ? 1U : 0U;
  return n;
}

std::vector<pid_t> WorkerPool::pids_by_worker() const {
  std::vector<pid_t> pids(num_workers_, 0);
  for (std::size_t p = 0; p < num_workers_; ++p) {
    const ChannelState& channel = channels_[position_channel_[p]];
    if (channel.running()) pids[p] = channel.process.pid();
  }
  return pids;
}

void WorkerPool::start_all(SlotTable& slots,
                           const std::function<bool(std::uint64_t fork_ns)>& after_first) {
  if (deferred_) start_deferred(slots);  // an epoch that ended before they were needed
  if (all_running()) return;
  stop_all(&slots);
  // Every channel starts empty, also those whose workers are forked later (start_deferred):
  // a stopped worker's last results and batch count must not be taken for the new ones'.
  // Worker p on channel p, the ones forked later included: after recycling, a stale position
  // would map a worker not yet forked to another's channel.
  for (std::size_t c = 0; c < channels_.size(); ++c) reset_channel(c);
  for (std::size_t p = 0; p < num_workers_; ++p) position_channel_[p] = p;
  warn_if_multithreaded();
  spread_.clear();  // CPUs for the workers' first tasks, in turn
  if (launch_.bind_workers) {
    worker_cpus_ = worker_cores(Topology::detect(), num_workers_, ::sched_getcpu());
  } else if (num_workers_ >= 2) {
    spread_ = posix::allowed_cpus();
    if (spread_.size() < 2) spread_.clear();
    // Begin after the caller's CPU: several loaders (ranks) on one machine then spread too.
    const auto caller = std::find(spread_.begin(), spread_.end(), ::sched_getcpu());
    if (caller != spread_.end()) std::rotate(spread_.begin(), caller + 1, spread_.end());
  }
  try {
    for (std::size_t p = 0; p < num_workers_; ++p) {
      const std::uint64_t before = now_ns();
      spawn_on(p, p, first_task_cpu(p));
      if (p == 0 && after_first && !after_first(now_ns() - before)) {
        deferred_ = num_workers_ > 1;
        return;
      }
    }
  } catch (...) {
    stop_all(&slots);
    throw;
  }
}

void WorkerPool::start_deferred(SlotTable& slots) {
  if (!deferred_) return;
  deferred_ = false;
  try {
    for (std::size_t p = 1; p < num_workers_; ++p) {
      if (!channels_[p].running()) spawn_on(p, p, first_task_cpu(p));  // as start_all would
    }
  } catch (...) {
    stop_all(&slots);
    throw;
  }
}

void WorkerPool::spawn_on(std::size_t c, std::size_t p, int first_task_cpu) {
  reset_channel(c);
  WorkerLaunch launch;
  launch.id = p;
  launch.num_workers = num_workers_;
  launch.seed = Generator::from({launch_.seed, p}).next();
  launch.ring = ring_;
  launch.channel = c;
  launch.task_eventfd = task_eventfds_[c].get();
  launch.main_eventfd = main_eventfd_;
  launch.produce = launch_.produce;
  launch.skip_samples = launch_.skip_samples;
  launch.collect_stats = launch_.collect_stats;
  launch.cpus = p < worker_cpus_.size() ? &worker_cpus_[p] : nullptr;
  launch.first_task_cpu = first_task_cpu;
  launch.worker_init = launch_.worker_init;
  ChannelState& channel = channels_[c];
  channel.process = WorkerProcess::spawn(launch);
  channel.position = p;
  position_channel_[p] = c;
  rebuild_wait_fds();
}

void WorkerPool::rebuild_wait_fds() {
  wait_fds_.clear();
  wait_fds_.push_back({main_eventfd_, POLLIN, 0});
  for (const ChannelState& channel : channels_) {
    if (channel.running() && channel.process.pidfd() >= 0) {
      wait_fds_.push_back({channel.process.pidfd(), POLLIN, 0});
    }
  }
}

// Only while channel c has no worker.
void WorkerPool::reset_channel(std::size_t c) noexcept {
  STOKER_ASSERT(!channels_[c].running(), "a channel is reset only while no worker serves it");
  ChannelState& state = channels_[c];
  state.retiring = false;
  state.issued = 0;
  state.outstanding = 0;
  Channel& channel = ring_->channel(c);
  channel.tasks.reset();
  channel.results.reset();
  channel.doorbell.sleeping.store(0, std::memory_order_relaxed);
  channel.current_sample.store(kNoSample, std::memory_order_relaxed);
  channel.current_batch.store(0, std::memory_order_relaxed);
  channel.stop_requested.store(0, std::memory_order_relaxed);
  channel.fatal_valid.store(0, std::memory_order_relaxed);
  channel.first_reported.store(0, std::memory_order_relaxed);
  channel.first_gate.store(0, std::memory_order_relaxed);
  channel.private_reported.store(0, std::memory_order_relaxed);
}

void WorkerPool::push_task(std::size_t c, std::size_t s) noexcept {
  Channel& channel = ring_->channel(c);
  const bool pushed =
      channel.tasks.try_push(Message{MessageKind::kBatch, static_cast<std::uint32_t>(s)});
  STOKER_ASSERT(pushed, "INV-QUEUE-2: a task queue has room for every slot of its channel");
  (void)pushed;
  ring_doorbell(channel.doorbell, task_eventfds_[c].get());
}

void WorkerPool::request_stop(std::size_t c, bool now) noexcept {
  Channel& channel = ring_->channel(c);
  if (now) channel.stop_requested.store(1, std::memory_order_relaxed);
  const bool pushed = channel.tasks.try_push(Message{MessageKind::kStop, 0});
  // A second stop to a retiring worker is the most INV-QUEUE-2 allows for.
  STOKER_ASSERT(pushed, "INV-QUEUE-2: a task queue has room for two stop messages");
  (void)pushed;
  ring_doorbell(channel.doorbell, task_eventfds_[c].get());
}

void WorkerPool::stop_all(SlotTable* slots, std::chrono::milliseconds grace) noexcept {
  deferred_ = false;
  std::vector<WorkerProcess> running;
  for (std::size_t c = 0; c < channels_.size(); ++c) {
    if (!channels_[c].running()) continue;
    request_stop(c, true);
    running.push_back(std::move(channels_[c].process));
  }
  if (!running.empty()) reap_all(running, grace);
  for (ChannelState& channel : channels_) {
    channel.retiring = false;
    channel.outstanding = 0;
  }
  if (slots != nullptr) slots->free_issued();
  if (ring_ != nullptr) {
    try {
      rebuild_wait_fds();
    } catch (...) {  // the vector only shrinks here: its capacity suffices
    }
  }
}

std::vector<std::size_t> WorkerPool::reap_exited() {
  std::vector<std::size_t> reaped;
  for (std::size_t c = 0; c < channels_.size(); ++c) {
    if (channels_[c].running() && channels_[c].process.try_reap()) reaped.push_back(c);
  }
  if (!reaped.empty()) rebuild_wait_fds();  // a reaped worker's pidfd is closed
  return reaped;
}

bool WorkerPool::try_reap_retired(std::size_t c) noexcept {
  ChannelState& channel = channels_[c];
  return channel.retiring && channel.running() && channel.process.try_reap();
}

}  // namespace stoker::detail
