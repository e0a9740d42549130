// FaultReport: what the main process says when a worker dies, hangs or throws — the details of
// WorkerCrashed, LoaderTimeout and WorkerException from what the channel and the slot recorded —
// and OomWatch, which tells a kill by the kernel's OOM killer from a SIGKILL anyone else sent.
// Main process only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "ipc/ring.hpp"
#include "loader/worker_pool.hpp"
#include "os/cgroup.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {

// The OOM-kill count a SIGKILL is compared with. It follows the current count at least
// kOomBaselineLag behind: a worker the OOM killer has already counted may take a while to die
// and be reaped (tearing down a large address space), and must still be compared with the
// count from before its kill.
class OomWatch {
 public:
  // A new epoch: the baseline is the count now.
  void reset();
  // At a liveness check that found nobody dead: moves the baseline up to a count seen at least
  // kOomBaselineLag ago, so an unrelated OOM kill long before is not blamed for a later SIGKILL.
  void tick(std::chrono::steady_clock::time_point now);
  const std::optional<OomCount>& baseline() const noexcept { return baseline_; }

 private:
  static constexpr std::chrono::seconds kOomBaselineLag{2};
  std::optional<OomCount> baseline_;
  std::optional<OomCount> candidate_;
  std::chrono::steady_clock::time_point candidate_time_{};
};

// The cause of a SIGKILL, from the OOM-kill counter read when the worker started and after it
// died (either may be missing when no counter is readable). `estimate` is the loader's memory
// estimate, appended when the OOM killer is to blame.
std::string sigkill_cause(const std::optional<OomCount>& before,
                          const std::optional<OomCount>& after, const std::string& estimate = "");
// The cause of a SIGBUS, with the ring's committed bytes and the memory the system has left.
std::string sigbus_cause(std::size_t ring_committed, std::optional<std::uint64_t> mem_available);

// What the ring holds and has seen, for the messages: the bytes its slots have committed, and
// the rule of thumb from the largest batch a slot has held ("" before any batch was written).
std::size_t ring_committed_bytes(const Ring& ring) noexcept;
std::string observed_rule_of_thumb(const Ring& ring, std::size_t num_workers);

// A reaped worker's death, from its wait status and what its channel recorded.
WorkerCrashed::Details crash_details(const ChannelState& state, const Channel& channel,
                                     const OomWatch& oom, std::size_t num_workers,
                                     const Ring& ring);
// A batch's error report (slot or worker), from the worker serving `state` (nullptr:
// the main process, loading in-process).
WorkerException::Details exception_details(const ErrorReport& report, std::uint64_t batch,
                                           const ChannelState* state);
// The consumer's wait for batch `batch` ran past `timeout`; `owing` is the channel holding the
// oldest batch still being loaded, if any, and `owed_batch` that batch.
LoaderTimeout::Details timeout_details(std::chrono::milliseconds timeout,
                                       std::chrono::steady_clock::duration waited,
                                       std::uint64_t batch, const ChannelState* owing,
                                       const Channel* owing_channel, std::uint64_t owed_batch);
// Every slot that could carry the next batch is held by the consumer: `depth` slots per
// channel (a fixed prefetch_factor, or the adaptive depth at its limit).
std::string held_message(std::size_t held, std::size_t num_workers, std::size_t depth,
                         bool adaptive);

}  // namespace stoker::detail
