// stoker-tune's measurement of one setting, a template over the dataset (DataLoader takes the
// dataset's type): a warm-up until every slot has been filled once, then a timed window (or
// timed epochs) for samples/s, the consumer's waits, the machine's CPU and swap, and the
// library's diagnosis over the window; and the process tree's peak memory over the whole run,
// warm-up included, from a sampling thread (os/proc's TreeMemorySampler). Used by main.cpp
// only.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "data/format.hpp"
#include "os/proc.hpp"
#include "tune/tune.hpp"

namespace stoker::tune {

using stoker::detail::format_bytes;
using stoker::detail::format_count;

// Adds `work` of CPU time to each sample, like an augmentation would.
template <class D>
struct WithWork {
  D inner;
  std::chrono::nanoseconds work{0};
  std::size_t size() const { return static_cast<std::size_t>(inner.size()); }
  stoker::Sample get(std::size_t i) {
    if (work.count() > 0) {
      const Clock::time_point until = Clock::now() + work;
      while (Clock::now() < until) {
      }
    }
    return inner.get(i);
  }
};

template <class D>
class Tuner {
 public:
  Tuner(D dataset, const Args& args, const stoker::SystemInfo& system)
      : dataset_(std::move(dataset)), args_(args), system_(system) {}

  Result measure(Setting s) {
    Result r;
    r.setting = s;
    const std::string label =
        fmt::format("stoker-tune: num_workers={} batch_size={}", s.workers, s.batch);
    try {
      run(s, r, label);
    } catch (const std::exception& e) {
      r.ok = false;
      r.error = e.what();
    }
    progress_.clear();
    if (!progress_.enabled()) {
      if (r.ok) {
        std::fprintf(stderr, "%s: %s samples/s, peak %s, waited %.0f%%\n", label.c_str(),
                     format_count(r.samples_per_s).c_str(), format_bytes(r.peak_memory).c_str(),
                     r.wait_fraction * 100);
      } else {
        std::fprintf(stderr, "%s: failed: %s\n", label.c_str(), r.error.c_str());
      }
    }
    return r;
  }

 private:
  void run(Setting s, Result& r, const std::string& label) {
    // From before the loader exists until after the timed window, while the loader still lives.
    detail::TreeMemorySampler memory{detail::TreeMemorySampler::Options{}};
    stoker::LoaderOptions opt;
    opt.batch_size = s.batch;
    opt.num_workers = s.workers;
    opt.prefetch_factor = s.prefetch;
    // Workers stay across epochs, so a short dataset's epochs do not refork them.
    opt.persistent_workers = s.workers > 0;
    stoker::DataLoader loader(
        WithWork<D>{dataset_, std::chrono::microseconds(args_.simulate_work_us)}, opt);

    const std::int64_t swap_before = swap_used_bytes();
    const bool by_epochs = args_.epochs > 0;
    // Warm-up ends once the time has passed and every slot of the ring has been filled once
    // (the workers forked, their slots' pages faulted in).
    const std::uint64_t warm_batches = std::max<std::uint64_t>(
        1,
        static_cast<std::uint64_t>(s.workers) *
            (s.prefetch == stoker::kAdaptivePrefetch ? stoker::kMinAdaptivePrefetch : s.prefetch));
    const Clock::time_point start = Clock::now();
    bool timed = false;
    bool done = false;
    Clock::time_point t0{};
    Clock::time_point t1{};
    CpuTimes cpu0;
    CpuTimes cpu1;
    double wait_done = 0;  // waits of the finished epochs
    double wait0 = 0;
    double wait1 = 0;
    std::uint64_t seen = 0;
    int timed_epochs = 0;
    stoker::LoaderStats last;

    for (std::uint64_t epoch = 0; !done; ++epoch) {
      loader.set_epoch(epoch);
      std::uint64_t in_epoch = 0;
      for (const stoker::Batch& batch : loader) {
        const Clock::time_point now = Clock::now();
        ++in_epoch;
        if (!timed) {
          ++seen;
          progress_.show(label + " warm-up",
                         args_.warmup > 0
                             ? std::chrono::duration<double>(now - start).count() / args_.warmup
                             : 1.0);
          if (!by_epochs && seen >= warm_batches &&
              now - start >= std::chrono::duration<double>(args_.warmup)) {
            timed = true;
            t0 = now;
            cpu0 = cpu_times();
            wait0 = wait_done + loader.stats().wait_seconds;
          }
          continue;
        }
        ++r.batches;
        r.samples += batch.size();
        r.bytes_per_s += static_cast<double>(batch.nbytes());  // bytes, until divided below
        const double elapsed = std::chrono::duration<double>(now - t0).count();
        if (by_epochs) {
          const double per_epoch = static_cast<double>(loader.size());
          progress_.show(label,
                         (timed_epochs + static_cast<double>(in_epoch) / per_epoch) / args_.epochs);
        } else {
          progress_.show(label, elapsed / args_.seconds);
          if (elapsed >= args_.seconds) {
            t1 = now;
            cpu1 = cpu_times();
            last = loader.stats();
            wait1 = wait_done + last.wait_seconds;
            done = true;
            break;
          }
        }
      }
      if (done) break;
      const stoker::LoaderStats after = loader.stats();
      wait_done += after.wait_seconds;
      if (in_epoch == 0) {
        throw std::runtime_error("the dataset gave no batch (is it empty?)");
      }
      if (!by_epochs) continue;
      if (!timed) {  // the warm-up epoch is over
        timed = true;
        t0 = Clock::now();
        cpu0 = cpu_times();
        wait0 = wait_done;
        continue;
      }
      if (++timed_epochs == args_.epochs) {
        t1 = Clock::now();
        cpu1 = cpu_times();
        wait1 = wait_done;
        last = after;
        done = true;
      }
    }
    const detail::TreeMemoryReport m = memory.stop();
    r.peak_memory = m.peak.total_bytes();
    r.ring_bytes = m.peak.ring_bytes;
    r.swap_rise = swap_used_bytes() - swap_before;
    r.seconds = std::chrono::duration<double>(t1 - t0).count();
    if (r.seconds <= 0 || r.batches == 0) {
      throw std::runtime_error("no batch arrived in the timed window; raise --seconds");
    }
    r.samples_per_s = static_cast<double>(r.samples) / r.seconds;
    r.bytes_per_s /= r.seconds;
    r.wait_fraction = std::clamp((wait1 - wait0) / r.seconds, 0.0, 1.0);
    if (cpu1.total > cpu0.total) {
      const auto ticks = static_cast<double>(cpu1.total - cpu0.total);
      r.cpu_busy = static_cast<double>(cpu1.busy - cpu0.busy) / ticks;
      r.iowait = static_cast<double>(cpu1.iowait - cpu0.iowait) / ticks;
    }

    // The loader's own figures, narrowed to the timed window where the tool measured it.
    stoker::LoaderStats window = last;
    // A loader that does not report per-worker figures still has its workers: count them, with
    // their busy time unknown.
    for (std::size_t w = window.workers.size(); w < static_cast<std::size_t>(s.workers); ++w) {
      stoker::WorkerStats unknown;
      unknown.worker_id = w;
      window.workers.push_back(unknown);
    }
    window.batches = r.batches;
    window.samples = r.samples;
    window.bytes = static_cast<std::uint64_t>(r.bytes_per_s * r.seconds);
    window.epoch_seconds = r.seconds;
    window.wait_seconds = r.wait_fraction * r.seconds;
    // The CPUs over exactly the timed window (the loader's figures run from begin(), warm-up
    // included).
    if (r.cpu_busy) window.cpu_busy_fraction = r.cpu_busy;
    if (r.iowait) window.iowait_fraction = r.iowait;
    const stoker::Diagnosis d = stoker::diagnose(window, system_);
    r.verdict = std::string(stoker::to_string(d.verdict));
    r.diagnosis = d.summary;
    r.ok = true;
  }

  D dataset_;
  const Args& args_;
  const stoker::SystemInfo& system_;
  Progress progress_;
};

}  // namespace stoker::tune
