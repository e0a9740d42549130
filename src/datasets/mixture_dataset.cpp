#include "stoker/mixture_dataset.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "datasets/index_permutation.hpp"
#include "stoker/random.hpp"

namespace stoker {
namespace {

__extension__ using Uint128 = unsigned __int128;

// Keys that keep the interleave and the sources' shuffles apart for one seed.
constexpr std::uint64_t kInterleaveKey = 0x6d69'7800'0001ULL;  // "mix", 1
constexpr std::uint64_t kSourceKey = 0x6d69'7800'0002ULL;      // "mix", 2

// Building a permutation draws its round keys, which costs about as much as evaluating it, so
// each thread keeps the last few it built. A permutation is a pure function of (seed, kind, a,
// b, n): a cached one is the very one locate() would build, whichever mixture asks.
class PermutationCache {
 public:
  const detail::IndexPermutation& get(std::uint64_t seed, std::uint64_t kind, std::uint64_t a,
                                      std::uint64_t b, std::uint64_t n) {
    const std::uint64_t h = (a * 0x9e3779b97f4a7c15ULL) ^ (b * 0xc2b2ae3d27d4eb4fULL) ^ kind;
    Entry& e = entries_[(h >> 58) % entries_.size()];
    if (!e.permutation || e.seed != seed || e.kind != kind || e.a != a || e.b != b || e.n != n) {
      Generator keys = Generator::from({seed, kind, a, b});
      e = Entry{seed, kind, a, b, n, detail::IndexPermutation(n, keys)};
    }
    return *e.permutation;
  }

 private:
  struct Entry {
    std::uint64_t seed = 0;
    std::uint64_t kind = 0;
    std::uint64_t a = 0;
    std::uint64_t b = 0;
    std::uint64_t n = 0;
    std::optional<detail::IndexPermutation> permutation;
  };
  std::array<Entry, 16> entries_{};
};

thread_local PermutationCache t_permutations;

}  // namespace

namespace detail {

std::vector<std::size_t> mixture_counts(std::size_t total, const std::vector<double>& weights) {
  if (weights.empty()) {
    throw std::invalid_argument("MixtureDataset: no sources given; pass at least one");
  }
  double sum = 0;
  for (std::size_t k = 0; k < weights.size(); ++k) {
    if (!std::isfinite(weights[k]) || weights[k] < 0) {
      throw std::invalid_argument(fmt::format(
          "MixtureDataset: source {} has weight {}; weights must be finite and 0 or more", k,
          weights[k]));
    }
    sum += weights[k];
  }
  if (!(sum > 0)) {
    throw std::invalid_argument(
        "MixtureDataset: every weight is 0; give at least one source a weight above 0");
  }
  std::vector<std::size_t> counts(weights.size());
  std::vector<double> remainders(weights.size());
  std::size_t assigned = 0;
  for (std::size_t k = 0; k < weights.size(); ++k) {
    const double quota = static_cast<double>(total) * (weights[k] / sum);
    const double whole = std::floor(quota);
    counts[k] = std::min(static_cast<std::size_t>(whole), total);
    remainders[k] = quota - whole;
    assigned += counts[k];
  }
  // Largest remainders first; ties to the earlier source.
  std::vector<std::size_t> order(weights.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&remainders](std::size_t a, std::size_t b) {
    return remainders[a] > remainders[b];
  });
  for (std::size_t j = 0; assigned < total; ++j, ++assigned) ++counts[order[j % order.size()]];
  // Rounding error can leave the floors a sample over (a quota of 2.9999999 computed as 3):
  // take it back from the smallest remainders.
  for (std::size_t j = order.size(); assigned > total; --assigned) {
    do {
      j = j == 0 ? order.size() - 1 : j - 1;
    } while (counts[order[j]] == 0);
    --counts[order[j]];
  }
  return counts;
}

}  // namespace detail

MixtureDataset::MixtureDataset(std::vector<Source> sources, std::size_t samples_per_epoch,
                               std::uint64_t seed)
    : sources_(std::move(sources)), size_(samples_per_epoch), seed_(seed) {
  std::vector<double> weights;
  weights.reserve(sources_.size());
  for (const Source& source : sources_) weights.push_back(source.weight);
  counts_ = detail::mixture_counts(samples_per_epoch, weights);
  for (std::size_t k = 0; k < sources_.size(); ++k) {
    sizes_.push_back(sources_[k].dataset.size());
    if (sizes_[k] == 0 && weights[k] > 0) {
      throw std::invalid_argument(fmt::format(
          "MixtureDataset: source {} is empty but has weight {}; give an empty source weight 0 "
          "or leave it out",
          k, weights[k]));
    }
  }
  ends_ = detail::cumulative_sizes(counts_);
  check_ = detail::FieldCheck("MixtureDataset", detail::numbered_parts(sources_.size(), "source"));
}

PartIndex MixtureDataset::locate(std::size_t i, std::uint64_t epoch) const {
  if (i >= size_) detail::throw_index_out_of_range("MixtureDataset::get", i, size_);
  // The epoch's slots are laid out source by source (ends_); a permutation keyed by (seed,
  // epoch) scatters them over the epoch's indices.
  const detail::IndexPermutation& interleave =
      t_permutations.get(seed_, kInterleaveKey, epoch, 0, size_);
  const PartIndex slot = detail::locate_part(ends_, interleave(i), "MixtureDataset::get");
  // Source k's draws are numbered on across epochs (counts_[k] an epoch); draw d is position
  // d % n of the source's shuffle number d / n, so all n samples come before any repeats.
  const std::size_t k = slot.part;
  std::uint64_t cycle = 0;
  std::uint64_t position = 0;
  std::uint64_t draw = 0;
  if (!__builtin_mul_overflow(epoch, counts_[k], &draw) &&
      !__builtin_add_overflow(draw, slot.index, &draw)) {
    cycle = draw / sizes_[k];  // the common case: a 64-bit division, not a 128-bit one
    position = draw % sizes_[k];
  } else {
    const Uint128 wide = static_cast<Uint128>(epoch) * counts_[k] + slot.index;
    cycle = static_cast<std::uint64_t>(wide / sizes_[k]);
    position = static_cast<std::uint64_t>(wide % sizes_[k]);
  }
  const detail::IndexPermutation& shuffle =
      t_permutations.get(seed_, kSourceKey, k, cycle, sizes_[k]);
  return {k, static_cast<std::size_t>(shuffle(position))};
}

Sample MixtureDataset::get(std::size_t i) {
  std::uint64_t epoch = 0;
  try {
    epoch = current_epoch();
  } catch (const std::logic_error&) {
    throw std::logic_error(
        "MixtureDataset::get(i): called outside a DataLoader's get(), so there is no current "
        "epoch; call get(i, epoch)");
  }
  return get(i, epoch);
}

Sample MixtureDataset::get(std::size_t i, std::uint64_t epoch) {
  const PartIndex at = locate(i, epoch);
  Sample sample = sources_[at.part].dataset.get(at.index);
  check_.check(at.part, sample);
  return sample;
}

CacheStats MixtureDataset::cache_stats() const {
  return detail::sum_cache_stats(
      sources_, [](const Source& source) -> const auto& { return source.dataset; });
}

}  // namespace stoker
