// stoker-tune's two searches over (num_workers, batch_size): the grid of every listed pair, and
// the progressive search of docs/tuning.md (add workers while each step gains kWithin, stop on a
// fall or rising swap; then twice and half the batch size at the chosen count).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "data/format.hpp"
#include "tune/tune.hpp"

namespace stoker::tune {
namespace {

using stoker::detail::format_bytes;

// A setting whose swap use rose is noted and ends the search.
bool swapped(Result& r) {
  if (r.swap_rise <= kSwapRiseBytes) return false;
  r.note = fmt::format("swap in use rose by {}: stop",
                       format_bytes(static_cast<std::size_t>(r.swap_rise)));
  return true;
}

}  // namespace

std::vector<Result> run_grid(const Measure& measure, const Args& a, std::size_t cores,
                             std::size_t default_batch) {
  std::vector<int> workers = a.workers;
  if (workers.empty()) {
    workers.push_back(0);
    for (std::size_t w = 1; w <= 2 * cores; w *= 2) workers.push_back(static_cast<int>(w));
  }
  std::vector<std::size_t> batches = a.batches;
  if (batches.empty()) {
    if (default_batch > 1) batches.push_back(default_batch / 2);
    batches.push_back(default_batch);
    batches.push_back(default_batch * 2);
  }
  std::vector<Result> results;
  for (const std::size_t p : a.prefetches) {
    for (const std::size_t b : batches) {
      for (const int w : workers) results.push_back(measure({w, b, p}));
    }
  }
  return results;
}

std::vector<Result> run_progressive(const Measure& measure, const Args& a, std::size_t cores,
                                    std::size_t default_batch) {
  std::vector<Result> results;
  const std::size_t batch0 = a.batches.empty() ? default_batch : a.batches.front();
  const std::size_t prefetch0 = a.prefetches.front();
  const int start = std::max(1, static_cast<int>(std::lround(static_cast<double>(cores) / 4.0)));
  const int step = std::max(1, static_cast<int>(cores / 8));
  const int most = a.max_workers > 0 ? a.max_workers
                                     : std::min(stoker::kMaxWorkers, static_cast<int>(2 * cores));

  // Workers: add until the gain is under 5%, throughput falls, or swap use rises.
  std::optional<std::size_t> best;  // index into results
  for (int w = std::min(start, most); w <= most; w += step) {
    results.push_back(measure({w, batch0, prefetch0}));
    Result& r = results.back();
    if (!r.ok) {
      r.note = "failed: stop";
      break;
    }
    if (swapped(r)) break;
    if (best) {
      const double gain = r.samples_per_s / results[*best].samples_per_s - 1.0;
      if (gain < 0) {
        r.note = fmt::format("{:.0f}% slower: stop", -gain * 100);
        break;
      }
      if (gain < kWithin) {
        r.note = fmt::format("gain {:.1f}% < 5%: stop", gain * 100);
        best = results.size() - 1;
        break;
      }
      r.note = fmt::format("+{:.0f}%", gain * 100);
    }
    best = results.size() - 1;
  }
  if (!best) return results;

  // Batch size at the chosen worker count: twice (again while it gains 5%), then half.
  const int chosen = results[*best].setting.workers;
  const std::size_t base = *best;
  for (const bool up : {true, false}) {
    std::size_t prev = base;
    std::size_t b = batch0;
    for (int tries = 0; tries < 2; ++tries) {
      b = up ? b * 2 : b / 2;
      if (b < 1 || b > stoker::kMaxBatchSize) break;
      results.push_back(measure({chosen, b, prefetch0}));
      Result& r = results.back();
      if (!r.ok) {
        r.note = "failed: stop";
        break;
      }
      if (swapped(r)) break;
      const double gain = r.samples_per_s / results[prev].samples_per_s - 1.0;
      r.note = fmt::format("{:+.0f}% vs batch_size={}", gain * 100, results[prev].setting.batch);
      if (gain < kWithin) break;
      prev = results.size() - 1;
    }
  }

  // The other prefetch_factor values at the fastest setting measured so far.
  std::size_t fastest = base;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok && results[i].samples_per_s > results[fastest].samples_per_s) fastest = i;
  }
  const Setting at = results[fastest].setting;
  for (std::size_t i = 1; i < a.prefetches.size(); ++i) {
    results.push_back(measure({at.workers, at.batch, a.prefetches[i]}));
    Result& r = results.back();
    if (!r.ok) {
      r.note = "failed";
      continue;
    }
    const double gain = r.samples_per_s / results[fastest].samples_per_s - 1.0;
    r.note = fmt::format("{:+.0f}% vs prefetch_factor={}", gain * 100, prefetch_text(at.prefetch));
  }
  return results;
}

std::string prefetch_text(std::size_t prefetch) {
  return prefetch == stoker::kAdaptivePrefetch ? std::string("adaptive") : std::to_string(prefetch);
}

}  // namespace stoker::tune
