// Faults: a worker that crashes, exits, throws or hangs; a consumer that holds every slot; a
// loader or iterator destroyed in the middle of it all; a parent that dies. Each must end in a
// clear, typed error within a second (or a bounded shutdown), and leave nothing behind.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

#include <catch2/catch.hpp>

#include "data/error_text.hpp"
#include "os/cgroup.hpp"
#include "os/posix.hpp"
#include "support/clean_state.hpp"
#include "support/datasets.hpp"

using namespace stoker;
using stoker::test::IndexDataset;
using stoker::test::SharedCounters;
using Clock = std::chrono::steady_clock;

namespace stoker::test {
struct SampleError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
}  // namespace stoker::test

namespace {

LoaderOptions options(int workers, std::size_t batch_size = 4) {
  LoaderOptions opt;
  opt.batch_size = batch_size;
  opt.num_workers = workers;
  return opt;
}

// What run_until saw: the samples delivered before `E` was thrown, the error, and the seconds
// from the call to the throw (the iterator, and so the workers' shutdown, ends afterwards).
template <class E>
struct Outcome {
  std::size_t samples;
  E error;
  double seconds;
};

// Runs the epoch until `E` is thrown.
template <class E>
Outcome<E> run_until(DataLoader<IndexDataset>& loader) {
  const Clock::time_point start = Clock::now();
  std::size_t samples = 0;
  std::optional<BatchIterator> it;
  try {
    for (it.emplace(loader.begin()); *it != loader.end(); ++*it) samples += (**it).size();
  } catch (const E& e) {
    return {samples, e, test::seconds_since(start)};
  }
  FAIL("the epoch ended without the expected error");
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("a worker killed by a signal raises WorkerCrashed naming it", "[fault][crash]") {
  const int sig = GENERATE(SIGSEGV, SIGKILL, SIGABRT, SIGBUS);
  CAPTURE(sig);
  test::disable_core_dumps();
  const test::ProcessState baseline = test::process_state();
  {
    IndexDataset dataset{200, [sig](std::size_t i) {
                           if (i == 37 && test::in_worker()) ::raise(sig);
                         }};
    DataLoader loader(dataset, options(2));
    auto [samples, error, took] = run_until<WorkerCrashed>(loader);
    REQUIRE(took < 1.0);
    REQUIRE(samples <= 36);
    REQUIRE(error.signal() == sig);
    REQUIRE(error.worker_id() == 1);  // batch 9 (samples 36..39) goes to worker 9 mod 2
    REQUIRE(error.sample_index() == std::optional<std::size_t>(37));
    REQUIRE(error.batch() == std::optional<std::uint64_t>(9));
    REQUIRE(error.pid() > 0);
    const std::string what = error.what();
    REQUIRE_THAT(what, Catch::Contains("DataLoader worker 1 (pid " + std::to_string(error.pid())));
    REQUIRE_THAT(what, Catch::Contains("while loading sample 37 of batch 9"));
    REQUIRE_THAT(what, Catch::Contains("(" + detail::signal_name(sig) + ")"));
    if (sig == SIGKILL) {
      // Raised by the worker itself: where the OOM-kill counter is readable, the message must
      // clear the OOM killer; where it is not, it names it as the usual suspect.
      REQUIRE_THAT(what, Catch::Contains(detail::read_oom_kill_count() ? "not the OOM killer"
                                                                       : "OOM killer"));
    }
    if (sig == SIGSEGV || sig == SIGABRT) {
      REQUIRE_THAT(what, Catch::Contains("a crash in user code") &&
                             Catch::Contains("num_workers = 0 under a debugger"));
    }
    if (sig == SIGBUS) {
      REQUIRE_THAT(what, Catch::Contains("shared memory is exhausted (the batch ring holds ") &&
                             Catch::Contains("available)"));
    }
    // The likely cause is its own field too, and ends the message.
    REQUIRE_FALSE(error.cause().empty());
    REQUIRE(what.size() >= error.cause().size());
    REQUIRE(what.compare(what.size() - error.cause().size(), std::string::npos, error.cause()) ==
            0);
    // The epoch is over; the loader starts a fresh one with fresh workers.
    REQUIRE(loader.worker_pids().empty());
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("a worker that calls exit() raises WorkerCrashed with its exit code", "[fault][crash]") {
  const bool std_exit = GENERATE(false, true);  // _exit(3), or exit(3) with its atexit handlers
  CAPTURE(std_exit);
  const test::ProcessState baseline = test::process_state();
  {
    IndexDataset dataset{100, [std_exit](std::size_t i) {
                           if (i != 10 || !test::in_worker()) return;
                           if (std_exit) std::exit(3);
                           ::_exit(3);
                         }};
    DataLoader loader(dataset, options(2));
    auto [samples, error, took] = run_until<WorkerCrashed>(loader);
    REQUIRE(took < 1.0);
    REQUIRE(samples <= 8);
    REQUIRE(error.exit_code() == 3);
    REQUIRE(error.signal() == 0);
    REQUIRE_THAT(
        std::string(error.what()),
        Catch::Contains("exited unexpectedly with exit code 3") && Catch::Contains("sample 10"));
    // After a crash the loader can run another epoch.
    loader.dataset().hook = nullptr;
    std::size_t samples_after = 0;
    for (const Batch& batch : loader) samples_after += batch.size();
    REQUIRE(samples_after == 100);
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("a worker killed from outside is noticed within a second", "[fault][crash]") {
  const test::ProcessState baseline = test::process_state();
  {
    IndexDataset dataset{100, [](std::size_t) {
                           if (test::in_worker()) {
                             std::this_thread::sleep_for(std::chrono::milliseconds(20));
                           }
                         }};
    DataLoader loader(dataset, options(2, 1));
    auto it = loader.begin();
    REQUIRE(it != loader.end());
    const pid_t victim = loader.worker_pids().at(0);
    ::kill(victim, SIGKILL);
    const Clock::time_point start = Clock::now();
    try {
      for (; it != loader.end(); ++it) {
      }
      FAIL("no WorkerCrashed");
    } catch (const WorkerCrashed& e) {
      REQUIRE(e.pid() == victim);
      REQUIRE(e.signal() == SIGKILL);
    }
    REQUIRE(test::seconds_since(start) < 1.0);
    REQUIRE(it == loader.end());
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("an exception in get() reaches the consumer and the epoch goes on",
          "[fault][exception]") {
  const int workers = GENERATE(0, 1, 2);
  CAPTURE(workers);
  const test::ProcessState baseline = test::process_state();
  {
    IndexDataset dataset{40, [](std::size_t i) {
                           if (i == 13) throw test::SampleError("cannot decode sample 13");
                         }};
    DataLoader loader(dataset, options(workers));
    int errors = 0;
    const std::size_t samples = test::drain_epoch(loader, [&](const WorkerException& e) {
      ++errors;
      REQUIRE(e.type_name() == "stoker::test::SampleError");
      REQUIRE(e.original_what() == "cannot decode sample 13");
      REQUIRE(e.sample_index() == std::optional<std::size_t>(13));
      const std::string what = e.what();
      REQUIRE_THAT(what, Catch::Contains("stoker::test::SampleError") &&
                             Catch::Contains("in get()") &&
                             Catch::Contains("sample 13 of batch 3") &&
                             Catch::Contains("cannot decode sample 13"));
      if (workers > 0) {
        REQUIRE(e.worker_id() == std::optional<std::size_t>(3 % workers));
        REQUIRE(e.pid() != getpid());
      } else {
        REQUIRE_FALSE(e.worker_id().has_value());
        // In-process, the original exception is nested.
        REQUIRE_THROWS_AS(std::rethrow_if_nested(e), test::SampleError);
      }
    });
    REQUIRE(errors == 1);
    REQUIRE(samples == 36);  // every batch but the one holding sample 13
    if (workers > 0) REQUIRE(loader.worker_pids().empty());
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("an exception in worker_init fails that worker's batches, and the epoch goes on",
          "[fault][exception]") {
  // As in PyTorch: each batch the failed worker is given arrives as a WorkerException (what
  // worker_init should have set up is missing, so it loads nothing), and the iterator goes on
  // with the other worker's batches.
  const bool persistent = GENERATE(false, true);
  CAPTURE(persistent);
  const test::ProcessState baseline = test::process_state();
  {
    LoaderOptions opt = options(2);
    opt.persistent_workers = persistent;
    opt.worker_init = [](std::size_t id) {
      if (id == 1) throw std::runtime_error("no GPU for worker 1");
    };
    DataLoader loader(IndexDataset{100, {}}, opt);
    for (int epoch = 0; epoch < 2; ++epoch) {
      CAPTURE(epoch);
      std::vector<std::uint64_t> batches;
      std::vector<std::uint64_t> failed;
      std::vector<std::size_t> samples;
      auto it = loader.begin();
      for (;;) {
        try {
          if (it == loader.end()) break;
          const Batch& batch = *it;
          batches.push_back(batch.index());
          for (const std::size_t i : batch.indices()) samples.push_back(i);
          ++it;
        } catch (const WorkerException& e) {
          REQUIRE(e.worker_id() == std::optional<std::size_t>(1));
          REQUIRE(e.pid() > 0);
          REQUIRE(e.type_name() == "std::runtime_error");
          REQUIRE(e.original_what() == "no GPU for worker 1");
          REQUIRE(e.details().where == "worker_init");
          REQUIRE(e.details().batch.has_value());
          failed.push_back(*e.details().batch);
          REQUIRE_FALSE(e.sample_index().has_value());
          REQUIRE_THAT(std::string(e.what()),
                       Catch::Contains("in worker_init") &&
                           Catch::Contains("every batch this worker is given fails") &&
                           Catch::Contains("the next fetch returns the next batch"));
        }
      }
      // Batch k goes to worker k mod 2: the odd batches failed, the even ones arrived whole. The
      // first epoch's batch 0 is split between both workers, so it fails too (unless this
      // process forks slowly: then worker 0 loads it alone, and it arrives). Later, whole by
      // worker 0: a persistent loader's next epoch was loaded ahead; a fresh iterator's, whose
      // batches load in far less time than a fork takes, is sent whole to worker 0 as soon as
      // it is forked (after_first_fork).
      const bool split_first = epoch == 0 && !(!batches.empty() && batches.front() == 0);
      std::vector<std::uint64_t> odd;
      std::vector<std::uint64_t> even;
      std::vector<std::size_t> expected;
      for (std::uint64_t k = 0; k < 25; ++k) {
        const bool fails = k % 2 == 1 || (k == 0 && split_first);
        (fails ? odd : even).push_back(k);
        if (!fails) {
          for (std::size_t i = 4 * k; i < 4 * k + 4; ++i) expected.push_back(i);
        }
      }
      REQUIRE(failed == odd);
      REQUIRE(batches == even);
      REQUIRE(samples == expected);
    }
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("no batch within the timeout raises LoaderTimeout", "[fault][timeout]") {
  const test::ProcessState baseline = test::process_state();
  {
    IndexDataset dataset{100, [](std::size_t i) {
                           if (i == 9 && test::in_worker()) {
                             std::this_thread::sleep_for(std::chrono::seconds(30));
                           }
                         }};
    LoaderOptions opt = options(2);
    opt.timeout = std::chrono::milliseconds(300);
    DataLoader loader(dataset, opt);
    auto [samples, error, took] = run_until<LoaderTimeout>(loader);
    REQUIRE(took < 0.3 + 1.0);  // the timeout, then at most a second
    REQUIRE(samples == 8);
    REQUIRE(error.details().worker_id == std::optional<std::size_t>(0));
    REQUIRE(error.details().batch == 2);
    REQUIRE(error.details().sample_index == std::optional<std::size_t>(9));
    REQUIRE(error.details().timeout == std::chrono::milliseconds(300));
    REQUIRE(error.details().waited >= std::chrono::milliseconds(300));
    REQUIRE_THAT(std::string(error.what()),
                 Catch::Contains("no batch within 300 ms") && Catch::Contains("worker 0 (pid"));
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("a get() that always hangs ends in LoaderTimeout, the size probe included",
          "[fault][timeout]") {
  // The first epoch measures the bytes per sample in a probe process before it forks workers:
  // the probe must not wait longer than the timeout allows.
  const test::ProcessState baseline = test::process_state();
  {
    IndexDataset dataset{100, [](std::size_t) {
                           if (test::in_worker())
                             std::this_thread::sleep_for(std::chrono::seconds(30));
                         }};
    LoaderOptions opt = options(2);
    opt.timeout = std::chrono::milliseconds(300);
    DataLoader loader(dataset, opt);
    auto [samples, error, took] = run_until<LoaderTimeout>(loader);
    CAPTURE(took);
    REQUIRE(took < 0.3 + 1.0);
    REQUIRE(samples == 0);
    REQUIRE(error.details().batch == 0);
    REQUIRE_THAT(std::string(error.what()), Catch::Contains("no batch within 300 ms"));
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("destroying an iterator mid-epoch reaps hung workers within 5 seconds",
          "[fault][shutdown]") {
  const bool ignore_sigterm = GENERATE(false, true);
  CAPTURE(ignore_sigterm);
  const test::ProcessState baseline = test::process_state();
  {
    IndexDataset dataset{100, [](std::size_t i) {
                           if (i >= 8 && test::in_worker()) {
                             std::this_thread::sleep_for(std::chrono::seconds(60));
                           }
                         }};
    LoaderOptions opt = options(2);
    opt.sample_bytes = 64;  // no size probe: it would wait 10 s on the hanging samples first
    if (ignore_sigterm) opt.worker_init = [](std::size_t) { std::signal(SIGTERM, SIG_IGN); };
    DataLoader loader(dataset, opt);
    std::optional<BatchIterator> it(loader.begin());
    REQUIRE(*it != loader.end());
    ++*it;
    const std::vector<pid_t> pids = loader.worker_pids();
    REQUIRE(pids.size() == 2);
    const Clock::time_point start = Clock::now();
    it.reset();
    REQUIRE(test::seconds_since(start) < 5.0);
    for (const pid_t pid : pids) REQUIRE_FALSE(test::process_alive(pid));
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("destroying a loader with persistent workers mid-epoch reaps them", "[fault][shutdown]") {
  const test::ProcessState baseline = test::process_state();
  std::vector<pid_t> pids;
  {
    LoaderOptions opt = options(3);
    opt.persistent_workers = true;
    DataLoader loader(IndexDataset{1000, {}}, opt);
    auto it = loader.begin();
    ++it;
    pids = loader.worker_pids();
    REQUIRE(pids.size() == 3);
  }
  for (const pid_t pid : pids) REQUIRE_FALSE(test::process_alive(pid));
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("holding every slot is an error, not a hang", "[fault][slots]") {
  LoaderOptions opt = options(1);
  opt.prefetch_factor = 2;
  DataLoader loader(IndexDataset{40, {}}, opt);
  auto it = loader.begin();
  std::vector<Batch> kept;
  kept.push_back(*it);
  ++it;
  kept.push_back(*it);
  const Clock::time_point start = Clock::now();
  REQUIRE_THROWS_WITH(++it, Catch::Contains("still holds 2 batches") &&
                                Catch::Contains("batch.clone()") &&
                                Catch::Contains("prefetch_factor"));
  REQUIRE(test::seconds_since(start) < 1.0);
  // Releasing one lets the epoch go on from where it stopped.
  kept.clear();
  std::size_t samples = 0;
  for (; it != loader.end(); ++it) samples += it->size();
  REQUIRE(samples == 32);
}

TEST_CASE("a batch released by another thread unblocks the consumer", "[fault][slots]") {
  LoaderOptions opt = options(1);
  opt.prefetch_factor = 2;
  DataLoader loader(IndexDataset{40, {}}, opt);
  auto it = loader.begin();
  std::vector<Batch> kept{*it};
  ++it;
  kept.push_back(*it);
  std::thread releaser([&kept] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    kept.clear();
  });
  ++it;  // waits for the other thread instead of failing
  REQUIRE(it->indices()[0] == 8);
  releaser.join();
}

TEST_CASE("a batch larger than max_batch_bytes is a clear error", "[fault][slot]") {
  struct Big {
    std::size_t size() const { return 4; }
    Sample get(std::size_t) const {
      Sample s;
      s.set("x", Tensor::zeros(DType::kUInt8, {2 << 20}));
      return s;
    }
  };
  LoaderOptions opt;
  opt.batch_size = 1;
  opt.num_workers = 1;
  opt.max_batch_bytes = 1 << 20;
  DataLoader loader(Big{}, opt);
  REQUIRE_THROWS_WITH(loader.begin() != loader.end(),
                      Catch::Contains("max_batch_bytes") && Catch::Contains("does not fit"));
}

TEST_CASE("workers exit when the main process is killed", "[fault][parent]") {
  // From the main thread (PR_SET_PDEATHSIG) and from another thread (the lifeline pipe), with
  // the worker busy inside get() or idle.
  const bool from_thread = GENERATE(false, true);
  const bool busy = GENERATE(false, true);
  CAPTURE(from_thread, busy);
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t parent = fork();
  REQUIRE(parent >= 0);
  if (parent == 0) {
    auto run = [&] {
      IndexDataset dataset{1000, [busy](std::size_t) {
                             if (busy && test::in_worker()) {
                               volatile int forever = 0;
                               while (forever == 0) {
                               }
                             }
                           }};
      LoaderOptions opt = options(2);
      opt.persistent_workers = true;
      opt.sample_bytes = 64;  // no size probe: it would wait 10 s on the hanging samples first
      static std::optional<DataLoader<IndexDataset>> loader;
      loader.emplace(dataset, opt);
      static std::optional<BatchIterator> it;
      it.emplace(loader->begin());
      if (!busy) (void)(*it != loader->end());
      const std::vector<pid_t> pids = loader->worker_pids();
      (void)!write(fds[1], pids.data(), pids.size() * sizeof(pid_t));
    };
    if (from_thread) {
      std::thread(run).join();
    } else {
      run();
    }
    pause();
    _exit(0);
  }
  close(fds[1]);
  pid_t pids[2] = {0, 0};
  REQUIRE(read(fds[0], pids, sizeof pids) == sizeof pids);
  close(fds[0]);
  REQUIRE(test::process_alive(pids[0]));
  ::kill(parent, SIGKILL);
  waitpid(parent, nullptr, 0);
  const Clock::time_point start = Clock::now();
  while ((test::process_alive(pids[0]) || test::process_alive(pids[1])) &&
         test::seconds_since(start) < 5.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  INFO("workers still alive after " << test::seconds_since(start) << " s");
  REQUIRE_FALSE(test::process_alive(pids[0]));
  REQUIRE_FALSE(test::process_alive(pids[1]));
  REQUIRE(test::seconds_since(start) < 2.0);
}

TEST_CASE("fork failures are clear errors and leave nothing behind", "[fault][resources]") {
  const test::ProcessState baseline = test::process_state();
  {
    LoaderOptions opt = options(3);
    opt.sample_bytes = 24;  // no probe process: the injected failure is for worker 0's fork
    DataLoader loader(IndexDataset{100, {}}, opt);
    detail::posix::inject_failure(detail::posix::Call::kFork, EAGAIN, 1);
    REQUIRE_THROWS_WITH(loader.begin(), Catch::Contains("fork() for worker 0 failed") &&
                                            Catch::Contains("lower num_workers"));
    // The failed begin() did not use up epoch 0: the next one runs it, completely.
    REQUIRE(loader.epoch() == 0);
    std::size_t samples = 0;
    for (const Batch& batch : loader) {
      samples += batch.size();
      REQUIRE(batch.epoch() == 0);
    }
    REQUIRE(samples == 100);
  }
  detail::posix::clear_injected_failures();
  STOKER_REQUIRE_CLEAN(baseline);
}
