#include "stoker/memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "data/format.hpp"
#include "ipc/ring.hpp"
#include "os/proc.hpp"

namespace stoker {
namespace detail {

// A worker's own memory besides its samples when no probe measured it: the pages of the
// parent's heap, stack and libraries it writes to (copy-on-write), its SlotMemory record and
// its buffers. Measured on this project's machines with bench/memory_estimate (docs/memory.md).
constexpr std::size_t kWorkerBaseBytes = std::size_t{1} << 20;
// What a worker writes that the size probe, which only calls get(), does not: the serve loop's
// stack frames above get() and the collate, its SlotMemory record, the slot writer's and the
// collator's state. A few pages: 5-6 KiB measured with bench/memory_estimate (the tiny workload,
// where little else hides it); 16 KiB counted.
constexpr std::size_t kServeLoopBytes = std::size_t{16} << 10;
// A slot is backed in 64 KiB steps (SlotMemory); the batch's layout needs a few KiB.
constexpr std::size_t kSlotStep = std::size_t{64} << 10;
constexpr std::size_t kLayoutBytes = std::size_t{4} << 10;

// The main process's epoch plans (EpochPlan): 8 bytes per index and a byte per batch, and a
// batch sampler's offsets (8 bytes per batch). Persistent workers: three at once, the running
// epoch's, the next one's (planned ahead) and the one the workers were forked with, which they
// keep after the main process frees it; otherwise the running one, and a second when a sampler
// is asked for the next epoch ahead (size()). A batch sampler's lists (a vector per batch, 24
// bytes and a heap block header each) exist beside the plan while it is made.
std::size_t plan_bytes(const EstimateInputs& in) {
  const std::size_t n = in.dataset_size;
  if (n == 0) return 0;
  const std::size_t batches =
      (n + std::max<std::size_t>(in.batch_size, 1) - 1) / std::max<std::size_t>(in.batch_size, 1);
  // Each a heap block or two, which seldom start on a page: a page more each for that.
  const std::size_t one =
      detail::round_up(n * sizeof(std::size_t) + batches * (in.batch_sampler ? 9 : 1),
                       detail::kPageSize) +
      detail::kPageSize;
  const std::size_t plans = in.persistent_workers && in.num_workers > 0 ? 3
                            : in.sampler || in.batch_sampler            ? 2
                                                                        : 1;
  const std::size_t lists = in.batch_sampler ? n * sizeof(std::size_t) + batches * 40 : 0;
  return plans * one + lists;
}

}  // namespace detail

MemoryEstimate estimate_memory(const EstimateInputs& in) {
  MemoryEstimate e;
  e.num_workers = in.num_workers;
  e.batch_size = in.batch_size;
  e.bytes_per_sample = in.bytes_per_sample;
  e.batch_bytes = in.batch_size * in.bytes_per_sample;
  // The same geometry the loader's ring is built with (ipc/ring.hpp).
  const detail::RingGeometry geometry =
      detail::ring_geometry(in.num_workers, in.prefetch_factor, in.recycling, 0);
  e.num_slots = geometry.num_slots();
  e.slot_bytes = detail::round_up(
      detail::Ring::payload_start(in.batch_size) + e.batch_bytes + detail::kLayoutBytes,
      detail::kSlotStep);
  // Workers keep every slot of theirs filled. In-process loading (num_workers = 0) fills one
  // slot at a time: the iterator lets go of the previous batch before it loads the next, so a
  // second slot is used only by a consumer that keeps batches across iterations. Every slot's
  // header is backed when the ring is made, and the control block and channels come first.
  // An epoch of fewer batches than slots fills only as many, unless persistent workers load
  // the next epoch's into the others meanwhile (a sampler's epoch may be of any length).
  const std::size_t epoch_batches =
      in.dataset_size > 0 && !in.persistent_workers && !in.sampler && !in.batch_sampler
          ? (in.dataset_size + std::max<std::size_t>(in.batch_size, 1) - 1) /
                std::max<std::size_t>(in.batch_size, 1)
          : e.num_slots;
  const std::size_t filled = in.num_workers > 0 ? std::min(e.num_slots, epoch_batches) : 1;
  // A fresh iterator's batch 0 is split over the workers (dispatch.cpp): each worker but the
  // first writes its part into a slot of its own, which stays ready while the check lets the
  // workers go on, so a short epoch also backs those parts' pages in slots it leaves unfilled.
  const std::size_t parts = in.num_workers >= 2 && in.streaming && in.batch_size >= 2
                                ? std::min(in.num_workers, in.batch_size)
                                : 1;
  const std::size_t part_slots = std::min(parts - 1, e.num_slots - filled);
  const std::size_t part_rows = (in.batch_size + parts - 1) / parts;
  const std::size_t part_bytes =
      detail::round_up(detail::Ring::payload_start(part_rows) + part_rows * in.bytes_per_sample +
                           detail::kLayoutBytes,
                       detail::kPageSize);
  e.ring_bytes = detail::Ring::slots_offset(geometry.channels) + filled * e.slot_bytes +
                 part_slots * std::min(part_bytes, e.slot_bytes) +
                 (e.num_slots - filled - part_slots) *
                     detail::round_up(detail::kSlotHeaderBytes, detail::kPageSize);
  // The samples a loading process holds at once: one while streaming into the slot, the whole
  // batch when a user collate (or skipping) needs them all.
  const std::size_t held = (in.streaming ? 1 : in.batch_size) * in.bytes_per_sample;
  e.worker_base_bytes = in.worker_base_bytes.value_or(detail::kWorkerBaseBytes);
  e.worker_private_bytes =
      in.num_workers > 0 ? held + e.worker_base_bytes + detail::kServeLoopBytes : 0;
  // In-process loading runs the worker's code in the main process: the same samples and
  // buffers, there, without a forked process's start-up.
  const std::size_t startup = std::min(in.worker_startup_bytes.value_or(0), e.worker_base_bytes);
  e.worker_startup_bytes = startup;
  e.inline_bytes = in.num_workers == 0 ? held + e.worker_base_bytes - startup : 0;
  e.plan_bytes = detail::plan_bytes(in);
  // Its anonymous memory each page once (a worker counts only the pages it copies), without
  // its share of the ring, which ring_bytes counts: RssAnon, read at once, where PSS would
  // walk every page table (10-15 ms of a new loader's first batch in a torch program).
  if (const std::optional<std::uint64_t> anon = detail::read_own_anonymous_resident()) {
    e.main_bytes = *anon;
  } else if (const std::optional<detail::ProcessMemory> own = detail::read_process_memory(0)) {
    e.main_bytes = own->unreclaimable_pss_bytes;
  }
  e.pinned_bytes = in.pinned_bytes;
  e.cache_bytes = in.cache_bytes;
  e.download_bytes = std::max<std::size_t>(in.num_workers, 1) * in.download_bytes_per_process;
  e.loader_bytes = e.ring_bytes + in.num_workers * e.worker_private_bytes + e.inline_bytes +
                   e.plan_bytes + e.pinned_bytes + e.cache_bytes + e.download_bytes;
  e.total_bytes = e.loader_bytes + e.main_bytes;
  e.rule_of_thumb_bytes = (in.num_workers + 1) * e.batch_bytes;
  return e;
}

WorkerRecommendation recommend_num_workers(const SystemInfo& s, std::size_t per_worker_bytes,
                                           double memory_fraction, std::size_t local_world_size) {
  const std::size_t ranks = std::max<std::size_t>(local_world_size, 1);
  struct Bound {
    std::size_t workers;
    std::string reason;
  };
  std::vector<Bound> bounds;
  const bool physical = s.physical_cores.known();
  const std::size_t cores = physical ? *s.physical_cores.value : s.logical_cpus.value.value_or(2);
  const std::size_t share = std::max<std::size_t>(cores / ranks, 1);
  const std::string ranks_note =
      ranks > 1 ? fmt::format(", shared by {} ranks on this machine", ranks) : std::string();
  if (s.network_filesystem.value.value_or(false)) {
    // Reading over the network waits more than it computes: more workers than cores pay off.
    bounds.push_back(
        {2 * share, fmt::format("twice the {} {} cores{} (data on a network "
                                "filesystem: workers mostly wait)",
                                cores, physical ? "physical" : "logical", ranks_note)});
  } else {
    bounds.push_back({std::max<std::size_t>(share, 2) - 1,
                      fmt::format("{} {} cores{}, minus one for the training loop", cores,
                                  physical ? "physical" : "logical", ranks_note)});
  }
  if (s.cpu_quota.value) {
    const double per_rank = *s.cpu_quota.value / static_cast<double>(ranks);
    bounds.push_back(
        {std::max<std::size_t>(1, static_cast<std::size_t>(std::floor(per_rank))),
         fmt::format("a CPU quota of {:.1f} CPUs ({})", *s.cpu_quota.value, s.cpu_quota.source)});
  }
  if (const auto usable = s.usable_memory(); usable && per_worker_bytes > 0) {
    const double allowed =
        static_cast<double>(*usable) * memory_fraction / static_cast<double>(ranks);
    bounds.push_back(
        {std::max<std::size_t>(
             1, static_cast<std::size_t>(allowed / static_cast<double>(per_worker_bytes))),
         fmt::format("memory: {:.0f}% of {} usable, at {} per worker", memory_fraction * 100,
                     detail::format_bytes(*usable), detail::format_bytes(per_worker_bytes))});
  }
  if (s.rotational.value.value_or(false)) {
    bounds.push_back({4,
                      "the data is on a rotational disk, where more than 4 readers seek "
                      "more than they read"});
  }
  const Bound& tightest =
      *std::min_element(bounds.begin(), bounds.end(),
                        [](const Bound& a, const Bound& b) { return a.workers < b.workers; });
  return {tightest.workers, tightest.reason};
}

std::string to_string(const MemoryEstimate& e) {
  using detail::format_bytes;
  std::string out =
      fmt::format("memory estimate: {} workers, batches of {} x {} = {}\n", e.num_workers,
                  e.batch_size, format_bytes(e.bytes_per_sample), format_bytes(e.batch_bytes));
  const auto row = [&](std::string_view what, std::string_view how, std::size_t bytes) {
    out += fmt::format("  {:<22}{:<24}{:>12}\n", what, how, format_bytes(bytes));
  };
  row("shared ring", fmt::format("{} slots x {}", e.num_slots, format_bytes(e.slot_bytes)),
      e.ring_bytes);
  row("workers",
      fmt::format("{} x {} ({} base)", e.num_workers, format_bytes(e.worker_private_bytes),
                  format_bytes(e.worker_base_bytes)),
      e.num_workers * e.worker_private_bytes);
  if (e.inline_bytes > 0) row("in-process loading", "", e.inline_bytes);
  row("epoch plans", "", e.plan_bytes);
  row("pinned staging", "", e.pinned_bytes);
  row("sample cache", "", e.cache_bytes);
  if (e.download_bytes > 0) row("download buffers", "", e.download_bytes);
  row("loader", "", e.loader_bytes);
  row("main process (now)", "", e.main_bytes);
  row("total", "", e.total_bytes);
  row("rule of thumb", "(workers + 1) x batch", e.rule_of_thumb_bytes);
  return out;
}

}  // namespace stoker
