// What MixtureDataset's index mapping costs: locate() per index (two keyed permutations and a
// binary search, no table), and an in-process epoch of tiny samples with and without the
// mixture in front. Prints figures; asserts nothing.
//   build/release/bench/mixture_locate
#include <chrono>
#include <cstdint>
#include <cstdio>

#include <stoker/stoker.hpp>

namespace {

// 8-byte samples that cost next to nothing to make: the mapping is what is timed.
struct Tiny {
  std::size_t n = 0;
  std::size_t size() const { return n; }
  stoker::Sample get(std::size_t i) const {
    return stoker::Sample().set("x",
                                stoker::Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
  }
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

template <class D>
double epoch_seconds(D dataset) {
  stoker::LoaderOptions opt;
  opt.batch_size = 256;
  opt.sample_bytes = 8;  // no probe
  stoker::DataLoader loader(std::move(dataset), opt);
  double best = 1e9;
  for (int e = 0; e < 5; ++e) {
    const auto start = std::chrono::steady_clock::now();
    std::size_t rows = 0;
    for (const stoker::Batch& batch : loader) rows += batch.size();
    best = std::min(best, seconds_since(start));
    if (rows != loader.dataset().size()) std::fprintf(stderr, "short epoch\n");
  }
  return best;
}

}  // namespace

int main() {
  constexpr std::size_t kSamples = 2'000'000;
  const auto mixture = [] {
    return stoker::MixtureDataset(
        {{Tiny{1'000'000}, 0.5}, {Tiny{300'000}, 0.3}, {Tiny{5'000}, 0.2}}, kSamples, 1);
  };
  const stoker::MixtureDataset m = mixture();
  std::uint64_t sink = 0;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < kSamples; ++i) {
    const stoker::PartIndex at = m.locate(i, 3);
    sink += at.part + at.index;
  }
  const double locate = seconds_since(start);
  std::printf("locate(): %.0f ns per index over %zu indices (checksum %llu)\n",
              locate / kSamples * 1e9, kSamples, static_cast<unsigned long long>(sink));
  const double plain = epoch_seconds(Tiny{kSamples});
  const double mixed = epoch_seconds(mixture());
  std::printf(
      "in-process epoch of %zu tiny samples (best of 5): %.0f ns a sample plain, %.0f ns "
      "through the mixture\n",
      kSamples, plain / kSamples * 1e9, mixed / kSamples * 1e9);
  return 0;
}
