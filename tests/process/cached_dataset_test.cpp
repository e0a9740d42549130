// CachedDataset: one cache that every worker sees. The first epoch loads from the source, later
// epochs hit the cache whichever worker loads a sample; the budget bounds it; cached samples
// are read-only views.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <catch2/catch.hpp>

#include "support/clean_state.hpp"
#include "support/datasets.hpp"

using namespace stoker;
using stoker::test::IndexDataset;
using stoker::test::SharedCounters;

TEST_CASE("a CachedDataset loads each sample from its source once for every worker", "[cache]") {
  const int workers = GENERATE(0, 2, 3);
  CAPTURE(workers);
  const test::ProcessState baseline = test::process_state();
  {
    SharedCounters loads;  // source get() calls per index, over every process
    IndexDataset source{90, [&loads](std::size_t i) { loads[i].fetch_add(1); }};
    CachedDataset cached(source, std::size_t{1} << 20);
    LoaderOptions opt;
    opt.sample_bytes = 24;  // no probe of the source: this test counts its loads
    opt.batch_size = 4;
    opt.num_workers = workers;
    opt.shuffle = true;  // each epoch puts samples on different workers
    DataLoader loader(std::move(cached), opt);
    for (int epoch = 0; epoch < 3; ++epoch) {
      std::size_t seen = 0;
      for (const Batch& batch : loader) {
        const std::vector<std::int64_t> values = test::batch_indices(batch);
        for (std::size_t r = 0; r < batch.size(); ++r) {
          REQUIRE(values[r] == static_cast<std::int64_t>(batch.indices()[r]));
          REQUIRE(batch["data"].data<float>()[r * 4 + 2] ==
                  static_cast<float>(batch.indices()[r] + 2));
        }
        seen += batch.size();
      }
      REQUIRE(seen == 90);
    }
    for (std::size_t i = 0; i < 90; ++i) REQUIRE(loads[i].load() == 1);
    const LoaderStats stats = loader.stats();
    REQUIRE(stats.cache_misses == 90);
    REQUIRE(stats.cache_hits == 180);
    REQUIRE(stats.cache_bytes > 90 * 24);
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("the cache's budget bounds what it keeps", "[cache]") {
  SharedCounters loads;
  IndexDataset source{100, [&loads](std::size_t i) { loads[i].fetch_add(1); }};
  // Each sample takes 128 bytes of layout (8 + 32 for the scalar "index" + 40 for "data",
  // rounded up to 64-byte lines) + 64 for the index's 8 bytes + 64 for data's 16: 256 bytes,
  // so 16 fit in 4 KiB.
  CachedDataset cached(source, 4096);
  LoaderOptions opt;
  opt.sample_bytes = 24;  // no probe of the source: this test counts its loads
  opt.batch_size = 10;
  opt.num_workers = 2;
  DataLoader loader(std::move(cached), opt);
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const Batch& batch : loader) (void)batch;
  }
  const CacheStats c = loader.dataset().cache_stats();
  REQUIRE(c.entries == 4096 / 256);
  REQUIRE(c.bytes_used <= 4096);
  REQUIRE(c.rejected == 100 - c.entries);
  std::size_t loaded_twice = 0;
  for (std::size_t i = 0; i < 100; ++i) loaded_twice += loads[i].load() == 2 ? 1U : 0U;
  REQUIRE(loaded_twice == 100 - c.entries);
}

TEST_CASE("cached samples are read-only views of the cache", "[cache]") {
  CachedDataset cached(IndexDataset{4, {}}, 1 << 16);
  const Sample miss = cached.get(1);
  const Sample hit = cached.get(1);
  REQUIRE(hit["data"].is_view());
  REQUIRE(hit["data"].data<float>()[3] == 4.0f);
  // Writing into a cached sample must not corrupt the cache for other workers: it faults.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    signal(SIGSEGV, SIG_DFL);
    const_cast<float*>(hit["data"].data<float>())[0] = -1.0f;
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGSEGV);
  REQUIRE(cached.get(1)["data"].data<float>()[0] == 1.0f);
  (void)miss;
}
