// stoker-tune's table of results: one row per setting measured, the recommended and the best
// marked, a failed setting with its error.
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "data/format.hpp"
#include "tune/tune.hpp"

namespace stoker::tune {

using stoker::detail::format_bytes;
using stoker::detail::format_count;

std::string table(const std::vector<Result>& results, const std::optional<Recommendation>& rec) {
  std::string t = fmt::format("{:>7} {:>6} {:>8} {:>11} {:>9} {:>10} {:>5} {:>5}  {:<14} {}\n",
                              "workers", "batch", "prefetch", "samples/s", "MB/s", "peak mem",
                              "wait", "CPU", "verdict", "note");
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    std::string note;
    if (rec && i == rec->index) note = "<- recommended";
    if (rec && i == rec->best && i != rec->index) note = "best";
    if (!r.note.empty()) note += (note.empty() ? "" : "; ") + r.note;
    if (!r.ok) {
      t += fmt::format("{:>7} {:>6} {:>8} {:>11} {}\n", r.setting.workers, r.setting.batch,
                       prefetch_text(r.setting.prefetch), "failed", r.error);
      continue;
    }
    t += fmt::format("{:>7} {:>6} {:>8} {:>11} {:>9.1f} {:>10} {:>4.0f}% {:>5}  {:<14} {}\n",
                     r.setting.workers, r.setting.batch, prefetch_text(r.setting.prefetch),
                     format_count(r.samples_per_s), r.bytes_per_s / 1e6,
                     format_bytes(r.peak_memory), r.wait_fraction * 100,
                     r.cpu_busy ? fmt::format("{:.0f}%", *r.cpu_busy * 100) : "?", r.verdict, note);
  }
  return t;
}

}  // namespace stoker::tune
