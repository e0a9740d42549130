// CachedDataset: a slow source (here 1 ms a sample, standing in for decoding or network
// storage) is paid once per sample. The cache lives in shared memory created before the
// workers fork, so a sample cached by one worker is a hit for every other worker in later
// epochs, which run at memory speed. Its hit and miss counters are shared too, and
// loader.stats() reports them.
#include <chrono>
#include <cstdio>
#include <thread>

#include <stoker/stoker.hpp>

#include "cli.hpp"

namespace {

struct SlowSource {
  std::size_t size() const { return 400; }
  stoker::Sample get(std::size_t i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    stoker::Tensor features = stoker::Tensor::empty(stoker::DType::kFloat32, {64});
    for (std::int64_t k = 0; k < 64; ++k) {
      features.data<float>()[k] = static_cast<float>(i) + static_cast<float>(k) / 64.0f;
    }
    stoker::Sample s;
    s.set("features", std::move(features));
    s.set("label", stoker::Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i % 10)));
    return s;
  }
};

}  // namespace

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: cached_dataset\n  CachedDataset: a slow first epoch, fast later ones, "
                   "with hit and miss counts.\n  It takes no arguments.");
  cli.done();
  // Main process, before any worker exists: the budget bounds the cached bytes (~450 bytes a
  // sample here, with the cache's own layout); past it, samples come from the source each time.
  stoker::CachedDataset cached(SlowSource{}, std::size_t{8} << 20);
  stoker::LoaderOptions opt;
  opt.batch_size = 50;
  opt.num_workers = 2;
  opt.shuffle = true;  // each epoch puts a sample on a different worker
  stoker::DataLoader loader(std::move(cached), opt);
  double seconds[3] = {};
  std::size_t wrong = 0;
  for (std::size_t epoch = 0; epoch < 3; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    for (const stoker::Batch& batch : loader) {
      const float* f = batch["features"].data<float>();  // [50, 64]
      for (std::size_t r = 0; r < batch.size(); ++r) {
        wrong += f[r * 64] == static_cast<float>(batch.indices()[r]) ? 0U : 1U;
      }
    }
    seconds[epoch] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const stoker::LoaderStats stats = loader.stats();
    std::printf("epoch %zu: %6.1f ms; cache hits %llu, misses %llu, %llu bytes cached\n", epoch,
                seconds[epoch] * 1e3, static_cast<unsigned long long>(stats.cache_hits),
                static_cast<unsigned long long>(stats.cache_misses),
                static_cast<unsigned long long>(stats.cache_bytes));
  }
  const stoker::CacheStats cache = loader.dataset().cache_stats();
  std::printf("%llu samples cached, %llu rejected by the budget; %zu wrong values\n",
              static_cast<unsigned long long>(cache.entries),
              static_cast<unsigned long long>(cache.rejected), wrong);
  const bool faster = seconds[1] < seconds[0] / 4 && seconds[2] < seconds[0] / 4;
  return cache.misses == 400 && cache.hits == 800 && wrong == 0 && faster ? 0 : 1;
}
