// The adaptive prefetch depth through a DataLoader: it deepens for a consumer that computes on
// the same cores, never past what the memory limit allows, and changes neither the batches nor
// their order.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "support/clean_state.hpp"
#include "support/datasets.hpp"

using namespace stoker;

namespace {

void spin_for(std::chrono::microseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

// Sample i: its index, after `work` of computing.
struct Work {
  std::size_t n = 2000;
  std::chrono::microseconds work{20};
  std::size_t size() const { return n; }
  Sample get(std::size_t i) const {
    spin_for(work);
    Sample s;
    s.set("index", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
    s.set("noise", Tensor::scalar<double>(sample_rng().uniform()));
    return s;
  }
};

}  // namespace

TEST_CASE("the adaptive depth keeps every sample once, in order, the same for any num_workers",
          "[prefetch_depth]") {
  const test::ProcessState baseline = test::process_state();
  auto run = [](int workers) {
    LoaderOptions opt;
    opt.batch_size = 16;
    opt.num_workers = workers;
    opt.shuffle = true;
    opt.seed = 5;
    opt.persistent_workers = workers > 0;
    DataLoader loader(Work{}, opt);
    std::vector<std::int64_t> index;
    std::vector<double> noise;
    std::size_t deepest = 0;
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (const Batch& b : loader) {
        for (std::size_t r = 0; r < b.size(); ++r) {
          index.push_back(b["index"].data<std::int64_t>()[r]);
          noise.push_back(b["noise"].data<double>()[r]);
        }
        spin_for(std::chrono::microseconds(400));  // a training step on the same cores
        deepest = std::max(deepest, loader.stats().prefetch_depth);
      }
    }
    const LoaderStats s = loader.stats();
    if (workers > 0) {
      REQUIRE(s.prefetch_adaptive);
      REQUIRE(deepest >= kMinAdaptivePrefetch);
      REQUIRE(deepest <= s.prefetch_depth_limit);
      REQUIRE(s.prefetch_depth_limit <= kMaxAdaptivePrefetch);
    }
    return std::pair(index, noise);
  };
  const auto reference = run(0);
  REQUIRE(reference.first.size() == 4000);
  for (const int workers : {1, 2, 4}) {
    CAPTURE(workers);
    REQUIRE(run(workers) == reference);
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("a tiny memory limit caps the adaptive depth, and the estimate counts the cap",
          "[prefetch_depth][memory]") {
  struct Big {
    std::size_t size() const { return 256; }
    Sample get(std::size_t i) const {
      Sample s;
      s.set("x", Tensor::zeros(DType::kUInt8, Shape{64 << 10}));
      s.set("i", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
      return s;
    }
  };
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.num_workers = 2;
  opt.sample_bytes = (64 << 10) + 8;
  // The loader's own peak at a fixed depth of 3 and of 4: a limit between them allows 3.
  opt.prefetch_factor = 3;
  const std::size_t at3 = DataLoader(Big{}, opt).memory_estimate().loader_bytes;
  opt.prefetch_factor = 4;
  const std::size_t at4 = DataLoader(Big{}, opt).memory_estimate().loader_bytes;
  REQUIRE(at3 < at4);
  opt.prefetch_factor = kAdaptivePrefetch;
  opt.memory_limit = (at3 + at4) / 2;
  DataLoader loader(Big{}, opt);
  auto it = loader.begin();  // the check runs here and chooses the depth
  REQUIRE(loader.memory_estimate().num_slots == 2 * 3);
  REQUIRE(loader.memory_estimate().loader_bytes <= *opt.memory_limit);
  // A consumer that keeps every batch makes the depth grow, until the limit: then the held
  // batches block the next one, and the error says the depth is at its limit.
  std::vector<Batch> kept;
  try {
    for (; it != loader.end(); ++it) kept.push_back(*it);
    FAIL("every batch was delivered while all were kept");
  } catch (const HeldBatchesTimeout& e) {
    REQUIRE_THAT(std::string(e.what()),
                 Catch::Contains("adaptive prefetch depth at its limit of 3"));
  }
  const LoaderStats s = loader.stats();
  REQUIRE(s.prefetch_depth == 3);
  REQUIRE(s.prefetch_depth_limit == 3);
  REQUIRE(kept.size() >= 3);
}

TEST_CASE("small batches may go deeper than large ones, and the ring holds the deepest",
          "[prefetch_depth]") {
  // A consumer that keeps every batch grows the depth to its limit: kMaxAdaptivePrefetch for
  // batches of a few KB (kAdaptivePrefetchBytes allows more), then the next batch cannot come.
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 1;
  opt.timeout = std::chrono::seconds(10);  // a bound only: a one-thread program is told at once
  DataLoader loader(test::IndexDataset{400, {}}, opt);
  std::vector<Batch> kept;
  try {
    for (const Batch& b : loader) kept.push_back(b);
    FAIL("every batch was delivered while all were kept");
  } catch (const HeldBatchesTimeout& e) {
    REQUIRE_THAT(std::string(e.what()),
                 Catch::Contains(fmt::format("at its limit of {}", kMaxAdaptivePrefetch)));
  }
  REQUIRE(loader.stats().prefetch_depth_limit == kMaxAdaptivePrefetch);
  REQUIRE(kept.size() == kMaxAdaptivePrefetch);
}

#if !defined(__SANITIZE_ADDRESS__)  // ASan's shadow memory needs an unlimited address space
TEST_CASE("under an address-space limit the ring falls back to kAdaptivePrefetchFloor slots",
          "[prefetch_depth]") {
  // With 2 workers the adaptive ring reserves 2 x 32 slots of max_batch_bytes (1 GiB): 64 GiB.
  // Under a limit of what the process maps now plus 40 GiB that cannot be mapped, the 16 GiB
  // of 8 slots can; the loader then works with the depth held to 8.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::ifstream status("/proc/self/status");
    std::uint64_t vm_kib = 0;
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("VmSize:", 0) == 0) vm_kib = std::stoull(line.substr(7));
    }
    const rlimit limit{(vm_kib << 10) + (std::uint64_t{40} << 30), RLIM_INFINITY};
    if (vm_kib == 0 || ::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(10);
    try {
      LoaderOptions opt;
      opt.batch_size = 4;
      opt.num_workers = 2;
      opt.timeout = std::chrono::seconds(10);  // a bound only: a one-thread program is told at once
      DataLoader loader(test::IndexDataset{400, {}}, opt);
      std::size_t samples = 0;
      for (const Batch& b : loader) samples += b.size();
      if (samples != 400) ::_exit(11);
      if (loader.stats().prefetch_depth_limit != kAdaptivePrefetchFloor) ::_exit(12);
      // Held batches: the depth grows to the floor and no further.
      std::vector<Batch> kept;
      try {
        for (const Batch& b : loader) kept.push_back(b);
        ::_exit(13);
      } catch (const HeldBatchesTimeout&) {
      }
      if (kept.size() != 2 * kAdaptivePrefetchFloor) ::_exit(14);
    } catch (...) {
      ::_exit(15);
    }
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}
#endif
