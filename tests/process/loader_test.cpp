// The DataLoader's contract in the normal case: every index exactly once per epoch, order a
// function of (seed, epoch) only, bounded prefetch, sleeping workers, persistent workers,
// out-of-order delivery, zero-copy views and clean shutdown.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <catch2/catch.hpp>

#include "support/clean_state.hpp"
#include "support/datasets.hpp"

using namespace stoker;
using stoker::test::IndexDataset;
using stoker::test::SharedCounters;
using Clock = std::chrono::steady_clock;

namespace {

// The dataset indices of one epoch, batch by batch, checked against the "index" field.
std::vector<std::vector<std::size_t>> run_epoch(DataLoader<IndexDataset>& loader) {
  std::vector<std::vector<std::size_t>> batches;
  for (const Batch& batch : loader) {
    const std::vector<std::int64_t> values = test::batch_indices(batch);
    REQUIRE(values.size() == batch.size());
    for (std::size_t k = 0; k < values.size(); ++k) {
      REQUIRE(values[k] == static_cast<std::int64_t>(batch.indices()[k]));
    }
    const float* data = batch["data"].data<float>();
    REQUIRE(batch["data"].shape() == Shape({static_cast<std::int64_t>(batch.size()), 4}));
    for (std::size_t k = 0; k < batch.size(); ++k) {
      REQUIRE(data[k * 4 + 3] == static_cast<float>(batch.indices()[k] + 3));
    }
    batches.emplace_back(batch.indices().begin(), batch.indices().end());
  }
  return batches;
}

}  // namespace

TEST_CASE("every index is delivered exactly once per epoch", "[loader]") {
  const int workers = GENERATE(0, 1, 2, 3, 4);
  const bool shuffle = GENERATE(false, true);
  const bool drop_last = GENERATE(false, true);
  const std::size_t n = GENERATE(64u, 67u);
  CAPTURE(workers, shuffle, drop_last, n);
  const test::ProcessState baseline = test::process_state();
  {
    LoaderOptions opt;
    opt.batch_size = 8;
    opt.num_workers = workers;
    opt.shuffle = shuffle;
    opt.drop_last = drop_last;
    DataLoader loader(IndexDataset{n, {}}, opt);
    const std::size_t expected_batches = drop_last ? n / 8 : (n + 7) / 8;
    REQUIRE(loader.size() == expected_batches);
    for (int epoch = 0; epoch < 2; ++epoch) {
      const auto batches = run_epoch(loader);
      REQUIRE(batches.size() == expected_batches);
      std::map<std::size_t, int> seen;
      for (std::size_t b = 0; b < batches.size(); ++b) {
        const std::size_t expected_size = drop_last || b + 1 < batches.size() ? 8 : n - 8 * b;
        REQUIRE(batches[b].size() == expected_size);
        for (const std::size_t i : batches[b]) ++seen[i];
      }
      REQUIRE(seen.size() == (drop_last ? n - n % 8 : n));
      for (const auto& [index, count] : seen) {
        REQUIRE(index < n);
        REQUIRE(count == 1);
      }
      if (!shuffle) {
        for (std::size_t b = 0; b < batches.size(); ++b) REQUIRE(batches[b][0] == b * 8);
      }
    }
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("the order depends only on the seed and the epoch", "[loader][determinism]") {
  auto order = [](int workers, std::uint64_t seed, std::uint64_t epoch) {
    LoaderOptions opt;
    opt.batch_size = 7;
    opt.num_workers = workers;
    opt.shuffle = true;
    opt.seed = seed;
    DataLoader loader(IndexDataset{200, {}}, opt);
    loader.set_epoch(epoch);
    return run_epoch(loader);
  };
  const auto reference = order(2, 42, 3);
  SECTION("the same seed and epoch give the same batches, for any num_workers") {
    REQUIRE(order(2, 42, 3) == reference);
    REQUIRE(order(0, 42, 3) == reference);
    REQUIRE(order(4, 42, 3) == reference);
  }
  SECTION("another epoch or another seed gives another order") {
    REQUIRE(order(2, 42, 4) != reference);
    REQUIRE(order(2, 43, 3) != reference);
  }
  SECTION("without set_epoch, each begin() moves to the next epoch") {
    LoaderOptions opt;
    opt.batch_size = 7;
    opt.num_workers = 2;
    opt.shuffle = true;
    opt.seed = 42;
    DataLoader loader(IndexDataset{200, {}}, opt);
    loader.set_epoch(2);
    const auto epoch2 = run_epoch(loader);
    REQUIRE(loader.epoch() == 3);
    REQUIRE(run_epoch(loader) == reference);
    std::uint64_t seen_epoch = 0;
    for (const Batch& batch : loader) seen_epoch = batch.epoch();
    REQUIRE(seen_epoch == 4);
    REQUIRE(epoch2 != reference);
  }
}

TEST_CASE("a slow consumer bounds the batches in flight and workers sleep", "[loader][flow]") {
  SharedCounters started;
  IndexDataset dataset{400, [&started](std::size_t) { started[0].fetch_add(1); }};
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  opt.prefetch_factor = 2;
  opt.sample_bytes = 24;  // no probe of get(): this test counts every call
  DataLoader loader(dataset, opt);
  const std::int64_t slots = 2 * 2;
  std::size_t received = 0;
  std::vector<pid_t> pids;
  for (const Batch& batch : loader) {
    ++received;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    // The batch in hand and at most slots - 1 more have been started: no more samples.
    const std::int64_t in_flight_limit = (static_cast<std::int64_t>(received) - 1 + slots) * 4;
    REQUIRE(started[0].load() <= in_flight_limit);
    REQUIRE(batch.size() == 4);
    if (received == 10) {
      pids = loader.worker_pids();
      REQUIRE(pids.size() == 2);
      std::vector<double> before;
      for (const pid_t pid : pids) before.push_back(test::process_cpu_seconds(pid));
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      for (std::size_t w = 0; w < pids.size(); ++w) {
        const double used = test::process_cpu_seconds(pids[w]) - before[w];
        INFO("worker " << w << " used " << used << " s of CPU while the consumer slept 0.4 s");
        REQUIRE(used < 0.04);  // a spinning worker would use ~0.4 s
      }
      REQUIRE(started[0].load() <= in_flight_limit);
    }
    if (received == 20) break;
  }
  REQUIRE(received == 20);
}

TEST_CASE("persistent workers keep their processes across epochs", "[loader][persistent]") {
  const test::ProcessState baseline = test::process_state();
  {
    LoaderOptions opt;
    opt.batch_size = 10;
    opt.num_workers = 2;
    opt.persistent_workers = true;
    DataLoader loader(IndexDataset{95, {}}, opt);
    REQUIRE(run_epoch(loader).size() == 10);
    const std::vector<pid_t> pids = loader.worker_pids();
    REQUIRE(pids.size() == 2);
    for (int epoch = 1; epoch < 4; ++epoch) {
      const auto batches = run_epoch(loader);
      REQUIRE(batches.size() == 10);
      REQUIRE(loader.worker_pids() == pids);
    }
    for (const pid_t pid : pids) REQUIRE(test::process_alive(pid));
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("workers without persistence are reaped at the end of each epoch", "[loader]") {
  const test::ProcessState baseline = test::process_state();
  LoaderOptions opt;
  opt.batch_size = 10;
  opt.num_workers = 3;
  DataLoader loader(IndexDataset{50, {}}, opt);
  std::vector<pid_t> during;
  for (const Batch& batch : loader) {
    (void)batch;
    during = loader.worker_pids();  // the last batch's: every worker forked by then
  }
  REQUIRE(during.size() == 3);
  REQUIRE(loader.worker_pids().empty());
  REQUIRE(test::child_pids().empty());
  for (const pid_t pid : during) REQUIRE_FALSE(test::process_alive(pid));
  (void)baseline;
}

TEST_CASE("iterators created and destroyed at random points leave nothing behind",
          "[loader][shutdown]") {
  const bool persistent = GENERATE(false, true);
  CAPTURE(persistent);
  const test::ProcessState baseline = test::process_state();
  {
    LoaderOptions opt;
    opt.batch_size = 5;
    opt.num_workers = 2;
    opt.persistent_workers = persistent;
    opt.shuffle = true;
    DataLoader loader(IndexDataset{60, {}}, opt);
    std::mt19937 rng(7);
    std::size_t fds_after_first = 0;
    for (int round = 0; round < 200; ++round) {
      const std::size_t stop_after = rng() % (loader.size() + 2);
      std::set<std::size_t> seen;
      {
        auto it = loader.begin();
        for (std::size_t b = 0; b < stop_after && it != loader.end(); ++b, ++it) {
          for (const std::size_t i : it->indices()) REQUIRE(seen.insert(i).second);
        }
      }
      if (!persistent) REQUIRE(test::child_pids().empty());
      if (round == 0) fds_after_first = test::open_fd_count();
      REQUIRE(test::open_fd_count() == fds_after_first);
    }
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("in_order = false delivers every index once around a slow sample", "[loader][order]") {
  IndexDataset dataset{40, [](std::size_t i) {
                         if (i == 5) std::this_thread::sleep_for(std::chrono::milliseconds(300));
                       }};
  LoaderOptions opt;
  opt.batch_size = 1;
  opt.num_workers = 2;
  opt.in_order = false;
  DataLoader loader(dataset, opt);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::size_t> arrival;
    for (const Batch& batch : loader) arrival.push_back(batch.indices()[0]);
    std::vector<std::size_t> sorted = arrival;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < 40; ++i) REQUIRE(sorted[i] == i);
    const auto pos = std::find(arrival.begin(), arrival.end(), 5u) - arrival.begin();
    INFO("sample 5 arrived at position " << pos);
    REQUIRE(pos > 10);  // the other worker kept delivering while sample 5 was slow
  }
}

TEST_CASE("a Batch is a zero-copy view whose slot is recycled", "[loader][batch]") {
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 1;
  opt.prefetch_factor = 2;
  std::optional<Batch> kept;
  Batch cloned;
  const test::ProcessState baseline = test::process_state();
  {
    DataLoader loader(IndexDataset{40, {}}, opt);
    std::set<const std::byte*> addresses;
    for (const Batch& batch : loader) {
      REQUIRE(batch.is_view());
      addresses.insert(batch["data"].raw_data());
      if (batch.index() == 3) {
        kept = batch;
        cloned = batch.clone();
      }
    }
    // One worker with two slots: every batch lived in one of two places.
    REQUIRE(addresses.size() == 2);
  }
  // The kept view outlives the loader (its slot's memory stays mapped), and the clone owns its
  // memory.
  REQUIRE(kept->indices()[0] == 12);
  REQUIRE(test::batch_indices(*kept) == std::vector<std::int64_t>{12, 13, 14, 15});
  REQUIRE_FALSE(cloned.is_view());
  REQUIRE(test::batch_indices(cloned) == std::vector<std::int64_t>{12, 13, 14, 15});
  REQUIRE(test::ring_mapping_count() == 1);
  kept.reset();
  REQUIRE(test::ring_mapping_count() == 0);
  (void)baseline;
}

TEST_CASE("next() walks an epoch without the iterator protocol", "[loader]") {
  LoaderOptions opt;
  opt.batch_size = 3;
  opt.num_workers = 2;
  DataLoader loader(IndexDataset{10, {}}, opt);
  auto it = loader.begin();
  std::vector<Batch> held;
  std::size_t samples = 0;
  while (std::optional<Batch> batch = it.next()) {
    samples += batch->size();
    if (held.size() < 2) held.push_back(*batch);  // two held batches still leave a free slot
  }
  REQUIRE(samples == 10);
  REQUIRE_FALSE(it.next().has_value());
  REQUIRE(test::batch_indices(held[1]) == std::vector<std::int64_t>{3, 4, 5});
}

TEST_CASE("stats count the epoch's batches, samples, bytes and waiting", "[loader][stats]") {
  IndexDataset dataset{100, [](std::size_t) {
                         if (test::in_worker()) {
                           std::this_thread::sleep_for(std::chrono::microseconds(200));
                         }
                       }};
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.num_workers = 2;
  DataLoader loader(dataset, opt);
  loader.set_epoch(4);
  std::size_t bytes = 0;
  for (const Batch& batch : loader) bytes += batch.nbytes();
  const LoaderStats stats = loader.stats();
  REQUIRE(stats.epoch == 4);
  REQUIRE(stats.batches == 13);
  REQUIRE(stats.samples == 100);
  REQUIRE(stats.bytes == bytes);
  REQUIRE(bytes == 100 * (8 + 16));
  REQUIRE(stats.epoch_seconds > 0.005);  // 100 x 0.2 ms over two workers at least
  // The consumer does nothing: it waited for nearly all of the epoch.
  REQUIRE(stats.wait_fraction() > 0.5);
  REQUIRE(stats.wait_fraction() <= 1.0);
  REQUIRE(stats.samples_per_second() > 0);
  // The figures stay those of the finished epoch until the next begin().
  REQUIRE(loader.stats().epoch_seconds == stats.epoch_seconds);
}

TEST_CASE("an empty dataset gives an epoch without batches", "[loader]") {
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  DataLoader loader(IndexDataset{0, {}}, opt);
  REQUIRE(loader.size() == 0);
  std::size_t batches = 0;
  for (const Batch& batch : loader) batches += batch.size() + 1;
  REQUIRE(batches == 0);
  REQUIRE(loader.worker_pids().empty());
}

TEST_CASE("batches grow beyond what a slot held before", "[loader][slot]") {
  struct Growing {
    std::size_t size() const { return 24; }
    Sample get(std::size_t i) const {
      Tensor t = Tensor::empty(DType::kUInt8, {static_cast<std::int64_t>((i + 1) * 50000)});
      std::memset(t.raw_data(), static_cast<int>(i), t.nbytes());
      Sample s;
      s.set("bytes", std::move(t));
      return s;
    }
  };
  const int workers = GENERATE(0, 2);
  LoaderOptions opt;
  opt.batch_size = 1;
  opt.num_workers = workers;
  DataLoader loader(Growing{}, opt);
  std::size_t count = 0;
  for (const Batch& batch : loader) {
    const std::size_t i = batch.indices()[0];
    const Tensor& t = batch["bytes"];
    REQUIRE(t.nbytes() == (i + 1) * 50000);
    const std::uint8_t* p = t.data<std::uint8_t>();
    REQUIRE(p[0] == i);
    REQUIRE(p[t.nbytes() - 1] == i);
    ++count;
  }
  REQUIRE(count == 24);
}

TEST_CASE("worker_info() and worker_init describe each worker", "[loader][worker]") {
  SharedCounters seen;  // [0..3]: worker_init calls per id; [10 + i]: worker id + 1 of sample i
  SharedCounters pids;
  IndexDataset dataset{40, [&seen, &pids](std::size_t i) {
                         const WorkerInfo* info = worker_info();
                         seen[10 + i] =
                             info == nullptr ? -1 : static_cast<std::int64_t>(info->id) + 1;
                         pids[i] = info == nullptr ? 0 : info->pid;
                         if (info != nullptr && info->num_workers != 3) seen[9] = 1;
                       }};
  LoaderOptions opt;
  opt.batch_size = 2;
  opt.num_workers = 3;
  opt.worker_init = [&seen](std::size_t id) {
    seen[id].fetch_add(1);
    if (worker_info() == nullptr || worker_info()->id != id) seen[8] = 1;
  };
  REQUIRE(worker_info() == nullptr);
  DataLoader loader(dataset, opt);
  for (const Batch& batch : loader) {
    // Batch k is loaded by worker k mod 3; a fresh iterator's batch 0 is split, row r of its
    // two by worker r (or both by worker 0 in a slow-forking process: after_first_fork).
    for (std::size_t r = 0; r < batch.size(); ++r) {
      const std::size_t i = batch.indices()[r];
      const std::size_t worker = batch.index() == 0 ? r : batch.index() % 3;
      if (batch.index() == 0 && r == 1 && seen[10 + i].load() == 1) continue;
      REQUIRE(seen[10 + i].load() == static_cast<std::int64_t>(worker) + 1);
      REQUIRE(pids[i].load() != getpid());
    }
  }
  for (std::size_t w = 0; w < 3; ++w) REQUIRE(seen[w].load() == 1);
  REQUIRE(seen[8].load() == 0);
  REQUIRE(seen[9].load() == 0);

  SECTION("with num_workers = 0 get() runs in the main process") {
    LoaderOptions inline_opt;
    inline_opt.batch_size = 2;
    DataLoader inline_loader(dataset, inline_opt);
    for (const Batch& batch : inline_loader) REQUIRE(seen[10 + batch.indices()[0]].load() == -1);
  }
}

TEST_CASE("two loaders run side by side", "[loader]") {
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  DataLoader a(IndexDataset{40, {}}, opt);
  opt.persistent_workers = true;
  DataLoader b(IndexDataset{80, {}}, opt);
  auto ia = a.begin();
  auto ib = b.begin();
  std::size_t na = 0;
  std::size_t nb = 0;
  while (ia != a.end() || ib != b.end()) {
    if (ia != a.end()) {
      na += ia->size();
      ++ia;
    }
    if (ib != b.end()) {
      nb += ib->size();
      ++ib;
    }
  }
  REQUIRE(na == 40);
  REQUIRE(nb == 80);
}

TEST_CASE("bad options are rejected when the loader is built", "[loader][options]") {
  LoaderOptions opt;
  opt.batch_size = 0;
  REQUIRE_THROWS_WITH(DataLoader(IndexDataset{}, opt),
                      Catch::Contains("batch_size") && Catch::Contains("between 1 and"));
  opt.batch_size = 1;
  opt.num_workers = -2;  // -1 is kAuto
  REQUIRE_THROWS_WITH(DataLoader(IndexDataset{}, opt),
                      Catch::Contains("num_workers is -2") && Catch::Contains("kAuto"));
  opt.num_workers = 2;
  opt.prefetch_factor = kMaxPrefetchFactor + 1;  // 0 is kAdaptivePrefetch, the default
  REQUIRE_THROWS_WITH(DataLoader(IndexDataset{}, opt), Catch::Contains("prefetch_factor"));
}
