// The pre-flight memory check: a loader whose estimate passes its limit fails before forking,
// with a message naming the limit, both numbers and settings that fit; with those settings
// it runs; a check against memory_fraction names the fraction, where the limit came from and
// the need. Also memory_estimate() (a CachedDataset's budget, the per-worker base measured in
// the probe), num_workers = kAuto and bind_workers.
#include <sched.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>

#include "support/clean_state.hpp"
#include "support/cpus.hpp"
#include "support/datasets.hpp"

using namespace stoker;

namespace {

// 150 KB a sample, like the image workload.
struct Images {
  std::size_t n = 256;
  std::size_t size() const { return n; }
  Sample get(std::size_t i) const {
    Sample s;
    s.set("image", Tensor::zeros(DType::kUInt8, {3, 224, 224}));
    s.set("label", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i % 10)));
    return s;
  }
};

}  // namespace

TEST_CASE("a loader that would not fit fails before forking, naming what would", "[memory]") {
  const test::ProcessState baseline = test::process_state();
  LoaderOptions opt;
  opt.batch_size = 64;
  opt.num_workers = 4;
  opt.memory_limit = 40ULL << 20;  // 40 MiB: 4 workers x 2 slots of 9.3 MiB do not fit
  // 10 batches an epoch, enough to fill the 8 slots (an epoch of fewer fills only as many).
  const Images images{640};
  std::string message;
  std::uint64_t allowed = 0;
  std::size_t needed = 0;
  std::optional<std::size_t> suggested_workers;
  std::optional<std::size_t> suggested_batch;
  {
    DataLoader loader(images, opt);
    try {
      auto it = loader.begin();
      FAIL("no MemoryBudgetError");
    } catch (const MemoryBudgetError& e) {
      message = e.what();
      allowed = e.allowed_bytes();
      needed = e.estimate().loader_bytes;
      suggested_workers = e.suggested_num_workers();
      suggested_batch = e.suggested_batch_size();
    }
    REQUIRE(test::child_pids().empty());  // nothing was forked
  }
  INFO(message);
  REQUIRE(allowed == 40ULL << 20);
  REQUIRE(needed > allowed);
  REQUIRE_THAT(message, Catch::Contains("not enough memory") &&
                            Catch::Contains("a ring of 8 slots") &&
                            Catch::Contains("4 workers x") &&
                            Catch::Contains("but may use 40.0 MiB: LoaderOptions::memory_limit") &&
                            Catch::Contains("check_memory = false"));
  // The suggested settings run.
  std::smatch m;
  REQUIRE(std::regex_search(message, m, std::regex("num_workers=(\\d+) \\(with batch_size=64\\)")));
  const int workers = std::stoi(m[1]);
  REQUIRE(workers < 4);
  REQUIRE(std::regex_search(message, m, std::regex("batch_size=(\\d+) \\(with num_workers=4\\)")));
  const int batch = std::stoi(m[1]);
  REQUIRE(batch < 64);
  // The same settings, as values.
  REQUIRE(suggested_workers == std::optional<std::size_t>(static_cast<std::size_t>(workers)));
  REQUIRE(suggested_batch == std::optional<std::size_t>(static_cast<std::size_t>(batch)));
  for (const auto& [w, b] : {std::pair<int, int>{workers, 64}, {4, batch}}) {
    LoaderOptions fit = opt;
    fit.num_workers = w;
    fit.batch_size = static_cast<std::size_t>(b);
    DataLoader loader(images, fit);
    std::size_t samples = 0;
    for (const Batch& batch_view : loader) samples += batch_view.size();
    REQUIRE(samples == 640);
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("the check can be turned off, and a generous limit passes", "[memory]") {
  LoaderOptions opt;
  opt.batch_size = 64;
  opt.num_workers = 2;
  opt.memory_limit = 1ULL << 20;
  opt.check_memory = false;
  DataLoader unchecked(Images{}, opt);
  REQUIRE(unchecked.begin() != unchecked.end());
  opt.check_memory = true;
  opt.memory_limit = 1ULL << 30;
  DataLoader roomy(Images{}, opt);
  REQUIRE(roomy.begin() != roomy.end());
}

TEST_CASE("memory_estimate() measures the samples and breaks the peak down", "[memory]") {
  LoaderOptions opt;
  opt.batch_size = 64;
  opt.num_workers = 2;
  DataLoader loader(Images{}, opt);
  const MemoryEstimate e = loader.memory_estimate();
  REQUIRE(e.bytes_per_sample == 3 * 224 * 224 + 8);
  // The adaptive prefetch depth (the default) counts the deepest it may reach: for batches of
  // 9.6 MB, kAdaptivePrefetchBytes (64 MiB) allows 6.
  REQUIRE(e.num_slots == 2 * 6);
  {
    LoaderOptions sized = opt;
    sized.sample_bytes = 65536;  // 4 MiB batches: 16 of them in 64 MiB
    REQUIRE(DataLoader(Images{}, sized).memory_estimate().num_slots == 2 * 16);
    sized.sample_bytes = 1000;  // 64 KB batches: the most, kMaxAdaptivePrefetch
    REQUIRE(DataLoader(Images{}, sized).memory_estimate().num_slots == 2 * kMaxAdaptivePrefetch);
  }
  opt.prefetch_factor = 2;  // a fixed depth counts itself
  DataLoader fixed(Images{}, opt);
  REQUIRE(fixed.memory_estimate().num_slots == 4);
  opt.prefetch_factor = kAdaptivePrefetch;
  REQUIRE(e.rule_of_thumb_bytes == 3 * 64 * e.bytes_per_sample);
  opt.sample_bytes = 1000;
  DataLoader given(Images{}, opt);
  REQUIRE(given.memory_estimate().bytes_per_sample == 1000);
}

namespace {

// Sample i holds (i + 1) KiB, except where `fault` says get() misbehaves.
struct Growing {
  std::size_t n = 90;
  std::function<void(std::size_t)> fault;
  // Counts get() calls made in this process (copies share it; a child has its own).
  std::shared_ptr<std::size_t> calls = std::make_shared<std::size_t>(0);
  std::size_t size() const { return n; }
  Sample get(std::size_t i) const {
    ++*calls;
    if (fault) fault(i);
    Sample s;
    s.set("x", Tensor::zeros(DType::kUInt8, {static_cast<std::int64_t>((i + 1) * 1024)}));
    return s;
  }
};

}  // namespace

TEST_CASE("the size probe takes the largest of samples spread over the dataset, in a child",
          "[memory]") {
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.num_workers = 2;
  Growing dataset;
  DataLoader loader(dataset, opt);
  REQUIRE(loader.memory_estimate().bytes_per_sample == 90 * 1024);  // the last index
  REQUIRE(*dataset.calls == 0);
}

TEST_CASE("a probe that crashes or throws part-way keeps what it measured, and none means no check",
          "[memory]") {
  test::disable_core_dumps();
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.num_workers = 2;
  SECTION("a crash at the second probe sample: the first one counts") {
    DataLoader loader(Growing{90,
                              [](std::size_t i) {
                                if (i == 30) std::abort();
                              }},
                      opt);
    REQUIRE(loader.memory_estimate().bytes_per_sample == 1024);
  }
  SECTION("the first sample throws: no estimate, the loader still runs and reports the error") {
    DataLoader loader(Growing{90,
                              [](std::size_t i) {
                                if (i == 0) throw std::runtime_error("sample 0 is corrupt");
                              }},
                      opt);
    REQUIRE(loader.memory_estimate().bytes_per_sample == 0);
    std::string first_error;
    test::drain_epoch(loader, [&](const WorkerException& e) {
      if (first_error.empty()) first_error = e.what();
    });
    REQUIRE_THAT(first_error, Catch::Matchers::Contains("sample 0 is corrupt"));
  }
}

TEST_CASE("num_workers = kAuto takes the recommendation", "[memory]") {
  LoaderOptions opt;
  opt.batch_size = 16;
  opt.num_workers = kAuto;
  DataLoader loader(Images{}, opt);
  const std::size_t expected =
      recommend_num_workers(probe_system(), loader.memory_estimate().worker_private_bytes)
          .num_workers;
  std::size_t samples = 0;
  for (const Batch& batch : loader) samples += batch.size();
  REQUIRE(samples == 256);
  REQUIRE(loader.options().num_workers == kAuto);  // what the user gave, never edited
  REQUIRE(loader.num_workers() >= 1);
  REQUIRE(loader.num_workers() <= std::max<std::size_t>(expected, 1));
}

TEST_CASE("bind_workers puts each worker on its own core, away from the caller's",
          "[memory][topology]") {
  const Topology topology = Topology::detect();
  // Keep the training thread on one core for the test, so "the caller's core" is one core.
  cpu_set_t saved;
  REQUIRE(::sched_getaffinity(0, sizeof saved, &saved) == 0);
  cpu_set_t here;
  CPU_ZERO(&here);
  CPU_SET(static_cast<std::size_t>(topology.cores()[0][0]), &here);
  REQUIRE(::sched_setaffinity(0, sizeof here, &here) == 0);
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.num_workers = static_cast<int>(std::max<std::size_t>(topology.physical_cores() - 1, 1));
  opt.bind_workers = true;
  opt.persistent_workers = true;
  DataLoader loader(Images{}, opt);
  auto it = loader.begin();
  REQUIRE(it != loader.end());  // a batch has come: the workers have bound themselves
  const int caller = ::sched_getcpu();
  const std::vector<pid_t> pids = loader.worker_pids();
  std::set<std::size_t> cores;
  for (const pid_t pid : pids) {
    const std::vector<int> cpus = test::allowed_cpus(pid);
    REQUIRE_FALSE(cpus.empty());
    const std::size_t core = topology.core_of(cpus[0]);
    for (const int cpu : cpus) REQUIRE(topology.core_of(cpu) == core);  // one core each
    if (topology.physical_cores() > 1) REQUIRE(core != topology.core_of(caller));
    cores.insert(core);
  }
  if (topology.physical_cores() > pids.size()) REQUIRE(cores.size() == pids.size());
  REQUIRE(::sched_setaffinity(0, sizeof saved, &saved) == 0);
}

TEST_CASE("the size probe measures a dataset whose get() draws from sample_rng()", "[memory]") {
  struct Random {
    std::size_t size() const { return 100; }
    Sample get(std::size_t) {
      Sample s;
      s.set("x", Tensor::from<double>({sample_rng().uniform(), sample_rng().uniform()}));
      return s;
    }
  };
  LoaderOptions opt;
  opt.batch_size = 10;
  opt.num_workers = 1;
  DataLoader loader(Random{}, opt);
  REQUIRE(loader.memory_estimate().bytes_per_sample == 2 * sizeof(double));
}

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

// 6 MiB a process besides its samples, which the probe process must see.
using HeavyWorker = test::KeepsOwnMemory<6>;

}  // namespace

TEST_CASE("the per-worker base is measured in the probe process", "[memory]") {
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  SECTION("a worker that keeps 6 MiB of its own counts it") {
    DataLoader loader(HeavyWorker{32}, opt);
    const MemoryEstimate e = loader.memory_estimate();
    CAPTURE(e.worker_base_bytes);
    REQUIRE(e.worker_base_bytes >= std::size_t{6} << 20);
    REQUIRE(e.worker_base_bytes < std::size_t{64} << 20);
    // The sample in flight, the base, and the serve loop's 16 KiB (memory.cpp).
    REQUIRE(e.worker_private_bytes == e.worker_base_bytes + e.bytes_per_sample + (16u << 10));
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
    DataLoader loader(HeavyWorker{32}, opt);
    REQUIRE(loader.memory_estimate().worker_base_bytes == std::size_t{1} << 20);
  }
}
