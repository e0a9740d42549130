// memory_estimate: the loader's memory estimate beside the measured peak, for the workload the
// memory guide uses: 150 KB samples (uint8[150000] and an int64 label), batch 64, a consumer that
// holds each batch for 1 ms, num_workers 0, 1, 2 and 4. The peak is the highest sum of the PSS
// of the main process and its workers (shared ring pages are split between the processes that
// map them, so the sum counts them once), sampled every 2 ms over epochs 2 and 3 (and at the
// end of epoch 1, which forks the persistent workers before the sampling thread starts).
//
//   build/release/bench/memory_estimate [--workers 0,1,2,4] [--epochs 3]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "os/proc.hpp"
#include "stoker/stoker.hpp"

namespace {

struct Sample150k {
  std::size_t n = 64 * 30;
  std::size_t size() const { return n; }
  stoker::Sample get(std::size_t i) const {
    stoker::Tensor x = stoker::Tensor::empty(stoker::DType::kUInt8, {150'000});
    std::memset(x.raw_data(), static_cast<int>(i % 251), x.nbytes());
    stoker::Sample s;
    s.set("data", std::move(x));
    s.set("label", stoker::Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i % 10)));
    return s;
  }
};

// This process's PSS plus its children's (the workers, forked by the main thread).
std::uint64_t tree_pss() {
  std::uint64_t total = 0;
  if (const auto m = stoker::detail::read_process_memory(0)) total += m->pss_bytes;
  std::string children;
  std::FILE* f = std::fopen(fmt::format("/proc/self/task/{}/children", ::getpid()).c_str(), "r");
  if (f != nullptr) {
    char buf[4096];
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    children = buf;
    std::fclose(f);
  }
  std::istringstream in(children);
  for (pid_t pid = 0; in >> pid;) {
    if (const auto m = stoker::detail::read_process_memory(pid)) total += m->pss_bytes;
  }
  return total;
}

double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> worker_counts = {0, 1, 2, 4};
  int epochs = 3;  // at least 2
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--workers" && i + 1 < argc) {
      worker_counts.clear();
      std::istringstream in(argv[++i]);
      for (std::string w; std::getline(in, w, ',');) worker_counts.push_back(std::atoi(w.c_str()));
    } else if (flag == "--epochs" && i + 1 < argc) {
      epochs = std::max(2, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: memory_estimate [--workers 0,1,2,4] [--epochs E]\n");
      return 2;
    }
  }
  std::printf(
      "| num_workers | estimate (MiB) | measured peak tree PSS (MiB) | measured / estimate "
      "| rule of thumb (MiB) |\n|---|---|---|---|---|\n");
  std::vector<std::string> json;
  for (const int workers : worker_counts) {
    stoker::LoaderOptions opt;
    opt.batch_size = 64;
    opt.num_workers = workers;
    opt.persistent_workers = workers > 0;  // forked once, before the sampling thread starts
    stoker::DataLoader loader(Sample150k{}, opt);
    const stoker::MemoryEstimate e = loader.memory_estimate();
    std::size_t samples = 0;
    for (const stoker::Batch& batch : loader) samples += batch.size();  // forks the workers
    std::atomic<bool> done{false};
    std::atomic<std::uint64_t> peak{tree_pss()};
    std::thread sampler([&] {
      while (!done.load()) {
        const std::uint64_t now = tree_pss();
        if (now > peak.load()) peak.store(now);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
    for (int epoch = 1; epoch < epochs; ++epoch) {
      for (const stoker::Batch& batch : loader) {
        samples += batch.size();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the "training step"
      }
    }
    done = true;
    sampler.join();
    const double ratio = static_cast<double>(peak.load()) / static_cast<double>(e.total_bytes);
    std::printf("| %d | %.1f | %.1f | %.2f | %.1f |\n", workers, mib(e.total_bytes),
                mib(peak.load()), ratio, mib(e.rule_of_thumb_bytes));
    json.push_back(fmt::format(
        "{{\"bench\": \"memory_estimate\", \"workers\": {}, \"batch_size\": 64, "
        "\"bytes_per_sample\": {}, \"estimate_bytes\": {}, \"ring_bytes\": {}, "
        "\"worker_private_bytes\": {}, \"worker_base_bytes\": {}, \"main_bytes\": {}, "
        "\"peak_tree_pss_bytes\": {}, "
        "\"ratio\": {:.3f}, \"samples\": {}, \"command\": "
        "\"build/release/bench/memory_estimate\"}}",
        workers, e.bytes_per_sample, e.total_bytes, e.ring_bytes, e.worker_private_bytes,
        e.worker_base_bytes, e.main_bytes, peak.load(), ratio, samples));
  }
  std::printf("\n");
  for (const std::string& line : json) std::printf("%s\n", line.c_str());
  return 0;
}
