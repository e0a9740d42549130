#include "stoker/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <stdexcept>

#include <fmt/format.h>

#include "stoker/random.hpp"

namespace stoker {
namespace {

std::vector<std::size_t> iota(std::size_t n) {
  std::vector<std::size_t> v(n);
  std::iota(v.begin(), v.end(), std::size_t{0});
  return v;
}

}  // namespace

std::vector<std::size_t> SequentialSampler::indices(std::uint64_t) { return iota(n_); }

RandomSampler::RandomSampler(std::size_t n, Options options)
    : n_(n), options_(options), num_samples_(options.num_samples.value_or(n)) {
  if (n_ == 0 && num_samples_ > 0) {
    throw std::invalid_argument(
        fmt::format("RandomSampler: cannot draw {} samples from an empty dataset", num_samples_));
  }
}

std::vector<std::size_t> RandomSampler::indices(std::uint64_t epoch) {
  Generator rng = Generator::from({options_.seed, epoch});
  std::vector<std::size_t> out;
  out.reserve(num_samples_);
  if (options_.replacement) {
    for (std::size_t i = 0; i < num_samples_; ++i) out.push_back(rng.below(n_));
    return out;
  }
  // Consecutive permutations, the last one cut short: every index equally often, +-1.
  while (out.size() < num_samples_) {
    std::vector<std::size_t> perm = iota(n_);
    rng.shuffle(perm.begin(), perm.end());
    const std::size_t take = std::min(n_, num_samples_ - out.size());
    out.insert(out.end(), perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(take));
  }
  return out;
}

std::vector<std::size_t> SubsetRandomSampler::indices(std::uint64_t epoch) {
  std::vector<std::size_t> out = subset_;
  Generator::from({seed_, epoch}).shuffle(out.begin(), out.end());
  return out;
}

WeightedRandomSampler::WeightedRandomSampler(std::vector<double> weights, std::size_t num_samples,
                                             bool replacement, std::uint64_t seed)
    : weights_(std::move(weights)),
      num_samples_(num_samples),
      replacement_(replacement),
      seed_(seed) {
  if (num_samples_ == 0) {
    throw std::invalid_argument("WeightedRandomSampler: num_samples must be at least 1");
  }
  double largest = 0;
  std::size_t positive = 0;
  for (std::size_t i = 0; i < weights_.size(); ++i) {
    const double w = weights_[i];
    if (!std::isfinite(w) || w < 0) {
      throw std::invalid_argument(fmt::format(
          "WeightedRandomSampler: weight {} is {}; weights must be finite and >= 0", i, w));
    }
    largest = std::max(largest, w);
    positive += w > 0 ? 1 : 0;
  }
  // Cumulative sums of the weights scaled to at most 1, so they cannot overflow however
  // large the weights are.
  double total = 0;
  cumulative_.reserve(weights_.size());
  for (const double w : weights_) {
    total += largest > 0 ? w / largest : 0;
    cumulative_.push_back(total);
  }
  if (positive == 0) {
    throw std::invalid_argument(
        "WeightedRandomSampler: every weight is zero (or there are none); at least one must be "
        "positive");
  }
  if (!replacement_ && num_samples_ > positive) {
    throw std::invalid_argument(fmt::format(
        "WeightedRandomSampler: {} samples without replacement, but only {} weights are "
        "positive; lower num_samples or draw with replacement",
        num_samples_, positive));
  }
}

std::vector<std::size_t> WeightedRandomSampler::indices(std::uint64_t epoch) {
  Generator rng = Generator::from({seed_, epoch});
  std::vector<std::size_t> out;
  out.reserve(num_samples_);
  if (replacement_) {
    const double total = cumulative_.back();
    for (std::size_t i = 0; i < num_samples_; ++i) {
      const double u = rng.uniform() * total;
      // The first index whose cumulative weight exceeds u: never a zero-weight index.
      const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
      out.push_back(
          std::min(static_cast<std::size_t>(it - cumulative_.begin()), cumulative_.size() - 1));
    }
    return out;
  }
  // Without replacement (Efraimidis-Spirakis): each index gets the key log(u) / w, and the
  // num_samples largest keys win; the draw order is the order of decreasing keys.
  using Keyed = std::pair<double, std::size_t>;
  std::priority_queue<Keyed, std::vector<Keyed>, std::greater<>> best;  // smallest on top
  for (std::size_t i = 0; i < weights_.size(); ++i) {
    if (weights_[i] <= 0) continue;
    double u = rng.uniform();
    while (u <= 0) u = rng.uniform();
    const double key = std::log(u) / weights_[i];
    if (best.size() < num_samples_) {
      best.emplace(key, i);
    } else if (key > best.top().first) {
      best.pop();
      best.emplace(key, i);
    }
  }
  out.resize(best.size());
  for (std::size_t k = best.size(); k > 0; --k) {
    out[k - 1] = best.top().second;
    best.pop();
  }
  return out;
}

DistributedSampler::DistributedSampler(std::size_t dataset_size, std::size_t num_replicas,
                                       std::size_t rank, Options options)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), options_(options) {
  if (num_replicas_ == 0) {
    throw std::invalid_argument("DistributedSampler: num_replicas must be at least 1");
  }
  if (rank_ >= num_replicas_) {
    throw std::invalid_argument(
        fmt::format("DistributedSampler: rank {} is not below num_replicas {}; ranks count from 0",
                    rank_, num_replicas_));
  }
  if (options_.drop_last && dataset_size_ % num_replicas_ != 0) {
    num_samples_ = dataset_size_ / num_replicas_;  // the short tail is dropped
  } else {
    num_samples_ = (dataset_size_ + num_replicas_ - 1) / num_replicas_;
  }
}

std::vector<std::size_t> DistributedSampler::indices(std::uint64_t epoch) {
  std::vector<std::size_t> order = iota(dataset_size_);
  if (options_.shuffle) Generator(options_.seed + epoch).shuffle(order.begin(), order.end());
  const std::size_t total = total_size();
  if (order.empty()) return {};
  if (order.size() < total) {
    // Pad by repeating the order from its start (as often as needed) up to total_size.
    const std::size_t n = order.size();
    for (std::size_t i = 0; order.size() < total; ++i) order.push_back(order[i % n]);
  } else {
    order.resize(total);
  }
  std::vector<std::size_t> out;
  out.reserve(num_samples_);
  for (std::size_t i = rank_; i < total; i += num_replicas_) out.push_back(order[i]);
  return out;
}

OrderInfo DistributedSampler::order_info() const {
  OrderInfo info;
  info.key = fmt::format("distributed/1 seed={} shuffle={} drop_last={} replicas={} samples={}",
                         options_.seed, options_.shuffle ? 1 : 0, options_.drop_last ? 1 : 0,
                         num_replicas_, dataset_size_);
  info.world_size = num_replicas_;
  info.rank = rank_;
  return info;
}

BatchSampler::BatchSampler(std::shared_ptr<Sampler> sampler, std::size_t batch_size, bool drop_last)
    : sampler_(std::move(sampler)), batch_size_(batch_size), drop_last_(drop_last) {
  if (!sampler_) throw std::invalid_argument("BatchSampler: the sampler is null");
  if (batch_size_ == 0) throw std::invalid_argument("BatchSampler: batch_size must be >= 1");
}

std::vector<std::vector<std::size_t>> BatchSampler::batches(std::uint64_t epoch) {
  const std::vector<std::size_t> order = sampler_->indices(epoch);
  std::vector<std::vector<std::size_t>> out;
  for (std::size_t begin = 0; begin < order.size(); begin += batch_size_) {
    const std::size_t end = std::min(order.size(), begin + batch_size_);
    if (drop_last_ && end - begin < batch_size_) break;
    out.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(begin),
                     order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return out;
}

}  // namespace stoker
