// Shutdown of workers that are stopped or spinning, errors in a user collate, resource
// exhaustion (file descriptors, shared memory), the warning about forking from threads, and
// what neither process may do: spin while waiting for a slow worker, start threads (also with
// stats, tracing and pinned memory on), or map a ring that can shrink under them.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <catch2/catch.hpp>

#include "os/log.hpp"
#include "os/posix.hpp"
#include "support/captured_log.hpp"
#include "support/clean_state.hpp"
#include "support/datasets.hpp"

using namespace stoker;
using stoker::test::IndexDataset;
using Clock = std::chrono::steady_clock;

TEST_CASE("stopped and spinning workers are killed on shutdown", "[fault][shutdown]") {
  const bool stopped = GENERATE(false, true);
  CAPTURE(stopped);
  const test::ProcessState baseline = test::process_state();
  {
    IndexDataset dataset{100, [](std::size_t i) {
                           if (i >= 8 && test::in_worker()) {
                             volatile int forever = 0;
                             while (forever == 0) {
                             }
                           }
                         }};
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = 2;
    opt.sample_bytes = 24;  // no size probe: it would spin on a later index for 10 s
    DataLoader loader(dataset, opt);
    std::optional<BatchIterator> it(loader.begin());
    REQUIRE(*it != loader.end());
    const std::vector<pid_t> pids = loader.worker_pids();
    if (stopped) {
      for (const pid_t pid : pids) ::kill(pid, SIGSTOP);
    }
    const Clock::time_point start = Clock::now();
    it.reset();
    REQUIRE(test::seconds_since(start) < 5.0);
    for (const pid_t pid : pids) REQUIRE_FALSE(test::process_alive(pid));
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("an exception in a user collate names the collate", "[fault][exception]") {
  const int workers = GENERATE(0, 2);
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = workers;
  opt.collate = [](std::span<const Sample> samples, BatchBuilder& out) {
    if (samples[0]["index"].item<std::int64_t>() == 8) throw std::length_error("collate says no");
    collate_stack(samples, out);
  };
  DataLoader loader(IndexDataset{20, {}}, opt);
  int errors = 0;
  const std::size_t samples = test::drain_epoch(loader, [&](const WorkerException& e) {
    ++errors;
    REQUIRE(e.type_name() == "std::length_error");
    REQUIRE(e.details().where == "collate");
    REQUIRE_THAT(std::string(e.what()), Catch::Contains("in collate while loading batch 2") &&
                                            Catch::Contains("collate says no"));
  });
  REQUIRE(errors == 1);
  REQUIRE(samples == 16);
}

TEST_CASE("forking from a multi-threaded process warns once", "[hygiene]") {
  const test::CapturedLog log;
  std::atomic<bool> done{false};
  std::thread other([&done] {
    while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  {
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = 2;
    DataLoader loader(IndexDataset{20, {}}, opt);
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (const Batch& batch : loader) (void)batch;
    }
  }
  done = true;
  other.join();
  const std::string text = log.text();
  INFO(text);
  REQUIRE_THAT(text, Catch::Contains("forking DataLoader workers from a process with 2 threads"));
  // Once per process, not once per fork.
  REQUIRE(text.find("forking DataLoader") == text.rfind("forking DataLoader"));
}

TEST_CASE("running out of file descriptors is a clear error", "[fault][resources]") {
#if defined(__SANITIZE_ADDRESS__)
  // The sanitizers' own runtime needs descriptors (to check memory it reports on), so with
  // none left it fails before stoker can: this test runs in the normal build only.
  WARN("skipped under the sanitizers, whose runtime needs file descriptors of its own");
  return;
#endif
  const test::ProcessState baseline = test::process_state();
  rlimit saved{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &saved) == 0);
  {
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = 4;
    DataLoader loader(IndexDataset{40, {}}, opt);
    // Room for a couple of descriptors, not for the loader's eventfds, pipes and pidfds.
    const rlimit tight{static_cast<rlim_t>(test::open_fd_count() + 3), saved.rlim_max};
    REQUIRE(setrlimit(RLIMIT_NOFILE, &tight) == 0);
    std::string message;
    try {
      auto it = loader.begin();
    } catch (const Error& e) {
      message = e.what();
    }
    REQUIRE(setrlimit(RLIMIT_NOFILE, &saved) == 0);
    INFO(message);
    REQUIRE_THAT(message, Catch::Contains("ulimit -n"));
    // With descriptors back, the loader works.
    std::size_t samples = 0;
    for (const Batch& batch : loader) samples += batch.size();
    REQUIRE(samples == 40);
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("shared memory that cannot be backed is an error, not SIGBUS", "[fault][resources]") {
  const test::ProcessState baseline = test::process_state();
  SECTION("in the main process, when the ring is created") {
    detail::posix::inject_failure(detail::posix::Call::kMadvise, ENOMEM, 1);
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = 2;
    DataLoader loader(IndexDataset{40, {}}, opt);
    REQUIRE_THROWS_WITH(loader.begin(), Catch::Contains("cannot back the ring's control block") &&
                                            Catch::Contains("Cannot allocate memory"));
    detail::posix::clear_injected_failures();
  }
  SECTION("in a worker, when a batch needs more of its slot") {
    struct Big {
      std::size_t size() const { return 8; }
      Sample get(std::size_t i) const {
        // The first batch needs 4 MiB of the slot: the main process has only backed the
        // slot's first 64 KiB, so the worker must back the rest, and is made to fail.
        if (i == 0 && test::in_worker()) {
          detail::posix::inject_failure(detail::posix::Call::kMadvise, ENOMEM, 1);
        }
        Sample s;
        s.set("x", Tensor::zeros(DType::kUInt8, {1 << 20}));
        return s;
      }
    };
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = 1;
    DataLoader loader(Big{}, opt);
    try {
      for (const Batch& batch : loader) (void)batch;
      FAIL("no error");
    } catch (const WorkerException& e) {
      REQUIRE(e.type_name() == "stoker::Error");
      REQUIRE_THAT(e.original_what(), Catch::Contains("cannot back") &&
                                          Catch::Contains("of shared memory for batch slot") &&
                                          Catch::Contains("lower batch_size"));
    }
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

namespace {

// CPU time (user + system) of the calling thread, in seconds.
double thread_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// A sample carrying the number of threads of the process that made it.
struct ThreadCounting {
  std::size_t n = 64;
  std::size_t size() const { return n; }
  Sample get(std::size_t i) const {
    Sample s;
    s.set("index", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
    s.set("threads", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(test::thread_count())));
    return s;
  }
};

}  // namespace

TEST_CASE("the consumer sleeps, not spins, while a slow worker makes its batch", "[hygiene]") {
  // Each batch takes a worker 40 ms (10 samples sleeping 4 ms): the consumer waits nearly all
  // of the epoch, and its own CPU time must stay a small part of that wait.
  LoaderOptions opt;
  opt.batch_size = 10;
  opt.num_workers = 1;
  DataLoader loader(IndexDataset{100,
                                 [](std::size_t) {
                                   if (test::in_worker()) {
                                     std::this_thread::sleep_for(std::chrono::milliseconds(4));
                                   }
                                 }},
                    opt);
  // Measured from the first batch on, so the forks and the ring's set-up do not count.
  double cpu_before = 0;
  Clock::time_point start;
  std::size_t samples = 0;
  for (const Batch& batch : loader) {
    if (samples == 0) {
      cpu_before = thread_cpu_seconds();
      start = Clock::now();
    }
    samples += batch.size();
  }
  const double wall = test::seconds_since(start);
  const double cpu = thread_cpu_seconds() - cpu_before;
  CAPTURE(wall, cpu);
  REQUIRE(samples == 100);
  REQUIRE(wall > 0.3);        // 9 more batches x 40 ms
  REQUIRE(cpu < 0.1 * wall);  // a spinning consumer would use about all of it
}

TEST_CASE(
    "no thread is started, in the main process or a worker, with stats, tracing and "
    "pinned memory on",
    "[hygiene]") {
  // A thread alive in the main process when it forks would leave its locks held in the child;
  // stoker starts none, whatever the options. A forked worker has one thread by construction:
  // the check there guards against a worker that starts its own.
  REQUIRE(test::thread_count() == 1);
  const std::string trace = "/tmp/stoker-threads-" + std::to_string(getpid()) + ".json";
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.num_workers = 2;
  opt.collect_stats = true;
  opt.log_interval = std::chrono::milliseconds(10);
  opt.trace_path = trace;
  opt.pin_memory = true;
  opt.pinned_allocator = std::make_shared<PinnedAllocator>(PinnedOptions{std::size_t{64} << 20});
  DataLoader loader(ThreadCounting{}, opt);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::size_t samples = 0;
    for (const Batch& batch : loader) {
      REQUIRE(test::thread_count() == 1);  // the main process, between batches
      const Tensor& threads = batch["threads"];
      for (std::size_t r = 0; r < batch.size(); ++r) {
        CAPTURE(epoch, r);
        REQUIRE(threads.data<std::int64_t>()[r] == 1);
      }
      samples += batch.size();
    }
    REQUIRE(samples == 64);
  }
  std::remove(trace.c_str());
}

TEST_CASE("the ring's memfd is sealed against shrinking", "[hygiene]") {
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 1;
  DataLoader loader(IndexDataset{16, {}}, opt);
  auto it = loader.begin();
  REQUIRE(it != loader.end());
  // The ring keeps no descriptor once mapped: reach the memfd through its mapping.
  std::string range;
  {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) {
      if (line.find("memfd:stoker-ring") != std::string::npos) {
        range = line.substr(0, line.find(' '));
        break;
      }
    }
  }
  REQUIRE_FALSE(range.empty());
  const int fd = open(("/proc/self/map_files/" + range).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    WARN("cannot open /proc/self/map_files/" << range << " (needs CAP_SYS_ADMIN): not checked");
    return;
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  close(fd);
  REQUIRE(seals >= 0);
  REQUIRE((seals & F_SEAL_SHRINK) != 0);
  REQUIRE((seals & F_SEAL_GROW) != 0);
}
