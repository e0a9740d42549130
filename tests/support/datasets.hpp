// Datasets and helpers the process tests share.
#pragma once

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <new>
#include <stdexcept>
#include <vector>

#include "stoker/stoker.hpp"

namespace stoker::test {

// Counters in shared anonymous memory, mapped before a loader forks, so its workers and the
// test see the same values.
class SharedCounters {
 public:
  explicit SharedCounters(std::size_t n = 512) : n_(n) {
    void* p = mmap(nullptr, n * sizeof(std::atomic<std::int64_t>), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    counters_ = static_cast<std::atomic<std::int64_t>*>(p);
    for (std::size_t i = 0; i < n; ++i) new (&counters_[i]) std::atomic<std::int64_t>(0);
  }
  ~SharedCounters() { munmap(counters_, n_ * sizeof(std::atomic<std::int64_t>)); }
  SharedCounters(const SharedCounters&) = delete;
  SharedCounters& operator=(const SharedCounters&) = delete;
  std::atomic<std::int64_t>& operator[](std::size_t i) const { return counters_[i]; }
  std::size_t size() const { return n_; }

 private:
  std::size_t n_;
  std::atomic<std::int64_t>* counters_;
};

// Sample i: "index" = i (int64 scalar) and "data" = float32[4] {i, i+1, i+2, i+3}. An optional
// hook runs first in get(), for tests that make a sample slow, crash or throw.
struct IndexDataset {
  std::size_t n = 100;
  std::function<void(std::size_t)> hook;

  std::size_t size() const { return n; }
  Sample get(std::size_t i) const {
    if (hook) hook(i);
    const auto v = static_cast<float>(i);
    Sample s;
    s.set("index", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
    s.set("data", Tensor::from<float>({v, v + 1, v + 2, v + 3}));
    return s;
  }
};

// Sample i: "index" = i. get() keeps kMiB MiB of the loading process's own memory, written
// at its first call (one buffer per process and kMiB): memory a worker holds besides its
// samples, for the tests of the worker base the memory check measures.
template <std::size_t kMiB>
struct KeepsOwnMemory {
  std::size_t n = 64;

  std::size_t size() const { return n; }
  Sample get(std::size_t i) const {
    static std::vector<char> kept;
    if (kept.empty()) kept.assign(kMiB << 20, 'x');
    Sample s;
    s.set("index", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i) + kept[i] - 'x'));
    return s;
  }
};

// True when running inside a DataLoader worker process.
inline bool in_worker() { return worker_info() != nullptr; }

// The "index" field of a batch as a vector.
inline std::vector<std::int64_t> batch_indices(const Batch& batch) {
  const Tensor& t = batch["index"];
  const std::int64_t* p = t.data<std::int64_t>();
  return std::vector<std::int64_t>(p, p + t.numel());
}

// Crash tests kill workers with SIGSEGV or SIGABRT: no core files for those.
inline void disable_core_dumps() {
  const rlimit none{0, 0};
  setrlimit(RLIMIT_CORE, &none);
}

// Runs an epoch through the iterator protocol, the way a program that tolerates bad samples
// would: each WorkerException goes to `on_error` and the epoch goes on. Returns the samples
// delivered.
template <class Loader, class OnError>
std::size_t drain_epoch(Loader& loader, OnError&& on_error) {
  auto it = loader.begin();
  std::size_t samples = 0;
  for (;;) {
    try {
      if (it == loader.end()) return samples;
      samples += it->size();
      ++it;
    } catch (const WorkerException& e) {
      on_error(e);
    }
  }
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace stoker::test
