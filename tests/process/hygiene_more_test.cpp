// What a worker and the main process must not do: spin while waiting for a slow worker, leave
// threads alive across fork() (also with stats, tracing and pinned memory on), or map a ring
// that can shrink under them.
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "support/clean_state.hpp"
#include "support/datasets.hpp"

using namespace stoker;
using stoker::test::IndexDataset;

namespace {

using Clock = std::chrono::steady_clock;

// CPU time (user + system) of the calling thread, in seconds.
double thread_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

std::size_t thread_count() {
  std::size_t n = 0;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

// A sample carrying the number of threads of the process that made it.
struct ThreadCounting {
  std::size_t n = 64;
  std::size_t size() const { return n; }
  Sample get(std::size_t i) const {
    Sample s;
    s.set("index", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
    s.set("threads", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(thread_count())));
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
  REQUIRE(thread_count() == 1);
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
      REQUIRE(thread_count() == 1);  // the main process, between batches
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
