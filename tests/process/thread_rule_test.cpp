// The thread rule (data_loader.hpp): one thread at a time inside a DataLoader and its
// iterators. A second thread's call while the first is inside raises the documented
// std::logic_error at once (and the first thread's epoch goes on, every sample once); two
// threads iterating one loader end (no hang) with the loader still whole; a loader built on
// one thread runs on another, an iterator handed between threads goes on where it was, stats()
// may be read from another thread between batches, and an iterator destroyed on one thread
// while another is inside a call has its epoch ended by the next call.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "support/clean_state.hpp"
#include "support/datasets.hpp"

using namespace stoker;
using stoker::test::IndexDataset;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kSamples = 48;

std::string id_text(std::thread::id id) {
  std::ostringstream out;
  out << id;
  return out.str();
}

// A pipe the dataset's get() of one sample reads a byte from (in a worker or in-process), so a
// test holds a fetch inside the loader for as long as it needs.
struct Gate {
  int ends[2] = {-1, -1};
  Gate() { REQUIRE(::pipe(ends) == 0); }
  ~Gate() {
    ::close(ends[0]);
    ::close(ends[1]);
  }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  void open() const {
    const char byte = 1;
    REQUIRE(::write(ends[1], &byte, 1) == 1);
  }
  std::function<void(std::size_t)> hook(std::size_t gated) const {
    const int fd = ends[0];
    return [fd, gated](std::size_t i) {
      char byte = 0;
      if (i == gated) (void)!::read(fd, &byte, 1);
    };
  }
};

// Calls `call` until it raises std::logic_error (another thread is inside) or `limit` passes;
// the message, or "" when it never did.
template <class F>
std::string refused_message(F&& call, std::chrono::seconds limit) {
  const Clock::time_point deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    try {
      call();
    } catch (const std::logic_error& e) {
      return e.what();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return "";
}

// The message of the std::logic_error `call` raises, and how long it took to raise it.
template <class F>
std::pair<std::string, double> raised(F&& call) {
  const Clock::time_point start = Clock::now();
  try {
    call();
  } catch (const std::logic_error& e) {
    return {e.what(), test::seconds_since(start)};
  }
  return {"", test::seconds_since(start)};
}

std::vector<int> count_epoch(DataLoader<IndexDataset>& loader) {
  std::vector<int> seen(kSamples, 0);
  for (const Batch& batch : loader) {
    for (const std::int64_t i : test::batch_indices(batch)) ++seen.at(static_cast<std::size_t>(i));
  }
  return seen;
}

}  // namespace

TEST_CASE("a second thread's call while one is inside raises the thread rule", "[threads]") {
  const int workers = GENERATE(0, 2);
  CAPTURE(workers);
  const test::ProcessState baseline = test::process_state();
  {
    Gate gate;
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = workers;
    opt.sample_bytes = 24;  // no size probe: its get() would wait at the gate
    DataLoader loader(IndexDataset{kSamples, gate.hook(1)}, opt);
    std::vector<int> seen(kSamples, 0);
    std::string a_error;
    std::atomic<bool> a_begun{false};
    std::optional<BatchIterator> shared_it;
    std::thread a([&] {
      try {
        shared_it.emplace(loader.begin());
        a_begun = true;
        // The first fetch waits for batch 0, whose sample 1 waits at the gate. This thread's
        // first call may meet the main thread inside stats() (asked every 1 ms until refused),
        // and then it is this one that is refused: only that first call is asked again until
        // it gets in; every later call must get in at once.
        BatchIterator& it = *shared_it;
        const auto first_call = [&] {
          const Clock::time_point give_up = Clock::now() + std::chrono::seconds(5);
          for (;;) {
            try {
              return it != loader.end();
            } catch (const std::logic_error& e) {
              if (std::string(e.what()).find("another thread is inside") == std::string::npos ||
                  Clock::now() > give_up) {
                throw;
              }
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        };
        for (bool more = first_call(); more; more = it != loader.end()) {
          for (const std::int64_t i : test::batch_indices(*it))
            ++seen.at(static_cast<std::size_t>(i));
          ++it;
        }
      } catch (const std::exception& e) {
        a_error = e.what();
      }
    });
    const std::string a_id = [&] {
      const std::thread::id id = a.get_id();
      return id_text(id);
    }();
    while (!a_begun) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // Harmless if it gets in before thread A's fetch has: asked until it is refused.
    const std::string first =
        refused_message([&] { (void)loader.stats(); }, std::chrono::seconds(10));
    INFO("stats() from the second thread: " << first);
    REQUIRE_THAT(first,
                 Catch::Contains("DataLoader::stats: another thread is inside this DataLoader"));
    // A is now inside its fetch until the gate opens: every call of this thread is refused.
    const auto [begin_message, begin_seconds] = raised([&] { (void)loader.begin(); });
    INFO(begin_message);
    REQUIRE_THAT(begin_message,
                 Catch::Contains("DataLoader::begin: another thread is inside this DataLoader") &&
                     Catch::Contains("(thread " + a_id + " in BatchIterator::operator== (end)") &&
                     Catch::Contains("this is thread " + id_text(std::this_thread::get_id())) &&
                     Catch::Contains("a DataLoader and its iterators are used by one thread at a "
                                     "time"));
    REQUIRE(begin_seconds < 1.0);
    const auto [next_message, next_seconds] = raised([&] { ++*shared_it; });
    REQUIRE_THAT(next_message, Catch::Contains("BatchIterator::operator++: another thread"));
    REQUIRE(next_seconds < 1.0);
    const auto [state_message, state_seconds] = raised([&] { (void)loader.state(); });
    REQUIRE_THAT(state_message, Catch::Contains("DataLoader::state: another thread"));
    REQUIRE(state_seconds < 1.0);
    gate.open();
    a.join();
    REQUIRE(a_error.empty());
    for (std::size_t i = 0; i < kSamples; ++i) REQUIRE(seen[i] == 1);
    shared_it.reset();
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("two threads iterating one loader end with the loader whole", "[threads]") {
  const bool persistent = GENERATE(false, true);
  CAPTURE(persistent);
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  opt.persistent_workers = persistent;
  DataLoader loader(IndexDataset{kSamples, {}}, opt);
  std::mutex mutex;
  std::vector<std::string> unexpected;  // anything but the thread rule's logic_error
  std::atomic<int> refused{0};
  std::atomic<int> finished{0};
  auto run = [&] {
    for (int epoch = 0; epoch < 4; ++epoch) {
      try {
        for (const Batch& batch : loader) (void)test::batch_indices(batch);
      } catch (const std::logic_error& e) {
        if (std::string(e.what()).find("used by one thread at a time") == std::string::npos) {
          const std::lock_guard<std::mutex> lock(mutex);
          unexpected.push_back(e.what());
        }
        ++refused;
      } catch (const std::exception& e) {
        const std::lock_guard<std::mutex> lock(mutex);
        unexpected.push_back(e.what());
      }
    }
    ++finished;
  };
  std::thread a(run);
  std::thread b(run);
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  while (finished < 2 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (finished < 2) {
    std::fprintf(stderr, "two threads on one loader did not finish within 60 s: a hang\n");
    std::_Exit(1);  // the threads cannot be joined, and the loader cannot go under them
  }
  a.join();
  b.join();
  INFO(refused.load() << " calls refused by the thread rule");
  for (const std::string& e : unexpected) INFO(e);
  REQUIRE(unexpected.empty());
  // Whatever the two threads did, the loader is whole: an epoch has every sample once.
  const std::vector<int> seen = count_epoch(loader);
  for (std::size_t i = 0; i < kSamples; ++i) REQUIRE(seen[i] == 1);
}

TEST_CASE("a loader built on one thread is iterated on another", "[threads]") {
  const int workers = GENERATE(0, 2);
  CAPTURE(workers);
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = workers;
  opt.persistent_workers = workers > 0;
  std::unique_ptr<DataLoader<IndexDataset>> loader;
  std::thread([&] {
    loader = std::make_unique<DataLoader<IndexDataset>>(IndexDataset{kSamples, {}}, opt);
  }).join();
  std::vector<int> seen;
  std::thread([&] { seen = count_epoch(*loader); }).join();
  for (std::size_t i = 0; i < kSamples; ++i) REQUIRE(seen[i] == 1);
  seen = count_epoch(*loader);  // and back on this thread
  for (std::size_t i = 0; i < kSamples; ++i) REQUIRE(seen[i] == 1);
  std::thread([&] { loader.reset(); }).join();  // destroyed on a third thread
}

TEST_CASE("an iterator handed between threads between batches goes on where it was", "[threads]") {
  const int workers = GENERATE(0, 2);
  CAPTURE(workers);
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = workers;
  DataLoader loader(IndexDataset{kSamples, {}}, opt);
  std::vector<int> seen(kSamples, 0);
  std::vector<std::int64_t> order;
  auto take = [&](BatchIterator& it) {
    const std::vector<std::int64_t> indices = test::batch_indices(*it);
    for (const std::int64_t i : indices) {
      ++seen.at(static_cast<std::size_t>(i));
      order.push_back(i);
    }
    ++it;
  };
  BatchIterator it = loader.begin();
  std::size_t turn = 0;
  while (it != loader.end()) {
    if (turn++ % 2 == 0) {
      std::thread([&] { take(it); }).join();
    } else {
      take(it);
    }
  }
  for (std::size_t i = 0; i < kSamples; ++i) REQUIRE(seen[i] == 1);
  for (std::size_t i = 0; i < order.size(); ++i) REQUIRE(order[i] == static_cast<std::int64_t>(i));
}

TEST_CASE("stats() from another thread between batches", "[threads]") {
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  DataLoader loader(IndexDataset{kSamples, {}}, opt);
  std::size_t delivered = 0;
  for (const Batch& batch : loader) {
    (void)batch;
    ++delivered;
    const LoaderStats s = std::async(std::launch::async, [&] { return loader.stats(); }).get();
    REQUIRE(s.batches == delivered);
  }
  REQUIRE(delivered == kSamples / 4);
}

namespace {

// A sampler that, once armed, waits in indices() until released: a loader call (size()) that
// stays inside the loader as long as a test needs.
struct WaitingSampler final : Sampler {
  std::atomic<bool> armed{false};
  std::atomic<bool> inside{false};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<std::size_t> indices(std::uint64_t) override {
    if (armed.exchange(false)) {
      inside = true;
      released.wait();
    }
    std::vector<std::size_t> all(kSamples);
    for (std::size_t i = 0; i < kSamples; ++i) all[i] = i;
    return all;
  }
};

}  // namespace

TEST_CASE("an iterator destroyed while another thread is inside ends its epoch at the next call",
          "[threads]") {
  auto sampler = std::make_shared<WaitingSampler>();
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  opt.sampler = sampler;
  DataLoader loader(IndexDataset{kSamples, {}}, opt);
  std::optional<BatchIterator> it(loader.begin());
  REQUIRE(*it != loader.end());
  // Worker 1 may be forked only after batch 0 (a slow-forking process, after_first_fork).
  REQUIRE_FALSE(loader.worker_pids().empty());
  sampler->armed = true;
  // size() plans the next epoch, which asks the sampler: it stays inside until released.
  std::thread inside([&] { (void)loader.size(); });
  while (!sampler->inside) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  it.reset();  // noexcept: cannot end the epoch under the other thread's call
  sampler->release.set_value();
  inside.join();
  // The next call ends the epoch first: without persistent workers, its workers are stopped.
  REQUIRE(loader.worker_pids().empty());
  const std::vector<int> seen = [&] {
    std::vector<int> counts(kSamples, 0);
    for (const Batch& batch : loader) {
      for (const std::int64_t i : test::batch_indices(batch))
        ++counts.at(static_cast<std::size_t>(i));
    }
    return counts;
  }();
  for (std::size_t i = 0; i < kSamples; ++i) REQUIRE(seen[i] == 1);
}
