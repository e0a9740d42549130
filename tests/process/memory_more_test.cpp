// The memory estimate and the pre-flight check, continued: a CachedDataset's budget is part of
// the estimate, and a check against memory_fraction of the machine's usable memory names the
// fraction, where the limit came from (MemAvailable or the memory cgroup) and the need.
#include <catch2/catch.hpp>

#include "support/clean_state.hpp"
#include "support/datasets.hpp"

using namespace stoker;

TEST_CASE("memory_estimate().cache_bytes is the CachedDataset's budget", "[memory][cache]") {
  const std::size_t budget = GENERATE(std::size_t{3} << 20, std::size_t{1'234'567});
  CAPTURE(budget);
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.num_workers = 2;
  opt.sample_bytes = 4096;  // the same bytes per sample for both loaders
  DataLoader cached(CachedDataset<test::IndexDataset>(test::IndexDataset{100, {}}, budget), opt);
  DataLoader plain(test::IndexDataset{100, {}}, opt);
  const MemoryEstimate with_cache = cached.memory_estimate();
  const MemoryEstimate without = plain.memory_estimate();
  REQUIRE(with_cache.cache_bytes == budget);
  REQUIRE(without.cache_bytes == 0);
  // The budget counts once in the loader's peak, beside the same ring and workers.
  REQUIRE(with_cache.ring_bytes == without.ring_bytes);
  REQUIRE(with_cache.loader_bytes == without.loader_bytes + budget);

  // Measured rather than given, the cache's own samples are not mistaken for the budget.
  opt.sample_bytes = 0;
  DataLoader measured(CachedDataset<test::IndexDataset>(test::IndexDataset{100, {}}, budget), opt);
  REQUIRE(measured.memory_estimate().cache_bytes == budget);
}

namespace {

// The pre-flight check's refusal of a loader allowed `fraction` of the usable memory. With
// sample_bytes given, nothing is forked, not even the size probe.
struct Refusal {
  std::string message;
  std::uint64_t allowed = 0;
};

Refusal refusal(double fraction) {
  LoaderOptions opt;
  opt.batch_size = 16;
  opt.num_workers = 2;
  opt.check_memory = true;
  opt.memory_fraction = fraction;
  opt.sample_bytes = 64;
  DataLoader loader(test::IndexDataset{100, {}}, opt);
  Refusal out;
  try {
    auto it = loader.begin();
    FAIL("no MemoryBudgetError with memory_fraction = " << fraction);
  } catch (const MemoryBudgetError& e) {
    out.message = e.what();
    out.allowed = e.allowed_bytes();
  }
  REQUIRE(test::child_pids().empty());  // refused before forking a worker
  return out;
}

}  // namespace

TEST_CASE("a loader over memory_fraction of usable memory names the fraction and its source",
          "[memory]") {
  const SystemInfo system = probe_system();
  const std::optional<std::uint64_t> usable = system.usable_memory();
  if (!usable) {
    WARN("neither MemAvailable nor a cgroup limit is readable here: nothing to check against");
    return;
  }
  const test::ProcessState baseline = test::process_state();
  const auto [message, allowed] = refusal(1e-6);  // a few KiB of some GiB: nothing fits
  INFO(message);
  // The cgroup is named when what its limit leaves is the smaller figure.
  const bool cgroup = system.cgroup_limit.known() &&
                      (!system.mem_available.known() ||
                       *system.cgroup_limit.value - system.cgroup_usage.value.value_or(0) <
                           *system.mem_available.value);
  CAPTURE(cgroup, system.cgroup_limit.source, *usable, allowed);
  REQUIRE_THAT(message, Catch::Contains("not enough memory") && Catch::Contains("needs about") &&
                            Catch::Contains("(LoaderOptions::memory_fraction)") &&
                            Catch::Contains("check_memory = false"));
  if (cgroup) {
    REQUIRE_THAT(message, Catch::Contains("under the memory cgroup's limit (" +
                                          system.cgroup_limit.source + ")"));
  } else {
    REQUIRE_THAT(message, Catch::Contains("free by MemAvailable"));
  }
  // The limit is the fraction of the usable memory (which moves a little between probes).
  REQUIRE(allowed <= static_cast<std::uint64_t>(static_cast<double>(*usable) * 2e-6) + 1);
  STOKER_REQUIRE_CLEAN(baseline);
}

// When nothing fits, the message shows the fraction as given (1e-6 once printed as "0%") and
// says so in a sentence of its own (the advice once read "... free memory first would fit.").
TEST_CASE("when nothing fits, the message shows the fraction given and reads as a sentence",
          "[memory]") {
  if (!probe_system().usable_memory()) {
    WARN("no usable-memory figure on this machine: nothing to check");
    return;
  }
  const std::string message = refusal(1e-6).message;
  INFO(message);
  REQUIRE_THAT(message, Catch::Contains(": 0.0001% (LoaderOptions::memory_fraction)"));
  REQUIRE_THAT(message, Catch::Contains("No smaller num_workers or batch_size would fit either"));
  REQUIRE_THAT(message, !Catch::Contains("would fit either: free memory or raise the limit first. "
                                         "would fit"));
}

namespace {

// get() keeps a 6 MiB buffer per process, filled on first use: memory a worker adds besides
// its samples, which the probe process must see.
struct HeavyWorker {
  std::size_t size() const { return 32; }
  Sample get(std::size_t i) const {
    static std::vector<char> scratch;
    if (scratch.empty()) scratch.assign(std::size_t{6} << 20, 'x');
    Sample s;
    s.set("index", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i) + scratch[i]));
    return s;
  }
};

}  // namespace

TEST_CASE("the per-worker base is measured in the probe process", "[memory]") {
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  SECTION("a worker that keeps 6 MiB of its own counts it") {
    DataLoader loader(HeavyWorker{}, opt);
    const MemoryEstimate e = loader.memory_estimate();
    CAPTURE(e.worker_base_bytes);
    REQUIRE(e.worker_base_bytes >= std::size_t{6} << 20);
    REQUIRE(e.worker_base_bytes < std::size_t{64} << 20);
    REQUIRE(e.worker_private_bytes == e.worker_base_bytes + e.bytes_per_sample);
  }
  SECTION("a light worker measures far less than that") {
    DataLoader loader(test::IndexDataset{32, {}}, opt);
    const MemoryEstimate e = loader.memory_estimate();
    CAPTURE(e.worker_base_bytes);
    REQUIRE(e.worker_base_bytes > 0);
    REQUIRE(e.worker_base_bytes < std::size_t{6} << 20);
  }
  SECTION("without a probe (sample_bytes given) the base is the 1 MiB default") {
    opt.sample_bytes = 64;
    DataLoader loader(HeavyWorker{}, opt);
    REQUIRE(loader.memory_estimate().worker_base_bytes == std::size_t{1} << 20);
  }
}
