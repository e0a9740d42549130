// Soak (ctest label `stress`, run by `scripts/test.sh` in both builds): 1,000 iterators created and
// destroyed at random points, then 100 epochs over a prime-sized dataset. Every epoch delivers
// every sample exactly once, and descriptors, resident memory and shared memory stay flat.
#include <fstream>
#include <random>
#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "support/clean_state.hpp"
#include "support/datasets.hpp"

using namespace stoker;
using stoker::test::IndexDataset;

namespace {

std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0;
  std::size_t resident = 0;
  statm >> pages >> resident;
  return resident * 4096;
}

std::size_t shmem_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    std::size_t kb = 0;
    meminfo >> kb;
    if (key == "Shmem:") return kb * 1024;
    meminfo.ignore(64, '\n');
  }
  return 0;
}

struct Usage {
  std::size_t fds = test::open_fd_count();
  std::size_t rss = resident_bytes();
  std::size_t shmem = shmem_bytes();
};

void require_flat(const Usage& before, const Usage& after) {
  INFO("fds " << before.fds << " -> " << after.fds << ", RSS " << before.rss << " -> " << after.rss
              << ", Shmem " << before.shmem << " -> " << after.shmem);
  REQUIRE(after.fds == before.fds);
#if defined(__SANITIZE_ADDRESS__)
  // ASan keeps freed memory in its quarantine (256 MiB by default), so resident memory grows
  // here by design; its leak checker covers what this bound checks in the release build.
  (void)before.rss;
#else
  REQUIRE(after.rss < before.rss + (8u << 20));
#endif
  REQUIRE(after.shmem < before.shmem + (32u << 20));
}

}  // namespace

TEST_CASE("soak: 1000 iterators at random points, then 100 exact epochs", "[stress]") {
  const bool persistent = GENERATE(false, true);
  CAPTURE(persistent);
  const test::ProcessState baseline = test::process_state();
  {
    constexpr std::size_t kSamples = 1009;  // prime: the last batch is short
    LoaderOptions opt;
    opt.batch_size = 16;
    opt.num_workers = 3;
    opt.shuffle = true;
    opt.persistent_workers = persistent;
    DataLoader loader(IndexDataset{kSamples, {}}, opt);
    for (const Batch& batch : loader) (void)batch;  // warm: ring created, slots backed
    const Usage start;
    std::mt19937 rng(2026);
    for (int round = 0; round < 1000; ++round) {
      const std::size_t stop_after = rng() % (loader.size() + 1);
      auto it = loader.begin();
      for (std::size_t b = 0; b < stop_after && it != loader.end(); ++b) ++it;
    }
    require_flat(start, Usage{});
    for (int epoch = 0; epoch < 100; ++epoch) {
      std::vector<int> seen(kSamples, 0);
      for (const Batch& batch : loader) {
        for (const std::size_t i : batch.indices()) ++seen[i];
      }
      for (std::size_t i = 0; i < kSamples; ++i) REQUIRE(seen[i] == 1);
    }
    require_flat(start, Usage{});
  }
  STOKER_REQUIRE_CLEAN(baseline);
}
