// A training program whose main thread exits through pthread_exit while another thread goes on,
// for tests/process/lifetime_test.cpp (which cannot do it inside a Catch2 test: pthread_exit
// unwinds the main thread's stack, and Catch2's catch (...) blocks stop the unwinding). It
// prints one report line on stdout and then, for the scenarios that end in a kill, waits for
// the test to SIGKILL it.
//
//   main_thread_exit train <persistent 0|1>   epoch 0 begun (and its first batch fetched) on
//                                              the main thread, which then exits; epochs 0-2
//                                              checked on another thread;
//                                              "ok pids W1 W2" once epoch 3 has its batch 1
//   main_thread_exit probe                     "ok pids P" from inside the size probe's get()
//   main_thread_exit proc                      the /proc readers before and after the main
//                                              thread exits, then exits 0
#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "os/cgroup.hpp"
#include "os/proc.hpp"
#include "stoker/stoker.hpp"

namespace {

constexpr std::size_t kSamples = 40;

// Sample i: "index" = i.
struct Indices {
  std::size_t size() const { return kSamples; }
  stoker::Sample get(std::size_t i) const {
    stoker::Sample s;
    s.set("index", stoker::Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
    return s;
  }
};

// In the size probe's get(): reports the probe's pid, then stays (as a slow decode would).
struct SlowInProbe {
  std::size_t size() const { return kSamples; }
  stoker::Sample get(std::size_t i) const {
    if (stoker::worker_info() != nullptr) {
      std::printf("ok pids %d\n", static_cast<int>(::getpid()));
      std::fflush(stdout);
      ::sleep(30);
    }
    return Indices{}.get(i);
  }
};

[[noreturn]] void fail(const std::string& what) {
  std::printf("error %s\n", what.c_str());
  std::fflush(stdout);
  ::_exit(1);
}

// Waits (up to 2 s) until the main thread has exited: its /proc/<pid>/stat says zombie.
bool wait_for_zombie_leader() {
  const std::string path = "/proc/" + std::to_string(::getpid()) + "/stat";
  for (int i = 0; i < 1000; ++i) {
    std::ifstream stat(path);
    const std::string text((std::istreambuf_iterator<char>(stat)),
                           std::istreambuf_iterator<char>());
    const std::size_t close = text.rfind(')');
    if (close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'Z') {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

void train(stoker::DataLoader<Indices>* loader, stoker::BatchIterator* first) {
  try {
    if (!wait_for_zombie_leader()) fail("the main thread did not exit within 2 s");
    for (std::size_t epoch = 0; epoch < 3; ++epoch) {
      std::vector<int> seen(kSamples, 0);
      auto record = [&](const stoker::Batch& batch) {
        const stoker::Tensor& t = batch["index"];
        for (std::size_t k = 0; k < t.numel(); ++k) {
          ++seen.at(static_cast<std::size_t>(t.data<std::int64_t>()[k]));
        }
      };
      if (epoch == 0) {
        for (; *first != loader->end(); ++*first) record(**first);
        delete first;
      } else {
        for (const stoker::Batch& batch : *loader) record(batch);
      }
      for (std::size_t i = 0; i < kSamples; ++i) {
        if (seen[i] != 1) {
          fail("epoch " + std::to_string(epoch) + ": sample " + std::to_string(i) + " arrived " +
               std::to_string(seen[i]) + " times");
        }
      }
    }
    auto* last = new stoker::BatchIterator(loader->begin());
    if (*last == loader->end()) fail("epoch 3 is empty");
    ++*last;  // batch 1: every worker is forked (worker 1 may follow batch 0: a slow fork)
    if (*last == loader->end()) fail("epoch 3 has one batch");
    std::string line = "ok pids";
    for (const pid_t pid : loader->worker_pids()) line += " " + std::to_string(pid);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  } catch (const std::exception& e) {
    fail(e.what());
  }
  for (;;) ::pause();  // until the test SIGKILLs this process
}

// What the /proc readers say, as one comparable line.
std::string proc_view() {
  std::ostringstream out;
  const stoker::detail::MemoryCgroup cg = stoker::detail::find_memory_cgroup();
  out << "cgroup v" << cg.version << " " << cg.directory;
  const std::optional<stoker::detail::OomCount> oom = stoker::detail::read_oom_kill_count();
  out << ", oom counter " << (oom ? oom->source : std::string("none"));
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  if (scenario == "train" && argc == 3) {
    stoker::LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = 2;
    opt.persistent_workers = std::strcmp(argv[2], "1") == 0;
    // On the heap: pthread_exit unwinds the main thread's stack, destroying what lives there.
    auto* loader = new stoker::DataLoader<Indices>(Indices{}, opt);
    // Epoch 0 begins here, so its workers (and the size probe) are forked by the main thread;
    // its first batch is fetched here too, so the workers have set themselves up (a
    // thread-bound parent-death signal, for one, would be armed) before the main thread exits.
    auto* first = new stoker::BatchIterator(loader->begin());
    if (*first == loader->end()) fail("epoch 0 is empty");
    std::thread(train, loader, first).detach();
    ::pthread_exit(nullptr);
  }
  if (scenario == "probe" && argc == 2) {
    stoker::LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = 1;
    stoker::DataLoader loader(SlowInProbe{}, opt);
    (void)loader.memory_estimate();  // runs the probe; the test kills this process meanwhile
    fail("the probe returned");
  }
  if (scenario == "proc" && argc == 2) {
    const std::string before = proc_view();
    std::thread([before] {
      const bool zombie = wait_for_zombie_leader();
      const std::string after = proc_view();
      const std::optional<stoker::detail::ProcessMemory> own =
          stoker::detail::read_process_memory(0);
      const stoker::MemoryEstimate estimate = stoker::estimate_memory(stoker::EstimateInputs{});
      std::printf("%s\nbefore: %s\nafter: %s\nown rss: %llu\nestimate main: %llu\n",
                  zombie ? "zombie" : "alive", before.c_str(), after.c_str(),
                  static_cast<unsigned long long>(own ? own->rss_bytes : 0),
                  static_cast<unsigned long long>(estimate.main_bytes));
      std::fflush(stdout);
      ::_exit(0);
    }).detach();
    ::pthread_exit(nullptr);
  }
  std::fprintf(stderr, "usage: main_thread_exit train <persistent 0|1> | probe | proc\n");
  return 2;
}
