// Samplers: which dataset indices an epoch visits, and in which order. A DataLoader asks its
// sampler (LoaderOptions::sampler) or batch sampler (LoaderOptions::batch_sampler) once per
// epoch, in the main process, passing the epoch number; the randomness of the built-in ones
// depends only on their seed and that epoch, so an epoch can be reproduced, or resumed, with
// any num_workers. PyTorch's samplers, with the same semantics; a user sampler implements one
// method.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace stoker {

struct LaunchOverrides;  // distributed.hpp

// The interface of user samplers.
class Sampler {
 public:
  virtual ~Sampler() = default;
  // The dataset indices of epoch `epoch`, in order (repeats allowed). Main process; called
  // once per DataLoader::begin(). An index past the dataset's end makes begin() throw
  // std::out_of_range naming it.
  virtual std::vector<std::size_t> indices(std::uint64_t epoch) = 0;
};

// 0, 1, ..., n - 1.
class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(std::size_t n) : n_(n) {}
  std::vector<std::size_t> indices(std::uint64_t epoch) override;

 private:
  std::size_t n_;
};

// A random order of 0..n-1, a new one each epoch. Without replacement, num_samples (default n)
// indices are taken from consecutive permutations; with replacement, num_samples independent
// uniform draws. Throws std::invalid_argument for n == 0 with num_samples > 0.
class RandomSampler final : public Sampler {
 public:
  struct Options {
    bool replacement = false;
    std::optional<std::size_t> num_samples;  // default: n
    std::uint64_t seed = 0;
  };
  explicit RandomSampler(std::size_t n) : RandomSampler(n, Options{}) {}
  RandomSampler(std::size_t n, Options options);
  // PyTorch's argument order: RandomSampler(n, replacement, num_samples, seed).
  RandomSampler(std::size_t n, std::same_as<bool> auto replacement,
                std::optional<std::size_t> num_samples = std::nullopt, std::uint64_t seed = 0)
      : RandomSampler(n, Options{replacement, num_samples, seed}) {}
  std::vector<std::size_t> indices(std::uint64_t epoch) override;
  std::size_t num_samples() const noexcept { return num_samples_; }

 private:
  std::size_t n_;
  Options options_;
  std::size_t num_samples_;
};

// A random order of a given subset of indices, a new one each epoch.
class SubsetRandomSampler final : public Sampler {
 public:
  explicit SubsetRandomSampler(std::vector<std::size_t> subset, std::uint64_t seed = 0)
      : subset_(std::move(subset)), seed_(seed) {}
  std::vector<std::size_t> indices(std::uint64_t epoch) override;

 private:
  std::vector<std::size_t> subset_;
  std::uint64_t seed_;
};

// num_samples indices drawn with probability proportional to `weights` (which need not sum to
// 1). With replacement, independent draws; without, each index at most once (so num_samples
// must not exceed the number of positive weights). Throws std::invalid_argument for negative,
// non-finite or all-zero weights, num_samples == 0, or too many samples without replacement.
class WeightedRandomSampler final : public Sampler {
 public:
  WeightedRandomSampler(std::vector<double> weights, std::size_t num_samples,
                        bool replacement = true, std::uint64_t seed = 0);
  std::vector<std::size_t> indices(std::uint64_t epoch) override;

 private:
  std::vector<double> weights_;
  std::vector<double> cumulative_;  // for draws with replacement
  std::size_t num_samples_;
  bool replacement_;
  std::uint64_t seed_;
};

// The shard of one process among num_replicas (PyTorch's DistributedSampler): the epoch's
// order (shuffled with seed + epoch, or 0..n-1) is padded by repeating its start until it
// divides evenly (or, with drop_last, cut to the largest multiple), and rank r takes positions
// r, r + num_replicas, r + 2 num_replicas, ... Every rank gets num_samples() indices.
class DistributedSampler final : public Sampler {
 public:
  struct Options {
    bool shuffle = true;
    std::uint64_t seed = 0;
    bool drop_last = false;
  };
  // Throws std::invalid_argument when num_replicas == 0 or rank >= num_replicas.
  DistributedSampler(std::size_t dataset_size, std::size_t num_replicas, std::size_t rank)
      : DistributedSampler(dataset_size, num_replicas, rank, Options{}) {}
  DistributedSampler(std::size_t dataset_size, std::size_t num_replicas, std::size_t rank,
                     Options options);
  // PyTorch's argument order: (dataset_size, num_replicas, rank, shuffle, seed, drop_last).
  DistributedSampler(std::size_t dataset_size, std::size_t num_replicas, std::size_t rank,
                     std::same_as<bool> auto shuffle, std::uint64_t seed = 0,
                     bool drop_last = false)
      : DistributedSampler(dataset_size, num_replicas, rank, Options{shuffle, seed, drop_last}) {}

  std::vector<std::size_t> indices(std::uint64_t epoch) override;
  // The shard of this process, with rank and world size from the launcher's environment (see
  // detect_launch() in distributed.hpp); explicit overrides win. Throws as detect_launch().
  static DistributedSampler from_env(std::size_t dataset_size);
  static DistributedSampler from_env(std::size_t dataset_size, Options options);
  static DistributedSampler from_env(std::size_t dataset_size, Options options,
                                     const LaunchOverrides& overrides);

  // For use outside a DataLoader (which passes its own epoch to indices(epoch)).
  void set_epoch(std::uint64_t epoch) noexcept { epoch_ = epoch; }
  std::vector<std::size_t> indices() { return indices(epoch_); }

  std::size_t num_samples() const noexcept { return num_samples_; }  // per rank
  std::size_t total_size() const noexcept { return num_samples_ * num_replicas_; }
  std::size_t num_replicas() const noexcept { return num_replicas_; }
  std::size_t rank() const noexcept { return rank_; }

 private:
  std::size_t dataset_size_;
  std::size_t num_replicas_;
  std::size_t rank_;
  Options options_;
  std::size_t num_samples_;
  std::uint64_t epoch_ = 0;
};

// The interface of user batch samplers: the batches of an epoch, each a list of indices.
class BatchSamplerBase {
 public:
  virtual ~BatchSamplerBase() = default;
  // Main process; called once per DataLoader::begin(). Empty batches are not allowed.
  virtual std::vector<std::vector<std::size_t>> batches(std::uint64_t epoch) = 0;
};

// Groups a sampler's indices into batches of batch_size (the last one shorter, or dropped).
class BatchSampler final : public BatchSamplerBase {
 public:
  // Throws std::invalid_argument for a null sampler or batch_size == 0.
  BatchSampler(std::shared_ptr<Sampler> sampler, std::size_t batch_size, bool drop_last);
  std::vector<std::vector<std::size_t>> batches(std::uint64_t epoch) override;

 private:
  std::shared_ptr<Sampler> sampler_;
  std::size_t batch_size_;
  bool drop_last_;
};

}  // namespace stoker
