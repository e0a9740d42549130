// Iterable datasets (next() -> std::optional<Sample>): each worker reads its own copy of the
// stream, sharded with iterable_shard(); batches come round-robin from the workers in order,
// skipping those whose stream has ended; the epoch ends when every stream has.
#include <algorithm>
#include <map>

#include <catch2/catch.hpp>

#include "support/clean_state.hpp"
#include "support/datasets.hpp"

using namespace stoker;

namespace {

// Items 0..n-1 of a stream; each worker (and rank) keeps its shard. `fail_at` throws there.
struct Counter {
  std::size_t n = 100;
  std::size_t rank = 0;
  std::size_t world = 1;
  std::optional<std::size_t> fail_at;
  std::size_t position = 0;
  int starts = 0;

  void start_epoch(std::uint64_t) {
    position = 0;
    ++starts;
  }
  std::optional<Sample> next() {
    const IterableShard shard = iterable_shard(rank, world);
    while (position < n && !shard.owns(position)) ++position;
    if (position >= n) return std::nullopt;
    const std::size_t item = position++;
    if (fail_at == item) throw std::runtime_error("bad item " + std::to_string(item));
    const WorkerInfo* info = worker_info();
    Sample s;
    s.set("value", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(item)));
    s.set("worker",
          Tensor::scalar<std::int64_t>(info == nullptr ? -1 : static_cast<std::int64_t>(info->id)));
    s.set("noise", Tensor::scalar<double>(sample_rng().uniform()));
    return s;
  }
};

// Without start_epoch: a copy continues where it stopped.
struct OneShot {
  std::size_t n = 20;
  std::size_t position = 0;
  std::optional<Sample> next() {
    const IterableShard shard = iterable_shard();
    while (position < n && !shard.owns(position)) ++position;
    if (position >= n) return std::nullopt;
    Sample s;
    s.set("value", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(position++)));
    return s;
  }
};

struct Epoch {
  std::vector<std::int64_t> values;   // in delivery order
  std::vector<std::int64_t> workers;  // the worker of each batch's first sample
  std::vector<std::size_t> sizes;
};

template <class D>
Epoch run_epoch(DataLoader<D>& loader) {
  Epoch e;
  for (const Batch& batch : loader) {
    REQUIRE(batch.indices().empty());
    const Tensor& v = batch["value"];
    REQUIRE(v.numel() == batch.size());
    for (std::size_t k = 0; k < batch.size(); ++k) e.values.push_back(v.data<std::int64_t>()[k]);
    if (batch.contains("worker")) e.workers.push_back(batch["worker"].data<std::int64_t>()[0]);
    e.sizes.push_back(batch.size());
  }
  return e;
}

std::vector<std::int64_t> sorted(std::vector<std::int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<std::int64_t> range(std::int64_t n) {
  std::vector<std::int64_t> v;
  for (std::int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

}  // namespace

TEST_CASE("an iterable dataset delivers every item of every worker's shard once", "[iterable]") {
  const int workers = GENERATE(0, 1, 2, 3);
  const bool persistent = GENERATE(false, true);
  if (persistent && workers == 0) return;
  CAPTURE(workers, persistent);
  const test::ProcessState baseline = test::process_state();
  {
    LoaderOptions opt;
    opt.batch_size = 7;
    opt.num_workers = workers;
    opt.persistent_workers = persistent;
    DataLoader loader(Counter{}, opt);
    for (int epoch = 0; epoch < 3; ++epoch) {
      const Epoch e = run_epoch(loader);
      REQUIRE(sorted(e.values) == range(100));
      for (const std::size_t size : e.sizes) REQUIRE((size >= 1 && size <= 7));
      if (workers >= 2) {
        // In order: batch k comes from worker k mod W while every stream lasts.
        const std::size_t rounds = 100 / static_cast<std::size_t>(workers) / 7;
        for (std::size_t k = 0; k < rounds * static_cast<std::size_t>(workers); ++k) {
          REQUIRE(e.workers[k] == static_cast<std::int64_t>(k % static_cast<std::size_t>(workers)));
        }
      }
    }
    REQUIRE(loader.stats().samples == 100);
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("drop_last drops each worker's short last batch", "[iterable]") {
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.num_workers = 2;
  opt.drop_last = true;
  DataLoader loader(Counter{}, opt);
  const Epoch e = run_epoch(loader);
  // Each worker has 50 items: 6 full batches of 8, and 2 items dropped.
  REQUIRE(e.sizes.size() == 12);
  for (const std::size_t size : e.sizes) REQUIRE(size == 8);
  REQUIRE(e.values.size() == 96);
}

TEST_CASE("out of order, an iterable dataset still delivers every item once", "[iterable]") {
  LoaderOptions opt;
  opt.batch_size = 5;
  opt.num_workers = 3;
  opt.in_order = false;
  DataLoader loader(Counter{}, opt);
  REQUIRE(sorted(run_epoch(loader).values) == range(100));
}

TEST_CASE("iterable_shard splits a stream between ranks and workers", "[iterable]") {
  std::vector<std::int64_t> all;
  for (std::size_t rank = 0; rank < 3; ++rank) {
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = 2;
    DataLoader loader(Counter{90, rank, 3, {}, 0, 0}, opt);
    const Epoch e = run_epoch(loader);
    REQUIRE(e.values.size() == 30);
    for (const std::int64_t v : e.values) {
      REQUIRE(static_cast<std::size_t>(v) % 6 / 2 == rank);  // shard = rank * 2 + worker
    }
    all.insert(all.end(), e.values.begin(), e.values.end());
  }
  REQUIRE(sorted(all) == range(90));
  REQUIRE_THROWS_WITH(iterable_shard(3, 3), Catch::Contains("rank 3 is not below world_size 3"));
  REQUIRE(iterable_shard().count == 1);  // the main process: worker 0 of 1
}

TEST_CASE("without start_epoch a persistent worker's stream stays where it ended", "[iterable]") {
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  SECTION("fresh workers each epoch re-read from the start") {
    DataLoader loader(OneShot{}, opt);
    REQUIRE(run_epoch(loader).values.size() == 20);
    REQUIRE(run_epoch(loader).values.size() == 20);
  }
  SECTION("persistent workers have nothing left") {
    opt.persistent_workers = true;
    DataLoader loader(OneShot{}, opt);
    REQUIRE(run_epoch(loader).values.size() == 20);
    REQUIRE(run_epoch(loader).values.empty());
  }
}

TEST_CASE("sample_rng() in an iterable dataset depends on the worker and the stream",
          "[iterable]") {
  LoaderOptions opt;
  opt.batch_size = 5;
  opt.num_workers = 2;
  opt.seed = 9;
  auto noise = [&opt] {
    DataLoader loader(Counter{}, opt);
    std::map<std::int64_t, double> by_value;
    for (const Batch& batch : loader) {
      for (std::size_t k = 0; k < batch.size(); ++k) {
        by_value[batch["value"].data<std::int64_t>()[k]] = batch["noise"].data<double>()[k];
      }
    }
    return by_value;
  };
  const auto first = noise();
  REQUIRE(first == noise());  // reproducible
  REQUIRE(first.at(0) != first.at(2));
  // Two loaders in one process, in-process: the second must not continue the first's count
  // of stream positions (it once did, through a counter shared by every loader).
  opt.num_workers = 0;
  const auto inline_first = noise();
  REQUIRE(noise() == inline_first);
}

TEST_CASE("every begin() restarts the stream, even of a repeated epoch", "[iterable]") {
  LoaderOptions opt;
  opt.batch_size = 5;
  opt.num_workers = 2;
  opt.persistent_workers = true;
  DataLoader loader(Counter{}, opt);
  for (int round = 0; round < 3; ++round) {
    loader.set_epoch(0);
    REQUIRE(sorted(run_epoch(loader).values) == range(100));
  }
}

TEST_CASE("errors in an iterable dataset: exception, skip, crash", "[iterable][fault]") {
  const test::ProcessState baseline = test::process_state();
  {
    LoaderOptions opt;
    opt.batch_size = 5;
    opt.num_workers = 2;
    SECTION("an exception arrives as WorkerException and the epoch goes on") {
      // Worker 0 reads 0, 2, 4, ...: its fifth batch would be 40..48. Item 44 throws after 40
      // and 42 were read, so that batch (40, 42) is lost with it; the stream goes on at 46.
      DataLoader loader(Counter{100, 0, 1, 44, 0, 0}, opt);
      int errors = 0;
      const std::size_t samples = test::drain_epoch(loader, [&](const WorkerException& e) {
        ++errors;
        REQUIRE(e.original_what() == "bad item 44");
        REQUIRE(e.worker_id() == std::optional<std::size_t>(0));
      });
      REQUIRE(errors == 1);
      REQUIRE(samples == 97);
    }
    SECTION("skip leaves out the failing item only") {
      opt.on_sample_error = OnSampleError::kSkip;
      DataLoader loader(Counter{100, 0, 1, 40, 0, 0}, opt);
      const Epoch e = run_epoch(loader);
      std::vector<std::int64_t> expected = range(100);
      expected.erase(expected.begin() + 40);
      REQUIRE(sorted(e.values) == expected);
      REQUIRE(loader.stats().skipped_samples == 1);
    }
    SECTION("options that need indices are refused") {
      opt.shuffle = true;
      REQUIRE_THROWS_WITH(DataLoader(Counter{}, opt),
                          Catch::Contains("LoaderOptions::shuffle does not apply to an iterable"));
      opt.shuffle = false;
      opt.on_worker_crash = OnWorkerCrash::kRespawn;
      REQUIRE_THROWS_WITH(DataLoader(Counter{}, opt), Catch::Contains("on_worker_crash"));
    }
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("a worker_init error in an iterable dataset ends that worker's stream, not the epoch",
          "[iterable][fault]") {
  // Worker 1's worker_init throws: its first batch is the error and its stream counts as
  // ended (no endless errors); worker 0's items all arrive, and the epoch ends.
  const bool in_order = GENERATE(true, false);
  CAPTURE(in_order);
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  opt.prefetch_factor = 2;  // a fixed depth: at most 2 batches given to worker 1 at once
  opt.in_order = in_order;
  opt.worker_init = [](std::size_t id) {
    if (id == 1) throw std::runtime_error("no shard for worker 1");
  };
  DataLoader loader(Counter{40, 0, 1, {}, 0, 0}, opt);
  std::vector<std::int64_t> values;
  std::size_t errors = 0;
  auto it = loader.begin();
  for (std::size_t steps = 0; steps < 100; ++steps) {
    try {
      if (it == loader.end()) break;
      const Tensor& v = (*it)["value"];
      for (std::size_t r = 0; r < it->size(); ++r) values.push_back(v.data<std::int64_t>()[r]);
      ++it;
    } catch (const WorkerException& e) {
      ++errors;
      REQUIRE(e.details().where == "worker_init");
      REQUIRE(e.worker_id() == std::optional<std::size_t>(1));
    }
  }
  REQUIRE(it == loader.end());
  REQUIRE(errors >= 1);
  REQUIRE(errors <= opt.prefetch_factor);  // only the batches already given to worker 1
  std::vector<std::int64_t> expected;      // worker 0's shard: the even items
  for (std::int64_t i = 0; i < 40; i += 2) expected.push_back(i);
  std::sort(values.begin(), values.end());
  REQUIRE(values == expected);
}
