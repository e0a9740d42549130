#include "stoker/random.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>

#include "data/random_state.hpp"

namespace stoker {
namespace {

std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }

__extension__ using Uint128 = unsigned __int128;

}  // namespace

Generator::Generator(std::uint64_t seed) noexcept {
  for (std::uint64_t& word : s_) word = splitmix64(seed);
}

Generator Generator::from(std::initializer_list<std::uint64_t> keys) noexcept {
  std::uint64_t state = 0x5354'4f4b'4552'0001ULL;  // "STOKER" and a version
  std::uint64_t mixed = 0;
  for (const std::uint64_t key : keys) {
    state ^= key;
    mixed = splitmix64(state);
    state = mixed;
  }
  return Generator(mixed);
}

std::uint64_t Generator::next() noexcept {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

std::uint64_t Generator::below(std::uint64_t n) noexcept {
  Uint128 m = static_cast<Uint128>(next()) * n;
  auto low = static_cast<std::uint64_t>(m);
  if (low < n) {
    const std::uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<Uint128>(next()) * n;
      low = static_cast<std::uint64_t>(m);
    }
  }
  return static_cast<std::uint64_t>(m >> 64);
}

double Generator::uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double Generator::normal() noexcept {
  double u = uniform();
  while (u <= 0.0) u = uniform();
  return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * uniform());
}

namespace detail {
namespace {
// The sample being loaded in this process (a worker runs one batch at a time; so does the
// main process with num_workers == 0). The generator is seeded on first use within a sample.
struct SampleRngState {
  bool active = false;
  bool seeded = false;
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
  std::uint64_t index = 0;
  Generator generator;
};
thread_local SampleRngState g_sample;
}  // namespace

void begin_sample_rng(std::uint64_t seed, std::uint64_t epoch, std::uint64_t index) noexcept {
  g_sample.active = true;
  g_sample.seeded = false;
  g_sample.seed = seed;
  g_sample.epoch = epoch;
  g_sample.index = index;
}

void end_sample_rng() noexcept { g_sample.active = false; }

void rekey_sample_rng(std::uint64_t index) noexcept {
  if (!g_sample.active) return;
  g_sample.index = index;
  g_sample.seeded = false;
}

void begin_probe_sample(std::size_t index) noexcept { begin_sample_rng(0, 0, index); }

}  // namespace detail

Generator& sample_rng() {
  detail::SampleRngState& s = detail::g_sample;
  if (!s.active) {
    throw std::logic_error(
        "stoker::sample_rng: called outside a dataset's get(); it is the generator of the "
        "sample being loaded, seeded from (seed, epoch, index)");
  }
  if (!s.seeded) {
    s.generator = Generator::from({s.seed, s.epoch, s.index});
    s.seeded = true;
  }
  return s.generator;
}

std::uint64_t current_epoch() {
  if (!detail::g_sample.active) {
    throw std::logic_error(
        "stoker::current_epoch: called outside a dataset's get(); it is the epoch of the "
        "sample being loaded");
  }
  return detail::g_sample.epoch;
}

}  // namespace stoker
