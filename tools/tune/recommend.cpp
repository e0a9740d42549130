// stoker-tune's recommendation: of the settings within kWithin of the best measured, the one
// with the fewest workers, then the least memory, and the sentence that says why.
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "data/format.hpp"
#include "tune/tune.hpp"

namespace stoker::tune {

using stoker::detail::format_bytes;
using stoker::detail::format_count;

std::optional<Recommendation> recommend(const std::vector<Result>& results) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok && (!best || results[i].samples_per_s > results[*best].samples_per_s)) {
      best = i;
    }
  }
  if (!best) return std::nullopt;
  const double floor = results[*best].samples_per_s * (1.0 - kWithin);
  std::size_t pick = *best;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const Result& p = results[pick];
    if (!r.ok || r.samples_per_s < floor) continue;
    if (r.setting.workers < p.setting.workers ||
        (r.setting.workers == p.setting.workers && r.peak_memory < p.peak_memory)) {
      pick = i;
    }
  }
  Recommendation rec{pick, *best, {}};
  const Result& p = results[pick];
  const Result& b = results[*best];
  const std::string head =
      fmt::format("num_workers={}, batch_size={}: {} samples/s", p.setting.workers, p.setting.batch,
                  format_count(p.samples_per_s));
  if (pick == *best) {
    rec.reason = head + ", the best measured";
  } else {
    const char* why = p.setting.workers < b.setting.workers ? "fewer workers" : "less memory";
    rec.reason = fmt::format(
        "{}, within 5% of the best ({} samples/s at num_workers={}, batch_size={}) with {} "
        "({} against {} peak)",
        head, format_count(b.samples_per_s), b.setting.workers, b.setting.batch, why,
        format_bytes(p.peak_memory), format_bytes(b.peak_memory));
  }
  return rec;
}

}  // namespace stoker::tune
