// Generator: stoker's random number generator (xoshiro256**, seeded through SplitMix64). Its
// output is the same on every machine and compiler, unlike std:: distributions, so anything
// built on it (shuffles, samplers, sample_rng()) is reproducible. sample_rng() is the generator
// of the sample being loaded: seeded from (seed, epoch, index) alone, so random augmentation is
// identical for any num_workers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <utility>

namespace stoker {

class Generator {
 public:
  using result_type = std::uint64_t;

  explicit Generator(std::uint64_t seed = 0) noexcept;
  // A generator whose state mixes every key: Generator::from({seed, epoch, index}).
  static Generator from(std::initializer_list<std::uint64_t> keys) noexcept;

  std::uint64_t next() noexcept;
  std::uint64_t operator()() noexcept { return next(); }
  static constexpr std::uint64_t min() noexcept { return 0; }
  static constexpr std::uint64_t max() noexcept {
    return std::numeric_limits<std::uint64_t>::max();
  }

  // Uniform in [0, n), without modulo bias (Lemire's method). n > 0.
  std::uint64_t below(std::uint64_t n) noexcept;
  // Uniform in [0, 1) with 53 random bits.
  double uniform() noexcept;
  // Uniform in [low, high).
  double uniform(double low, double high) noexcept { return low + (high - low) * uniform(); }
  // True with probability p.
  bool bernoulli(double p) noexcept { return uniform() < p; }
  // Standard normal (Box-Muller).
  double normal() noexcept;
  // Fisher-Yates over [first, last), random-access iterators.
  template <class It>
  void shuffle(It first, It last) noexcept {
    const auto n = static_cast<std::uint64_t>(last - first);
    for (std::uint64_t i = n; i > 1; --i) {
      using std::swap;
      swap(first[static_cast<std::ptrdiff_t>(i - 1)], first[static_cast<std::ptrdiff_t>(below(i))]);
    }
  }

 private:
  std::uint64_t s_[4];
};

// Inside a dataset's get(i) (in a worker, or in the main process with num_workers == 0): the
// generator of sample i in this epoch, seeded from (LoaderOptions::seed, epoch, i). Each call
// within one get() returns the same generator, advancing. Throws std::logic_error outside get().
Generator& sample_rng();

// Inside a dataset's get(i) or next(), as sample_rng(): the epoch of the sample being loaded
// (the loader's epoch; 0 while the loader measures sample sizes for its memory estimate). What
// a dataset whose mapping changes each epoch (MixtureDataset) keys it on, since get(i) is not
// told the epoch. Either process; never blocks. Throws std::logic_error outside get().
std::uint64_t current_epoch();

}  // namespace stoker
