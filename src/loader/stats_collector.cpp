#include "loader/stats_collector.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "data/format.hpp"
#include "os/log.hpp"
#include "os/nvml.hpp"
#include "os/posix.hpp"

namespace stoker::detail {
namespace {

double seconds(std::uint64_t ns) { return static_cast<double>(ns) * 1e-9; }

}  // namespace

void log_health(const LoaderStats& s) {
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

std::string trace_path_for(const std::string& option, std::optional<std::size_t> rank) {
  std::string path = option;
  if (path.empty()) {
    const char* env = std::getenv("STOKER_TRACE");
    if (env == nullptr || *env == '\0') return {};
    path = env;
  }
  if (rank) {
    const std::size_t slash = path.rfind('/');
    const std::size_t dot = path.rfind('.');
    const std::size_t at =
        dot != std::string::npos && (slash == std::string::npos || dot > slash) ? dot : path.size();
    path.insert(at, fmt::format(".rank{}", *rank));
  }
  return path;
}

bool write_trace(const std::string& path, const std::vector<TraceEvent>& events) {
  static std::mutex mutex;
  static std::set<std::string> started;  // paths this process has begun
  const std::lock_guard<std::mutex> lock(mutex);
  const bool append = started.count(path) != 0;
  fmt::memory_buffer out;
  const auto it = std::back_inserter(out);
  const pid_t self = posix::self_pid();
  // Process names first: the main process, then each worker pid seen.
  fmt::format_to(it,
                 "{}\n{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":"
                 "\"main (consumer)\"}}}}",
                 append ? "," : "[", self);
  std::map<std::int32_t, std::uint32_t> workers;
  for (const TraceEvent& e : events) {
    if (e.kind == TraceEvent::Kind::kBatch && e.pid != self) workers.emplace(e.pid, e.worker);
  }
  for (const auto& [pid, id] : workers) {
    fmt::format_to(it,
                   ",\n{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":"
                   "\"worker {} (pid {})\"}}}}",
                   pid, id, pid);
  }
  auto us = [](std::uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
  for (const TraceEvent& e : events) {
    switch (e.kind) {
      case TraceEvent::Kind::kBatch:
        fmt::format_to(
            it,
            ",\n{{\"name\":\"batch {}\",\"cat\":\"load\",\"ph\":\"X\",\"pid\":{},\"tid\":{},"
            "\"ts\":{:.3f},\"dur\":{:.3f},\"args\":{{\"epoch\":{},\"worker\":{},\"samples\":{}",
            e.value, e.pid, e.pid, us(e.start_ns), us(e.length_ns), e.epoch, e.worker, e.samples);
        if (e.get_ns + e.collate_ns > 0) {
          fmt::format_to(it, ",\"get_ms\":{:.3f},\"collate_ms\":{:.3f}",
                         static_cast<double>(e.get_ns) / 1e6,
                         static_cast<double>(e.collate_ns) / 1e6);
        }
        fmt::format_to(it, "}}}}");
        break;
      case TraceEvent::Kind::kWait:
        fmt::format_to(
            it,
            ",\n{{\"name\":\"next() wait\",\"cat\":\"consumer\",\"ph\":\"X\",\"pid\":{},"
            "\"tid\":{},\"ts\":{:.3f},\"dur\":{:.3f},\"args\":{{\"epoch\":{},\"batch\":{}}}}}",
            e.pid, e.pid, us(e.start_ns), us(e.length_ns), e.epoch, e.value);
        break;
      case TraceEvent::Kind::kReady:
        fmt::format_to(it,
                       ",\n{{\"name\":\"ready batches\",\"ph\":\"C\",\"pid\":{},\"ts\":{:.3f},"
                       "\"args\":{{\"ready\":{}}}}}",
                       e.pid, us(e.start_ns), e.value);
        break;
    }
  }
  fmt::format_to(it, "\n]\n");
  // Appending replaces the closing "\n]\n" the previous write left.
  std::FILE* f = std::fopen(path.c_str(), append ? "r+" : "w");
  bool ok = f != nullptr;
  if (ok && append) ok = std::fseek(f, -3, SEEK_END) == 0;
  if (ok) ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (f != nullptr && std::fclose(f) != 0) ok = false;
  if (!ok) {
    logger().warn("stoker: cannot write the trace to {}: {}", path, std::strerror(errno));
    return false;
  }
  started.insert(path);
  return true;
}

StatsCollector::StatsCollector(bool enabled, std::string trace_path)
    : enabled_(enabled || !trace_path.empty()),
      trace_path_(std::move(trace_path)),
      self_(posix::self_pid()) {
  if (trace_path_.empty()) return;
  // Said now, not when the loader is destroyed hours later.
  const std::size_t slash = trace_path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : trace_path_.substr(0, slash + 1);
  if (::access(dir.c_str(), W_OK) != 0) {
    logger().warn(
        "stoker: cannot write the trace to {}: {} is not a writable directory ({}); "
        "no trace is recorded",
        trace_path_, dir, std::strerror(errno));
    trace_path_.clear();
  }
}

StatsCollector::~StatsCollector() {
  if (tracing() && !trace_.empty()) {
    try {
      write_trace(trace_path_, trace_);
    } catch (...) {  // a destructor: the trace is lost, the program goes on
    }
  }
}

void StatsCollector::record(const TraceEvent& event) noexcept {
  try {
    if (trace_.size() < kMaxTraceEvents) {
      trace_.push_back(event);
      return;
    }
    if (!trace_full_warned_) {
      trace_full_warned_ = true;
      logger().warn("stoker: the trace for {} reached {} events; later events are not recorded",
                    trace_path_, kMaxTraceEvents);
    }
  } catch (...) {  // out of memory: the trace loses the event, the loader goes on
  }
}

void StatsCollector::begin_epoch(std::size_t num_workers, std::uint64_t epoch,
                                 std::uint64_t now_ns) {
  epoch_ = epoch;
  if (ahead_epoch_ == epoch && ahead_.size() == num_workers) {
    workers_ = std::move(ahead_);
  } else {
    workers_.assign(num_workers, WorkerAccum{});
  }
  ahead_.clear();
  ahead_epoch_.reset();
  requests_ = 0;
  ready_sum_ = 0;
  occupancy_sum_ = 0;
  samples_ = 0;
  bytes_ = 0;
  window_count_ = 0;
  window_next_ = 0;
  last_delivery_ns_ = 0;
  if (!enabled_) return;
  window_[0] = Checkpoint{now_ns, 0, 0};
  window_next_ = 1;
  window_count_ = 1;
  cpu_at_start_ = read_cpu_times();
}

void StatsCollector::on_batch_loaded(std::size_t worker, pid_t pid, const SlotHeader& header,
                                     bool whole) noexcept {
  if (!enabled_ || header.end_ns < header.start_ns) return;
  const std::uint64_t busy = header.end_ns - header.start_ns;
  std::vector<WorkerAccum>* into = &workers_;
  if (header.epoch != epoch_) {  // loaded ahead, for the next epoch
    if (ahead_epoch_ != header.epoch) {
      try {
        ahead_.assign(workers_.size(), WorkerAccum{});
      } catch (...) {
        return;
      }
    }
    ahead_epoch_ = header.epoch;
    into = &ahead_;
  }
  if (worker < into->size()) {
    WorkerAccum& w = (*into)[worker];
    w.batches += whole ? 1U : 0U;
    w.samples += header.num_kept;
    w.busy_ns += busy;
    if (header.stages_timed != 0) {
      w.timed_busy_ns += busy;
      w.timed_get_ns += header.get_ns;
      w.timed_collate_ns += header.collate_ns;
    }
  }
  if (tracing()) {
    record(TraceEvent{TraceEvent::Kind::kBatch, pid, static_cast<std::uint32_t>(worker),
                      header.start_ns, busy, header.batch, header.epoch,
                      header.stages_timed != 0 ? header.get_ns : 0,
                      header.stages_timed != 0 ? header.collate_ns : 0, header.num_kept});
  }
}

void StatsCollector::on_request(std::size_t ready, std::size_t capacity, std::uint64_t now_ns) {
  if (!enabled_) return;
  ++requests_;
  ready_sum_ += ready;
  if (capacity > 0) occupancy_sum_ += static_cast<double>(ready) / static_cast<double>(capacity);
  if (tracing()) {
    record(TraceEvent{TraceEvent::Kind::kReady, self_, 0, now_ns, 0, ready, epoch_, 0, 0, 0});
  }
}

void StatsCollector::on_delivered(std::uint64_t start_ns, std::uint64_t end_ns, std::uint64_t index,
                                  std::uint64_t samples, std::uint64_t bytes) {
  if (!enabled_) return;
  samples_ += samples;
  bytes_ += bytes;
  last_delivery_ns_ = end_ns;
  if (tracing()) {
    record(TraceEvent{TraceEvent::Kind::kWait, self_, 0, start_ns, end_ns - start_ns, index, epoch_,
                      0, 0, samples});
  }
  const Checkpoint& newest = window_[(window_next_ + kWindow - 1) % kWindow];
  if (window_count_ == 0 || end_ns - newest.time_ns >= kCheckpointNs) {
    window_[window_next_] = Checkpoint{end_ns, samples_, bytes_};
    window_next_ = (window_next_ + 1) % kWindow;
    window_count_ = std::min(window_count_ + 1, kWindow);
  }
}

void StatsCollector::fill(LoaderStats& out, const std::vector<pid_t>& pids,
                          std::size_t ring_slots) const {
  out.ring_slots = ring_slots;
  out.logical_cpus = posix::online_cpus();
  if (const std::optional<ProcessMemory> m = read_process_memory(0)) {
    out.main_rss_bytes = m->rss_bytes;
    out.main_pss_bytes = m->pss_bytes;
  }
  out.workers.clear();
  for (std::size_t id = 0; id < pids.size(); ++id) {
    WorkerStats w;
    w.worker_id = id;
    w.pid = pids[id];
    if (w.pid > 0) {
      if (const std::optional<ProcessMemory> m = read_process_memory(w.pid)) {
        w.rss_bytes = m->rss_bytes;
        w.pss_bytes = m->pss_bytes;
      }
    }
    if (id < workers_.size()) {
      const WorkerAccum& a = workers_[id];
      w.batches = a.batches;
      w.samples = a.samples;
      const double busy = seconds(a.busy_ns);
      if (a.timed_busy_ns > 0) {
        // The split measured on the timed batches, applied to the busy time of all of them.
        const double scale = busy / seconds(a.timed_busy_ns);
        w.get_seconds = seconds(a.timed_get_ns) * scale;
        w.collate_seconds = seconds(a.timed_collate_ns) * scale;
        w.write_seconds = std::max(0.0, busy - w.get_seconds - w.collate_seconds);
      } else {
        w.write_seconds = busy;
      }
      w.busy_fraction = out.epoch_seconds > 0 ? std::min(1.0, busy / out.epoch_seconds) : 0;
    }
    out.workers.push_back(w);
  }
  if (!enabled_) return;
  // The mean of ready / capacity at each request: the depth (and so the capacity) can change.
  out.ring_occupancy =
      requests_ > 0 && ring_slots > 0 ? occupancy_sum_ / static_cast<double>(requests_) : 0;
  if (window_count_ > 0) {
    // From the oldest checkpoint (at most ~5 s back) to the last delivery.
    const Checkpoint& oldest = window_[(window_next_ + kWindow - window_count_) % kWindow];
    if (last_delivery_ns_ > oldest.time_ns) {
      const double span = seconds(last_delivery_ns_ - oldest.time_ns);
      out.recent_samples_per_second = static_cast<double>(samples_ - oldest.samples) / span;
      out.recent_bytes_per_second = static_cast<double>(bytes_ - oldest.bytes) / span;
    }
  }
  out.gpu = query_gpu(0);
  if (cpu_at_start_) {
    if (const std::optional<CpuTimes> now = read_cpu_times()) {
      if (now->total > cpu_at_start_->total) {
        // Differences as signed: the kernel's idle and iowait counters may step backwards.
        auto delta = [](std::uint64_t later, std::uint64_t earlier) {
          return later > earlier ? static_cast<double>(later - earlier) : 0.0;
        };
        const double total = delta(now->total, cpu_at_start_->total);
        const double idle = delta(now->idle, cpu_at_start_->idle);
        const double iowait = delta(now->iowait, cpu_at_start_->iowait);
        out.cpu_busy_fraction = std::clamp((total - idle - iowait) / total, 0.0, 1.0);
        out.iowait_fraction = std::clamp(iowait / total, 0.0, 1.0);
      }
    }
  }
}

}  // namespace stoker::detail
