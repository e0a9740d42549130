#include "loader/fault_report.hpp"

#include <sys/wait.h>

#include <csignal>

#include <fmt/format.h>

#include "data/error_text.hpp"
#include "data/format.hpp"
#include "os/proc.hpp"

namespace stoker::detail {

void OomWatch::reset() {
  baseline_ = read_oom_kill_count();
  candidate_time_ = {};
}

void OomWatch::tick(std::chrono::steady_clock::time_point now) {
  if (now - candidate_time_ < kOomBaselineLag) return;
  if (candidate_time_ != std::chrono::steady_clock::time_point{}) baseline_ = candidate_;
  candidate_ = read_oom_kill_count();
  candidate_time_ = now;
}

std::string sigkill_cause(const std::optional<OomCount>& before,
                          const std::optional<OomCount>& after, const std::string& estimate) {
  if (before && after && after->kills > before->kills) {
    return fmt::format(
        "the kernel's OOM killer killed it (oom_kill in {} rose from {} to {}): the loader's "
        "processes needed more memory than the limit allows. Peak memory is about "
        "(num_workers + 1) x batch_size x bytes per sample{}: lower num_workers or batch_size",
        after->source, before->kills, after->kills,
        estimate.empty() ? std::string() : fmt::format(" ({})", estimate));
  }
  if (before && after) {
    return fmt::format(
        "another process sent it SIGKILL; not the OOM killer (oom_kill in {} stayed at {})",
        after->source, after->kills);
  }
  return likely_cause(SIGKILL, -1);
}

std::string sigbus_cause(std::size_t ring_committed, std::optional<std::uint64_t> mem_available) {
  const std::string available =
      mem_available ? format_bytes(static_cast<std::size_t>(*mem_available)) : "unknown";
  return fmt::format(
      "a memory access could not be backed: shared memory is exhausted (the batch ring holds {}, "
      "the system has {} available) or a memory-mapped file the dataset reads was truncated; "
      "free memory or lower batch_size, num_workers or prefetch_factor",
      format_bytes(ring_committed), available);
}

std::size_t ring_committed_bytes(const Ring& ring) noexcept {
  std::size_t total = 0;
  for (std::size_t s = 0; s < ring.num_slots(); ++s) {
    total += ring.header(s).committed.load(std::memory_order_relaxed);
  }
  return total;
}

std::string observed_rule_of_thumb(const Ring& ring, std::size_t num_workers) {
  std::size_t largest = 0;
  for (std::size_t s = 0; s < ring.num_slots(); ++s) {
    largest =
        std::max<std::size_t>(largest, ring.header(s).committed.load(std::memory_order_relaxed));
  }
  if (largest <= kSlotHeaderBytes) return {};
  return fmt::format("for this loader ({} + 1) x {} per batch = {}; its batch ring holds {}",
                     num_workers, format_bytes(largest), format_bytes((num_workers + 1) * largest),
                     format_bytes(ring_committed_bytes(ring)));
}

WorkerCrashed::Details crash_details(const ChannelState& state, const Channel& channel,
                                     const OomWatch& oom, std::size_t num_workers,
                                     const Ring& ring) {
  const WorkerProcess& process = state.process;
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
      details.cause = sigkill_cause(oom.baseline(), read_oom_kill_count(),
                                    observed_rule_of_thumb(ring, num_workers));
    } else if (details.signal == SIGBUS) {
      details.cause = sigbus_cause(ring_committed_bytes(ring), read_meminfo("MemAvailable"));
    }
  } else {
    details.exit_code = WEXITSTATUS(process.status());
  }
  if (batch != 0) details.batch = batch - 1;
  if (sample != kNoSample) details.sample_index = sample;
  return details;
}

WorkerException::Details exception_details(const ErrorReport& report, std::uint64_t batch,
                                           const ChannelState* state) {
  WorkerException::Details details;
  details.type_name = report.type_name;
  details.message = report.message;
  details.where = report.where;
  details.batch = batch;
  if (report.sample != kNoSample) details.sample_index = report.sample;
  if (state == nullptr) {
    details.pid = posix::self_pid();
  } else {
    details.worker_id = state->position;
    details.pid = state->process.pid();
  }
  return details;
}

LoaderTimeout::Details timeout_details(std::chrono::milliseconds timeout,
                                       std::chrono::steady_clock::duration waited,
                                       std::uint64_t batch, const ChannelState* owing,
                                       const Channel* owing_channel, std::uint64_t owed_batch) {
  LoaderTimeout::Details details;
  details.timeout = timeout;
  details.waited = std::chrono::duration_cast<std::chrono::milliseconds>(waited);
  details.batch = batch;
  if (owing != nullptr && owing_channel != nullptr) {
    details.worker_id = owing->position;
    details.pid = owing->process.pid();
    details.batch = owed_batch;
    const std::uint64_t sample = owing_channel->current_sample.load(std::memory_order_relaxed);
    if (sample != kNoSample) details.sample_index = sample;
  }
  return details;
}

std::string held_message(std::size_t held, std::size_t num_workers, std::size_t depth,
                         bool adaptive) {
  const std::string setting =
      adaptive ? fmt::format("the adaptive prefetch depth at its limit of {}", depth)
               : fmt::format("prefetch_factor={}", depth);
  const std::string layout = num_workers == 0
                                 ? fmt::format("{} slots: {}, loading in-process", depth, setting)
                                 : fmt::format("{} slots per worker: {}", depth, setting);
  return fmt::format(
      "DataLoader: the next batch needs a slot, but the program still holds {} batches and "
      "every slot that could carry the next one is among them ({}). A Batch is a view into "
      "shared memory whose slot is reused only when the Batch is destroyed: keep "
      "batch.clone() instead of the Batch, or raise prefetch_factor",
      held, layout);
}

}  // namespace stoker::detail
