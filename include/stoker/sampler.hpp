// Samplers: which dataset indices an epoch visits, and in which order. A DataLoader asks its
// sampler (LoaderOptions::sampler) or batch sampler (LoaderOptions::batch_sampler) once per
// epoch, in the main process, passing the epoch number; the randomness of the built-in ones
// depends only on their seed and that epoch, so an epoch can be reproduced, or resumed, with
// any num_workers. PyTorch's samplers, with the same semantics; a user sampler implements one
// method. ShardShuffle is the order for sharded datasets on many ranks: few shards read at a
// time, and the same global batches, resumable, at any world size (docs/distributed.md).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace stoker {

struct LaunchOverrides;  // distributed.hpp
class ShardedDataset;    // shards.hpp

// What DataLoader::state() records of a sampler's order, and what load_state() checks.
struct OrderInfo {
  // What must be the same for a saved state to resume: the sampler's kind and the parameters
  // its order depends on, as one line of text. Empty (the default): nothing is checked.
  std::string key;
  // The ranks the epoch is split over, and this process's rank among them. A state that lists
  // batches handed out of order (in_order = false) resumes only on the same rank of the same
  // world size; one without them on any rank (and, when `key` leaves the world size out, at
  // any world size).
  std::size_t world_size = 1;
  std::size_t rank = 0;
};

// The interface of user samplers.
class Sampler {
 public:
  virtual ~Sampler() = default;
  // The dataset indices of epoch `epoch`, in order (repeats allowed). Main process; called
  // once per DataLoader::begin(). An index past the dataset's end makes begin() throw
  // std::out_of_range naming it.
  virtual std::vector<std::size_t> indices(std::uint64_t epoch) = 0;
  // See OrderInfo. Main process, by DataLoader::state() and load_state().
  virtual OrderInfo order_info() const { return {}; }
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
  // The key names the seed, shuffle, drop_last, num_replicas and dataset size: a state saved
  // with one world size is refused at another (each rank's shard would change; ShardShuffle
  // keeps them).
  OrderInfo order_info() const override;
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
  // See OrderInfo. Main process, by DataLoader::state() and load_state().
  virtual OrderInfo order_info() const { return {}; }
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

// A shard-aware order split over ranks, for datasets stored in shards (ShardedDataset, or any
// map-style dataset whose index i lies in shard s when first(s) <= i < first(s + 1)): set it as
// LoaderOptions::batch_sampler (batch_size stays 1). Each epoch is a pure function of (seed,
// epoch, shard sizes, canonical_partitions, shuffle_block, global_batch_size):
//   - the shards are shuffled and cut into canonical_partitions ranges of equal sample counts;
//   - each partition's samples are shuffled within blocks of shuffle_block samples, so a
//     shard's samples are read within one or two blocks: few shards are read at a time (by
//     default the block's shards are interleaved at random, each read front to back, so the
//     reads of a shard stay sequential; BlockOrder::kPermute puts every sample anywhere in
//     its block);
//   - global batch k is global_batch_size / canonical_partitions samples of each partition in
//     turn, and rank r's batch k is its r-th of num_replicas equal slices of global batch k.
// So global batch k (the ranks' batches k, in rank order) is the same for any num_replicas and
// num_workers, and DataLoader::state() saved at one world size resumes at another: the state
// counts global batches. Every rank gets num_batches() batches of batch_size() samples; the
// last global batch, when the samples do not fill it, is padded by repeating the end of the
// batch before it (drop_last: left out). Every sample appears once an epoch (padding apart).
class ShardShuffle final : public BatchSamplerBase {
 public:
  // shuffle_block == 0 means this many times the mean shard size (bench/shard_order.cpp
  // measured it: see docs/distributed.md).
  static constexpr std::uint64_t kDefaultBlockShards = 4;

  // How a block's samples are ordered.
  enum class BlockOrder : std::uint8_t {
    kInterleave,  // the block's shards merged in a random order, each shard's samples in
                  // record order: each shard is read front to back (sequential reads)
    kPermute,     // a random permutation of the block: random reads within each shard
  };

  struct Options {
    // Required: the samples of one training step, summed over every rank. Must be a multiple
    // of canonical_partitions and of num_replicas.
    std::size_t global_batch_size = 0;
    // Fixed for the life of a run (every resume): the ranks of any later world size read
    // their samples from num_replicas / canonical_partitions partitions each, or share one.
    // Best: the largest number of nodes (or ranks) the run may use, or a multiple of it.
    std::size_t canonical_partitions = 1;
    // Samples per block (0: kDefaultBlockShards x the mean shard size).
    std::uint64_t shuffle_block = 0;
    BlockOrder block_order = BlockOrder::kInterleave;
    bool shuffle = true;  // false: shards in the order given, samples in shard order
    std::uint64_t seed = 0;
    bool drop_last = false;
  };

  // shard_sizes: samples per shard, in dataset index order. Throws std::invalid_argument
  // naming the option: global_batch_size 0 or not a multiple of canonical_partitions or of
  // num_replicas, canonical_partitions 0, num_replicas 0, rank >= num_replicas.
  ShardShuffle(std::vector<std::uint64_t> shard_sizes, std::size_t num_replicas, std::size_t rank,
               Options options);
  // The shard sizes of a ShardedDataset (WebDatasetShards, TFRecordDataset, MdsDataset).
  ShardShuffle(const ShardedDataset& dataset, std::size_t num_replicas, std::size_t rank,
               Options options);
  // num_replicas and rank from the launcher's environment (detect_launch() in
  // distributed.hpp); explicit overrides win. Throws as detect_launch() and the constructor.
  static ShardShuffle from_env(std::vector<std::uint64_t> shard_sizes, Options options,
                               const LaunchOverrides& overrides);
  static ShardShuffle from_env(std::vector<std::uint64_t> shard_sizes, Options options);
  static ShardShuffle from_env(const ShardedDataset& dataset, Options options);

  // This rank's batches of `epoch`: batch k is its slice of global batch k. Main process.
  std::vector<std::vector<std::size_t>> batches(std::uint64_t epoch) override;
  // The key leaves the world size out: a state resumes at any num_replicas.
  OrderInfo order_info() const override;
  // Global batch k of `epoch`, every rank's part in rank order (k < num_batches()).
  // Throws std::out_of_range for k >= num_batches(). Either process.
  std::vector<std::size_t> global_batch(std::uint64_t epoch, std::size_t k) const;

  std::size_t num_batches() const noexcept;  // per epoch; the same on every rank
  std::size_t batch_size() const noexcept { return options_.global_batch_size / num_replicas_; }
  std::uint64_t shuffle_block() const noexcept { return block_; }       // resolved
  std::uint64_t num_samples() const noexcept { return first_.back(); }  // in the dataset
  std::size_t num_shards() const noexcept { return first_.size() - 1; }
  std::size_t num_replicas() const noexcept { return num_replicas_; }
  std::size_t rank() const noexcept { return rank_; }
  const Options& options() const noexcept { return options_; }

 private:
  std::vector<std::uint64_t> first_;  // each shard's first index, then the sample count
  std::size_t num_replicas_;
  std::size_t rank_;
  Options options_;
  std::uint64_t block_;
};

}  // namespace stoker
