// LoaderCore::Impl, the first batch of an epoch: joining a batch 0 that was split across the
// workers (dispatch.cpp issues the parts), and the first-sample gate, which lets each worker's
// first sample measure the samples for the memory check, so a fresh loader loads no sample
// twice (no probe process beforehand) and a refusal costs at most one get() per worker.

#include "loader/loader_impl.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "data/spin.hpp"
#include "ipc/shared_region.hpp"
#include "os/assert.hpp"
#include "os/posix.hpp"

namespace stoker::detail {
namespace {

std::string trailing_shape(const Tensor& t) {
  std::vector<std::int64_t> dims(t.shape().begin() + (t.dim() > 0 ? 1 : 0), t.shape().end());
  return Shape(dims).to_string();
}

}  // namespace

std::size_t LoaderCore::Impl::join_split_first(const std::vector<std::size_t>& parts) {
  EpochPlan& plan = *current;
  const std::span<const std::size_t> indices = plan.batch(0);
  auto free_others = [&](std::size_t keep) {
    for (const std::size_t s : parts) {
      if (s != keep) slots.set_phase(s, Phase::kReady, Phase::kFree);
    }
  };
  // A part that failed is the batch's error: deliver() throws it.
  for (const std::size_t s : parts) {
    if (ring().header(s).status != SlotStatus::kOk) {
      free_others(s);
      return s;
    }
  }
  const std::size_t host = parts[0];
  const SlotHeader& host_header = ring().header(host);
  std::vector<Field> into = read_fields(ring(), host, nullptr);
  // The host's pages exist (its worker backed its whole fields): map them here before writing.
  memory->ensure(host, host_header.descriptor_offset);
  for (std::size_t j = 1; j < parts.size(); ++j) {
    const std::size_t s = parts[j];
    const std::size_t begin = plan.part_begin(j);
    const std::size_t rows = plan.part_begin(j + 1) - begin;
    const std::vector<Field> from = read_fields(ring(), s, nullptr);
    for (std::size_t f = 0; f < std::max(into.size(), from.size()); ++f) {
      const Field* want = f < into.size() ? &into[f] : nullptr;
      const Field* got = f < from.size() ? &from[f] : nullptr;
      if (want == nullptr || got == nullptr || want->name != got->name ||
          want->tensor.dtype() != got->tensor.dtype() ||
          trailing_shape(want->tensor) != trailing_shape(got->tensor) ||
          got->tensor.shape()[0] != static_cast<std::int64_t>(rows)) {
        WorkerException::Details details;
        details.type_name = "stoker::CollateError";
        details.where = "collate";
        details.batch = 0;
        details.worker_id = pool.channel(ring().channel_of(s)).position;
        details.pid = pool.channel(ring().channel_of(s)).process.pid();
        const std::string name = want != nullptr ? want->name : got->name;
        details.message = fmt::format(
            "collate: field '{}' of sample {} is {} {} but sample {} (the batch's first) has "
            "{} {}; every sample of a batch must have the same fields, dtypes and shapes",
            name, indices[begin], got != nullptr ? dtype_name(got->tensor.dtype()) : "missing",
            got != nullptr ? trailing_shape(got->tensor) : "", indices[0],
            want != nullptr ? dtype_name(want->tensor.dtype()) : "no such field",
            want != nullptr ? trailing_shape(want->tensor) : "");
        free_others(SIZE_MAX);
        plan.mark_delivered(0);
        throw WorkerException(std::move(details));
      }
      const std::size_t row_bytes = want->tensor.nbytes() / indices.size();
      if (got->tensor.nbytes() > 0) {
        std::memcpy(const_cast<std::byte*>(want->tensor.raw_data()) + begin * row_bytes,
                    got->tensor.raw_data(), got->tensor.nbytes());
      }
    }
    slots.set_phase(s, Phase::kReady, Phase::kFree);
  }
  // Every row is in: the host now carries the whole batch.
  ring().header(host).num_kept = indices.size();
  slots.make_whole(host);
  return host;
}

void LoaderCore::Impl::take_first_report(std::size_t c) noexcept {
  Channel& channel = ring().channel(c);
  // Acquire: pairs with the worker's release store after it wrote the figures.
  if (channel.first_reported.load(std::memory_order_acquire) == 1) {
    first_samples.bytes = std::max(first_samples.bytes.value_or(0),
                                   static_cast<std::size_t>(channel.first_sample_bytes));
    first_samples.fresh = true;
    gated[c] = 0;
  } else if (pool.channel(c).outstanding == 0 || !pool.channel(c).running()) {
    gated[c] = 0;  // its task ended without a report (the first get() threw), or it died
  }
}

void LoaderCore::Impl::open_first_gates() noexcept {
  for (std::size_t c = 0; c < pool.num_channels(); ++c) {
    Channel& channel = ring().channel(c);
    // Release: the worker's acquire load sees it; the futex wake ends its sleep at once.
    channel.first_gate.store(1, std::memory_order_release);
    (void)posix::futex_wake_all(channel.first_gate);
  }
}

bool LoaderCore::Impl::first_report_waiting() const noexcept {
  for (std::size_t c = 0; c < gated.size(); ++c) {
    if (gated[c] != 0 && ring().channel(c).first_reported.load(std::memory_order_relaxed) == 1) {
      return true;
    }
  }
  return false;
}

void LoaderCore::Impl::check_late_first_samples() {
  for (std::size_t c = 0; c < gated.size(); ++c) {
    if (gated[c] != 0) take_first_report(c);
  }
  check_reported_first_samples();
  take_private_reports(true);
}

bool LoaderCore::Impl::take_private_reports(bool check) {
  std::optional<std::size_t> base;
  for (std::size_t c = 0; c < private_pending.size(); ++c) {
    if (private_pending[c] == 0) continue;
    Channel& channel = ring().channel(c);
    // Acquire: pairs with the worker's release store after it wrote the figure.
    if (channel.private_reported.load(std::memory_order_acquire) != 1) continue;
    private_pending[c] = 0;
    if (channel.first_private_bytes > 0) {
      base = std::max(base.value_or(0), static_cast<std::size_t>(channel.first_private_bytes));
    }
  }
  if (!base) return false;
  first_samples.base = std::max(first_samples.base.value_or(0), *base);
  if (!check) {
    preflight.note_worker_base(*first_samples.base);
    return true;
  }
  try {
    preflight.check_worker_base(*first_samples.base);
  } catch (...) {
    fail_epoch();
    throw;
  }
  depth.set_limit(preflight.depth_limit());
  return true;
}

bool LoaderCore::Impl::check_reported_first_samples() {
  if (!first_samples.fresh) return false;
  first_samples.fresh = false;
  try {
    preflight.check_first_batch(first_samples.bytes, first_samples.base);
  } catch (...) {
    fail_epoch();
    throw;
  }
  depth.set_limit(preflight.depth_limit());  // the check has chosen it
  return true;
}

bool LoaderCore::Impl::issue_first_claimable(EpochPlan& plan, std::size_t c, std::size_t s,
                                             std::uint64_t fork_ns) {
  if (!can_split_first(plan)) return false;
  const std::size_t rows = plan.batch(0).size();
  plan.first_parts = 1;
  plan.first_bounds = {0, rows};
  plan.first_claimable = true;
  first_samples = FirstSamples{};
  first_gate_opened_ns = 0;
  first_rate_from_ns = 0;
  first_rate_from_rows = 0;
  send_task(c, s, plan, 0, 0);  // gated: the memory check waits for figures
  ++plan.issued;                // the other parts, if any, come from split_first_rest()
  // A fork's time: a worker that has not loaded its first sample by then would not finish
  // the batch before the split parts would, so the others are forked at once.
  const std::uint64_t deadline = now_ns() + fork_ns;
  Channel& channel = ring().channel(c);
  // Acquire: pairs with the worker's release store after it wrote the figures.
  auto reported = [&] { return channel.first_reported.load(std::memory_order_acquire) == 1; };
  while (!reported() && now_ns() < deadline) posix::yield_cpu();
  if (!reported()) return false;
  take_first_report(c);
  check_reported_first_samples();  // throws, after failing the epoch, when it does not fit
  open_first_gates();
  first_gate_opened_ns = now_ns();
  first_fork_ns = fork_ns;
  defer_forks_until_ns = first_gate_opened_ns + fork_ns / 2;  // then first_batch_wait_ns()
  back_upper_half(s, first_samples.bytes.value_or(0) * rows);
  return true;
}

void LoaderCore::Impl::back_upper_half(std::size_t s, std::size_t batch_bytes) noexcept {
  // A fresh slot's pages cost more to back than to fill (a few us a page: 8-10 ms for a
  // batch of 64 images of 150 KB on the project's machine), and the worker backs them with
  // its first row. Main has nothing else to do until the batch comes, so it backs the upper
  // half of the fields meanwhile, on the other CPU; the worker then only maps those pages. A
  // failure (memory exhausted) is left for the worker to report.
  if (batch_bytes < kBackInMainMin) return;
  const std::size_t capacity = ring().slot_bytes();
  const std::size_t fields = Ring::payload_start(current->batch(0).size());
  const std::size_t begin = round_up(fields + batch_bytes / 2, kPageSize);
  const std::size_t end = std::min(capacity, round_up(fields + batch_bytes, kPageSize));
  if (begin >= end) return;
  (void)SharedRegion::populate(ring().slot(s) + begin, end - begin);
}

std::optional<std::uint64_t> LoaderCore::Impl::first_batch_wait_ns(std::uint64_t now) {
  if (!current || !current->first_claimable || first_gate_opened_ns == 0 ||
      now <= first_gate_opened_ns) {
    return std::nullopt;
  }
  const std::optional<std::size_t> host = slots.issued_slot(current->id, 0);
  if (!host) return std::nullopt;
  const std::uint64_t fork = first_fork_ns;
  const std::uint64_t since = now - first_gate_opened_ns;
  const std::uint64_t begun =
      ring().header(*host).claim.load(std::memory_order_relaxed) & 0xffffffffU;
  // The rate is measured from the first time main sees row 1 begun, not from the gate: the
  // worker backs the batch's pages (SlotMemory::ensure; of a large batch, main backs the upper
  // half meanwhile and the worker maps those) between rows 0 and 1, a one-off cost (about 3 ms
  // for 9.6 MB here) that, taken as a row's time, made a fast batch look tens of times slower
  // than it was, and its rows went to a worker forked meanwhile, a fork later.
  if (begun >= 2 && first_rate_from_rows == 0) {
    first_rate_from_ns = now;
    first_rate_from_rows = begun;
  }
  if (begun <= first_rate_from_rows || first_rate_from_rows == 0) {
    // No rate yet: the worker may still be backing the batch's pages (a fresh slot's,
    // milliseconds for megabytes). Up to two forks' time from the gate, then the others anyway.
    if (since >= 2 * fork) return std::nullopt;
    return std::min(fork / 2, 2 * fork - since);
  }
  // At the rate since then, the row in progress included: a worker that stalls slows the rate
  // until the time left passes two forks, and the others are forked.
  const std::uint64_t rows = current->batch(0).size();
  const std::uint64_t per_row = (now - first_rate_from_ns) / (begun - first_rate_from_rows);
  const std::uint64_t left = (rows - std::min(rows, begun) + 1) * per_row;
  if (left >= 2 * fork) return std::nullopt;
  return std::max<std::uint64_t>(left, 100'000);
}

void LoaderCore::Impl::split_first_rest() {
  if (!current || !current->first_claimable) return;
  EpochPlan& plan = *current;
  plan.first_claimable = false;  // the bounds are fixed from here (a lost part 0 loads its own)
  const std::optional<std::size_t> host = slots.issued_slot(plan.id, 0);
  if (!host || slots[*host].part != 0) return;  // loaded already (or lost): it stays whole
  std::vector<std::size_t> helpers;             // channels of the other workers
  for (std::size_t p = 1; p < num_workers(); ++p) {
    const std::size_t c = pool.channel_of_worker(p);
    if (pool.channel(c).running() && !pool.channel(c).retiring && slot_for(c)) {
      helpers.push_back(c);
    }
  }
  if (helpers.empty()) return;
  const std::size_t rows = plan.batch(0).size();
  // Equal shares of the rows worker 0 has not begun, its own first (it is loading already).
  std::atomic<std::uint64_t>& claim = ring().header(*host).claim;
  std::uint64_t word = claim.load(std::memory_order_relaxed);
  std::size_t keep = rows;
  for (;;) {
    const std::size_t begun = word & 0xffffffffU;
    const std::size_t left = rows - begun;
    keep = begun + (left + helpers.size()) / (helpers.size() + 1);
    if (keep >= rows) return;  // one row or none left: not worth a part
    if (claim.compare_exchange_weak(word, (std::uint64_t{keep} << 32) | begun,
                                    std::memory_order_relaxed)) {
      break;
    }
  }
  const std::size_t rest = rows - keep;
  const std::size_t parts = std::min(helpers.size(), rest);
  plan.first_bounds = {0, keep};
  for (std::size_t j = 1; j <= parts; ++j) {
    plan.first_bounds.push_back(keep + j * (rest / parts) + std::min(j, rest % parts));
  }
  plan.first_parts = parts + 1;
  for (std::size_t j = 1; j <= parts; ++j) {
    send_task(helpers[j - 1], *slot_for(helpers[j - 1]), plan, 0, static_cast<std::uint32_t>(j));
  }
}

void LoaderCore::Impl::await_first_batch() {
  const Clock::time_point start = Clock::now();
  first_samples = FirstSamples{};
  for (;;) {
    issue();
    collect();
    bool pending = false;  // a worker may still report
    for (std::size_t c = 0; c < pool.num_channels(); ++c) {
      if (gated[c] != 0) take_first_report(c);
      pending = pending || gated[c] != 0;
    }
    if (check_reported_first_samples()) {
      open_first_gates();
      issue();  // the check passed: the workers go on past their first task
      return;
    }
    if (!pending) break;  // every first task ended without a report
    milliseconds limit{-1};
    if (options.timeout.count() > 0) {
      limit = std::chrono::ceil<milliseconds>(start + options.timeout - Clock::now());
      if (limit.count() <= 0) break;
    }
    if (spin_until([&] { return progress_possible(); }, kMainSpin)) continue;
    if (sleep_and_notify(limit)) break;  // a worker exited: the fetch will say why
  }
  preflight.check_first_batch(std::nullopt, std::nullopt);
  open_first_gates();
}

}  // namespace stoker::detail
