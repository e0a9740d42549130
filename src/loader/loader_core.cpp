// LoaderCore::Impl, the epoch: construction (and the options that do not apply to an iterable
// dataset), the ring made at the first epoch, begin / abandon / fail of an epoch, and the public
// LoaderCore calls (state, load_state, memory_estimate, worker_pids), each keeping the thread
// rule (thread_rule.hpp) through LoaderCore::Call. See loader_impl.hpp.

#include "loader/loader_impl.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "datasets/launch.hpp"
#include "os/log.hpp"
#include "os/posix.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {
namespace {

std::string loader_trace_path(const LoaderOptions& o) {
  const LaunchInfo launch = detect_launch_quietly();
  return trace_path_for(o.trace_path,
                        launch.world_size > 1 ? std::optional(launch.rank) : std::nullopt);
}

}  // namespace

LoaderCore::Impl::Impl(LoaderOptions o, std::function<std::size_t()> size, ProduceFn p,
                       DatasetProbe dp)
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
    throw std::invalid_argument(
        fmt::format("LoaderOptions::{} does not apply to an iterable dataset: its samples have no "
                    "indices to order, and a worker's place in its stream cannot be moved to a new "
                    "process; shard and shuffle inside the dataset instead",
                    conflict));
  }
}

std::size_t LoaderCore::Impl::next_num_batches() {
  if (iterable) throw std::logic_error("DataLoader: an iterable dataset has no length");
  const std::size_t n = dataset_size();
  if (!options.sampler && !options.batch_sampler) return batches_for(n, options);
  if (next && next->epoch == next_epoch && next->dataset_size == n) return next->num_batches;
  if (next && next->issued > 0) return plan_for(next_epoch, n).num_batches;  // in flight
  next = plan_for(next_epoch, n);
  return next->num_batches;
}

void LoaderCore::Impl::ensure_ring() {
  if (shared) return;
  const ResolvedOptions& r = resolved();
  auto fresh = std::make_shared<RingHandle>();
  try {
    fresh->ring = std::make_unique<Ring>(r.geometry);
  } catch (const AddressSpaceError& wide) {
    if (!r.narrow_geometry) throw;
    fresh->ring = std::make_unique<Ring>(*r.narrow_geometry);  // throws its own error
    try {
      logger().info(
          "stoker: {}; the ring has {} slots a worker instead, and the adaptive "
          "prefetch depth stops there",
          wide.what(), kAdaptivePrefetchFloor);
    } catch (...) {
    }
  }
  preflight.set_ring_depth(fresh->ring->slots_per_channel());
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
  depth.configure(r.adaptive_depth, r.min_depth, preflight.depth_limit());
  idle_since_ns.assign(fresh->ring->num_channels(), 0);
  blocked_ns.assign(fresh->ring->num_channels(), 0);
  gated.assign(fresh->ring->num_channels(), 0);
  private_pending.assign(fresh->ring->num_channels(), 0);
  shared = std::move(fresh);
}

void LoaderCore::Impl::begin_epoch() {
  abandon_current();
  const std::uint64_t epoch = next_epoch;
  const std::size_t n = iterable ? 0 : dataset_size();
  if (epoch_batch_ns_low != 0) batch_ns_low = std::exchange(epoch_batch_ns_low, 0);
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
      // A fresh epoch's first batch can measure the samples for the memory check itself.
      preflight.check(current->issued == 0 && !current->iterable && current->done[0] == 0);
      ensure_ring();
      drop_stale_ready();  // keeps what was prefetched for this plan, now current
      if (num_workers() > 0) {
        pool.start_all(slots, [this](std::uint64_t fork_ns) { return after_first_fork(fork_ns); });
        if (!pool.deferred()) split_first_rest();
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
  depth.set_limit(preflight.depth_limit());  // the checks may have run for this epoch
  const std::uint64_t started = now_ns();
  for (std::size_t c = 0; c < blocked_ns.size(); ++c) {
    blocked_ns[c] = 0;  // this epoch's figures; a worker idle since the last one starts now
    if (idle_since_ns[c] != 0) idle_since_ns[c] = started;
  }
  last_health_log = epoch_start;
  oom.reset();
  if (preflight.awaiting_first_batch()) {
    // The consumer waits for data here (the first batch, which the check needs): it counts as
    // waiting, as it would inside the first fetch.
    const Clock::time_point wait_start = Clock::now();
    struct Waited {
      LoaderStats& stats;
      Clock::time_point start;
      ~Waited() {
        stats.wait_seconds += std::chrono::duration<double>(Clock::now() - start).count();
      }
    } waited{stats, wait_start};
    try {
      await_first_batch();
    } catch (...) {
      next_epoch = epoch;  // the same epoch again at the next begin(), checked before forking
      current.reset();
      throw;
    }
  }
}

void LoaderCore::Impl::abandon_current() noexcept {
  if (!current) return;
  current.reset();
  if (!options.persistent_workers) pool.stop_all(&slots);
  drop_stale_ready();
}

void LoaderCore::Impl::fail_epoch(milliseconds grace) noexcept {
  current.reset();
  next.reset();
  pool.stop_all(&slots, grace);
  drop_stale_ready();
}

void LoaderCore::Impl::drop_stale_ready() noexcept {
  slots.drop_ready_unless([this](std::uint64_t plan) { return live_plan(plan) != nullptr; });
}

LoaderCore::LoaderCore(LoaderOptions options, std::function<std::size_t()> dataset_size,
                       ProduceFn produce, DatasetProbe probe) {
  validate(options);
  impl_ = std::make_unique<Impl>(std::move(options), std::move(dataset_size), std::move(produce),
                                 std::move(probe));
}

LoaderCore::~LoaderCore() = default;

LoaderCore::Call::Call(const LoaderCore& core, const char* name) : impl_(*core.impl_) {
  impl_.rule.enter(name);
  if (!impl_.rule.outermost()) return;
  const std::uint64_t finished = impl_.rule.take_deferred_finish();
  if (finished != 0 && impl_.current && impl_.current->id == finished) impl_.abandon_current();
}

LoaderCore::Call::~Call() { impl_.rule.leave(); }

// options() takes no part in the thread rule: the options never change after construction.
const LoaderOptions& LoaderCore::options() const noexcept { return impl_->options; }

std::size_t LoaderCore::num_workers() {
  const Call call(*this, "DataLoader::num_workers");
  return impl_->resolved().num_workers;
}

std::size_t LoaderCore::num_batches() const {
  const Call call(*this, "DataLoader::size");
  return impl_->next_num_batches();
}

void LoaderCore::set_epoch(std::uint64_t epoch) {
  const Call call(*this, "DataLoader::set_epoch");
  impl_->next_epoch = epoch;
}

std::uint64_t LoaderCore::epoch() const {
  const Call call(*this, "DataLoader::epoch");
  return impl_->next_epoch;
}

BatchIterator LoaderCore::begin() {
  const Call call(*this, "DataLoader::begin");
  impl_->begin_epoch();
  return BatchIterator(this, impl_->current->id);
}

LoaderStats LoaderCore::stats() const {
  const Call call(*this, "DataLoader::stats");
  return impl_->public_stats();
}

std::string LoaderCore::state() const {
  const Call call(*this, "DataLoader::state");
  Impl& m = *impl_;
  if (m.iterable) {
    throw std::logic_error(
        "DataLoader::state: an iterable dataset's position is inside its workers' streams, "
        "which stoker cannot save; save your stream's own position (e.g. in start_epoch) "
        "instead");
  }
  const OrderInfo order = order_info_of(m.options);
  if (m.current) {
    return format_state(capture_state(*m.current, m.options.seed, m.skipped_this_epoch, order));
  }
  EpochPlan fresh;
  fresh.epoch = m.next_epoch;
  fresh.dataset_size = m.dataset_size();
  fresh.num_batches = m.next_num_batches();
  fresh.done.assign(fresh.num_batches, 0);
  return format_state(capture_state(fresh, m.options.seed, 0, order));
}

void LoaderCore::load_state(std::string_view text) {
  const Call call(*this, "DataLoader::load_state");
  Impl& m = *impl_;
  if (m.iterable) {
    throw std::logic_error(
        "DataLoader::load_state: an iterable dataset's loader has no state to load (its "
        "position is inside its workers' streams); restore your stream's own position "
        "instead");
  }
  LoaderState r = parse_loader_state(text);
  if (r.seed != m.options.seed) {
    throw std::invalid_argument(fmt::format(
        "DataLoader::load_state: the state was saved by a loader with seed {}, this one has "
        "seed {}: the order would differ; build the loader with LoaderOptions::seed = {}",
        r.seed, m.options.seed, r.seed));
  }
  check_order(r, order_info_of(m.options));
  m.abandon_current();
  m.next.reset();
  m.next_epoch = r.epoch;
  m.resume = std::move(r);
}

MemoryEstimate LoaderCore::memory_estimate() {
  const Call call(*this, "DataLoader::memory_estimate");
  if (impl_->shared) impl_->take_private_reports(false);  // the workers' bases measured so far
  return impl_->preflight.estimate();
}

std::vector<pid_t> LoaderCore::worker_pids() const {
  const Call call(*this, "DataLoader::worker_pids");
  std::vector<pid_t> pids;
  if (!impl_->shared) return pids;
  for (const pid_t pid : impl_->pool.pids_by_worker()) {
    if (pid > 0) pids.push_back(pid);
  }
  return pids;
}

std::optional<Batch> LoaderCore::next(std::uint64_t generation) {
  const Call call(*this, "BatchIterator (fetching a batch)");
  Impl& m = *impl_;
  if (!m.current || m.current->id != generation) return std::nullopt;
  return m.next_batch();
}

void LoaderCore::finish(std::uint64_t generation) noexcept {
  Impl& m = *impl_;
  if (!m.rule.try_enter("BatchIterator::~BatchIterator")) {
    // An iterator destroyed on one thread while another is inside a call of this loader: its
    // epoch cannot be ended under that call. The next call ends it (LoaderCore::Call); until
    // then its workers go on loading into their slots, which is harmless.
    m.rule.defer_finish(generation);
    return;
  }
  if (m.current && m.current->id == generation) m.abandon_current();
  m.rule.leave();
}

}  // namespace stoker::detail
