// What an embedding runtime relies on: fork hooks (stoker/fork_hooks.hpp) around every fork a
// loader makes (workers, respawns, the size probe), LoaderOptions::on_wait while a fetch sleeps,
// and LoaderOptions::held_timeout for a program that keeps every batch in a process with other
// threads. The Python package uses all three (python/src); these tests hold the engine to them
// without Python.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <stdexcept>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "support/clean_state.hpp"
#include "support/datasets.hpp"

using namespace stoker;
using stoker::test::IndexDataset;
using stoker::test::SharedCounters;

namespace {

// What the hooks saw, in this process (the parent's counters) and in the child (a string the
// child's copy of this object holds, read back through its samples).
struct HookLog {
  int prepared = 0;
  int parented = 0;
  std::string child;  // in a child: the child hooks that ran, in order
};
HookLog g_log;

// Registers hooks for the scope of a test.
class ScopedHooks {
 public:
  explicit ScopedHooks(ForkHooks hooks) : id_(add_fork_hooks(std::move(hooks))) {}
  ~ScopedHooks() { remove_fork_hooks(id_); }
  ScopedHooks(const ScopedHooks&) = delete;
  ScopedHooks& operator=(const ScopedHooks&) = delete;

 private:
  std::size_t id_;
};

ForkHooks logging_hooks(char name, std::string* order = nullptr) {
  return ForkHooks{[name, order] {
                     ++g_log.prepared;
                     if (order != nullptr) *order += name;
                   },
                   [] { ++g_log.parented; }, [name] { g_log.child += name; }};
}

// Sample i carries the child hooks' log of the process that loaded it.
struct LogDataset {
  std::size_t n = 8;
  std::size_t size() const { return n; }
  Sample get(std::size_t i) const {
    Sample s;
    s.set("index", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
    std::vector<std::uint8_t> text(g_log.child.begin(), g_log.child.end());
    text.resize(8, 0);
    s.set("log", Tensor::from<std::uint8_t>(text));
    return s;
  }
};

std::string row_text(const Batch& batch, std::size_t row) {
  const Tensor log = batch["log"].row(row);
  std::string out;
  for (std::size_t k = 0; k < log.numel(); ++k) {
    const auto c = static_cast<char>(log.data<std::uint8_t>()[k]);
    if (c != 0) out += c;
  }
  return out;
}

// One worker, and no size probe: only the worker forks.
LoaderOptions one_worker() {
  LoaderOptions opt;
  opt.num_workers = 1;
  opt.sample_bytes = 64;
  return opt;
}

}  // namespace

TEST_CASE("fork hooks run around each worker's fork, prepare in reverse order", "[fork_hooks]") {
  g_log = {};
  std::string prepare_order;
  const ScopedHooks a(logging_hooks('a', &prepare_order));
  const ScopedHooks b(logging_hooks('b', &prepare_order));
  LoaderOptions opt;
  opt.batch_size = 2;
  opt.num_workers = 2;
  opt.sample_bytes = 64;  // no size probe: only the workers fork
  DataLoader loader(LogDataset{}, opt);
  std::size_t rows = 0;
  for (const Batch& batch : loader) {
    for (std::size_t r = 0; r < batch.size(); ++r) {
      REQUIRE(row_text(batch, r) == "ab");  // child hooks in registration order
      ++rows;
    }
  }
  REQUIRE(rows == 8);
  REQUIRE(g_log.prepared == 4);  // two registrations x two workers
  REQUIRE(g_log.parented == 4);
  REQUIRE(prepare_order == "baba");
  REQUIRE(g_log.child.empty());  // the main process runs no child hook
}

TEST_CASE("fork hooks run for a respawned worker and for the size probe", "[fork_hooks]") {
  test::disable_core_dumps();
  g_log = {};
  const ScopedHooks a(logging_hooks('a'));
  SharedCounters crashes;
  // Not a sample the probe loads (0, 13, 26, 39), so that only a worker dies.
  IndexDataset dataset{40, [&crashes](std::size_t i) {
                         if (i == 14 && test::in_worker() && crashes[0].fetch_add(1) == 0) {
                           ::raise(SIGKILL);
                         }
                       }};
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  opt.on_worker_crash = OnWorkerCrash::kRespawn;
  opt.collate = collate_stack;  // a user collate: the size probe measures before forking
  DataLoader loader(dataset, opt);
  std::size_t samples = 0;
  for (const Batch& batch : loader) samples += batch.size();
  REQUIRE(samples == 40);
  REQUIRE(crashes[0].load() == 2);  // loaded by the worker that died, then by its replacement
  // The probe, two workers, one replacement.
  REQUIRE(g_log.prepared == 4);
  REQUIRE(g_log.parented == 4);
}

TEST_CASE("a prepare hook that throws cancels the fork", "[fork_hooks]") {
  const test::ProcessState baseline = test::process_state();
  g_log = {};
  {
    const ScopedHooks first(logging_hooks('a'));
    const ScopedHooks failing(ForkHooks{[] { throw std::runtime_error("not now"); }, {}, {}});
    DataLoader loader(LogDataset{}, one_worker());
    REQUIRE_THROWS_WITH(loader.begin(), "not now");
    // The failing one runs first (registered last); the other was never prepared.
    REQUIRE(g_log.prepared == 0);
    REQUIRE(g_log.parented == 0);
    REQUIRE(loader.worker_pids().empty());
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("a prepare hook that throws undoes the hooks already prepared", "[fork_hooks]") {
  g_log = {};
  const ScopedHooks failing(ForkHooks{[] { throw std::runtime_error("not now"); }, {}, {}});
  const ScopedHooks later(logging_hooks('a'));  // prepared first, so its parent step runs
  DataLoader loader(LogDataset{}, one_worker());
  REQUIRE_THROWS_WITH(loader.begin(), "not now");
  REQUIRE(g_log.prepared == 1);
  REQUIRE(g_log.parented == 1);
}

TEST_CASE("a child hook that throws is the worker's start-up error", "[fork_hooks]") {
  const test::ProcessState baseline = test::process_state();
  {
    const ScopedHooks failing(
        ForkHooks{{}, {}, [] { throw std::runtime_error("interpreter not ready"); }});
    DataLoader loader(LogDataset{}, one_worker());
    try {
      for (const Batch& batch : loader) (void)batch;
      FAIL("the epoch should have failed");
    } catch (const WorkerException& e) {
      REQUIRE(e.details().where == "fork hook");
      REQUIRE(e.original_what() == "interpreter not ready");
    }
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("add_fork_hooks refuses three empty hooks", "[fork_hooks]") {
  REQUIRE_THROWS_AS(add_fork_hooks(ForkHooks{}), std::invalid_argument);
  remove_fork_hooks(123456);  // an unknown id is ignored
}

TEST_CASE("on_wait runs while a fetch sleeps, and its exception ends the epoch", "[on_wait]") {
  const test::ProcessState baseline = test::process_state();
  {
    // Sample 6 takes long enough for several kOnWaitInterval sleeps.
    IndexDataset dataset{16, [](std::size_t i) {
                           if (i == 6 && test::in_worker()) {
                             std::this_thread::sleep_for(std::chrono::milliseconds(400));
                           }
                         }};
    std::atomic<int> calls{0};
    bool fail = false;
    LoaderOptions opt;
    opt.batch_size = 2;
    opt.num_workers = 2;
    opt.on_wait = [&] {
      ++calls;
      if (fail) throw std::runtime_error("interrupted");
    };
    DataLoader loader(dataset, opt);
    std::size_t samples = 0;
    for (const Batch& batch : loader) samples += batch.size();
    REQUIRE(samples == 16);
    REQUIRE(calls.load() >= 2);  // the 400 ms sample needs at least three 100 ms sleeps

    fail = true;
    calls = 0;
    auto it = loader.begin();
    std::string error;
    try {
      while (it != loader.end()) ++it;
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
    REQUIRE(error == "interrupted");
    REQUIRE(calls.load() == 1);
    REQUIRE(it == loader.end());
    REQUIRE(loader.worker_pids().empty());  // the epoch ended: its workers were stopped

    fail = false;
    samples = 0;
    for (const Batch& batch : loader) samples += batch.size();
    REQUIRE(samples == 16);  // the next epoch runs in full
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("held_timeout ends a wait for a batch only the program can release", "[held_timeout]") {
  // Another thread, so that the loader waits for a release instead of raising at once.
  std::atomic<bool> done{false};
  std::thread other([&done] {
    while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  LoaderOptions opt;
  opt.batch_size = 2;
  opt.num_workers = 1;
  opt.prefetch_factor = 2;
  opt.timeout = std::chrono::seconds(20);  // a bound: without held_timeout it is this one
  opt.held_timeout = std::chrono::milliseconds(300);
  DataLoader loader(IndexDataset{40, {}}, opt);
  auto it = loader.begin();
  std::vector<Batch> kept{*it};  // the worker's two slots, both held
  kept.push_back(*++it);
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  try {
    ++it;
  } catch (const HeldBatchesTimeout& e) {
    error = e.what();
    REQUIRE(e.held_batches() == 2);
    REQUIRE(e.details().timeout == std::chrono::milliseconds(300));
  }
  done = true;
  other.join();
  REQUIRE(test::seconds_since(start) < 15);
  REQUIRE_THAT(error, Catch::Contains("the program still holds 2 batches") &&
                          Catch::EndsWith("ms, LoaderOptions::held_timeout)"));
  kept.clear();
  ++it;  // released: the epoch goes on
  REQUIRE(it != loader.end());
  REQUIRE(it->indices()[0] == 4);
}

TEST_CASE("held_timeout must not be negative", "[held_timeout]") {
  LoaderOptions opt;
  opt.held_timeout = std::chrono::milliseconds(-1);
  REQUIRE_THROWS_WITH(validate(opt),
                      "LoaderOptions::held_timeout is -1 ms; it must be >= 0 (0: "
                      "as long as timeout)");
}
