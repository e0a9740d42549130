// stoker-tune's JSON report (--json): the command, the dataset, the machine, the settings of the
// search, every result and the recommendation; the keys tools/check_stoker_tune.py checks.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tune/tune.hpp"

namespace stoker::tune {
namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string json_number(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : "null"; }

template <class T>
std::string json_optional(const std::optional<T>& v) {
  return v ? fmt::format("{}", *v) : "null";
}

}  // namespace

std::string to_json(const Args& a, const Report& rep, const std::vector<Result>& results,
                    const std::optional<Recommendation>& rec) {
  std::string j = "{\n";
  j += fmt::format("  \"tool\": \"stoker-tune\",\n  \"command\": {},\n", json_string(a.command));
  j += fmt::format(
      "  \"dataset\": {{\"source\": {}, \"name\": {}, \"samples\": {}, \"bytes_per_sample\": "
      "{}}},\n",
      json_string(a.source_kind), json_string(a.source), rep.dataset_samples, rep.bytes_per_sample);
  const stoker::SystemInfo& s = *rep.system;
  j += fmt::format(
      "  \"system\": {{\"usable_cores\": {}, \"logical_cpus\": {}, \"physical_cores\": {}, "
      "\"cpu_quota\": {}, \"mem_available_bytes\": {}, \"cgroup_limit_bytes\": {}}},\n",
      rep.cores, json_optional(s.logical_cpus.value), json_optional(s.physical_cores.value),
      json_optional(s.cpu_quota.value), json_optional(s.mem_available.value),
      json_optional(s.cgroup_limit.value));
  j += fmt::format(
      "  \"settings\": {{\"strategy\": {}, \"seconds\": {}, \"warmup_seconds\": {}, "
      "\"epochs\": {}, \"prefetch_factors\": [{}], "
      "\"simulate_work_us\": {}, \"within\": {}}},\n",
      json_string(a.strategy), a.epochs > 0 ? "null" : json_number(a.seconds),
      a.epochs > 0 ? "null" : json_number(a.warmup),
      a.epochs > 0 ? std::to_string(a.epochs) : "null", fmt::join(a.prefetches, ", "),
      a.simulate_work_us, json_number(kWithin));
  j += "  \"results\": [\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    j += fmt::format(
        "    {{\"num_workers\": {}, \"batch_size\": {}, \"prefetch_factor\": {}, \"ok\": {}, "
        "\"samples_per_s\": {}, "
        "\"bytes_per_s\": {}, \"peak_tree_bytes\": {}, \"ring_resident_bytes\": {}, "
        "\"wait_fraction\": {}, "
        "\"cpu_busy_fraction\": {}, \"iowait_fraction\": {}, \"seconds\": {}, "
        "\"batches\": {}, \"samples\": {}, \"swap_rise_bytes\": {}, \"verdict\": {}, "
        "\"diagnosis\": {}, \"note\": {}, \"error\": {}}}{}\n",
        r.setting.workers, r.setting.batch, r.setting.prefetch, r.ok ? "true" : "false",
        json_number(r.samples_per_s), json_number(r.bytes_per_s), r.peak_memory, r.ring_bytes,
        json_number(r.wait_fraction), r.cpu_busy ? json_number(*r.cpu_busy) : "null",
        r.iowait ? json_number(*r.iowait) : "null", json_number(r.seconds), r.batches, r.samples,
        r.swap_rise, r.ok ? json_string(r.verdict) : "null",
        r.ok ? json_string(r.diagnosis) : "null", json_string(r.note),
        r.ok ? "null" : json_string(r.error), i + 1 < results.size() ? "," : "");
  }
  j += "  ],\n";
  if (rec) {
    const Result& p = results[rec->index];
    const Result& b = results[rec->best];
    j += fmt::format(
        "  \"recommendation\": {{\"num_workers\": {}, \"batch_size\": {}, \"prefetch_factor\": "
        "{}, \"samples_per_s\": {}, "
        "\"peak_tree_bytes\": {}, \"best_num_workers\": {}, \"best_batch_size\": {}, "
        "\"best_samples_per_s\": {}, \"ratio_to_best\": {}, \"reason\": {}, \"diagnosis\": "
        "{}}},\n",
        p.setting.workers, p.setting.batch, p.setting.prefetch, json_number(p.samples_per_s),
        p.peak_memory, b.setting.workers, b.setting.batch, json_number(b.samples_per_s),
        json_number(p.samples_per_s / b.samples_per_s), json_string(rec->reason),
        json_string(p.diagnosis));
  } else {
    j += "  \"recommendation\": null,\n";
  }
  j += fmt::format("  \"elapsed_s\": {}\n}}\n", json_number(rep.elapsed_s));
  return j;
}

}  // namespace stoker::tune
