// ShardShuffle (include/stoker/sampler.hpp): the options' checks, this rank's slice of each
// global batch, and the key a DataLoader state records. The order is datasets/shard_order.hpp;
// from_env() is in distributed.cpp beside DistributedSampler's.
#include <stdexcept>

#include <fmt/format.h>

#include "datasets/shard_order.hpp"
#include "stoker/sampler.hpp"
#include "stoker/shards.hpp"

namespace stoker {
namespace {

std::vector<std::uint64_t> firsts_of(const std::vector<std::uint64_t>& sizes) {
  std::vector<std::uint64_t> first;
  first.reserve(sizes.size() + 1);
  std::uint64_t total = 0;
  for (const std::uint64_t s : sizes) {
    first.push_back(total);
    total += s;
  }
  first.push_back(total);
  return first;
}

std::vector<std::uint64_t> sizes_of(const ShardedDataset& dataset) {
  std::vector<std::uint64_t> sizes(dataset.num_shards());
  for (std::size_t s = 0; s < sizes.size(); ++s) sizes[s] = dataset.shard_size(s);
  return sizes;
}

detail::ShardOrderParams params_of(const ShardShuffle::Options& o, std::uint64_t block) {
  detail::ShardOrderParams p;
  p.partitions = o.canonical_partitions;
  p.block = block;
  p.global_batch = o.global_batch_size;
  p.shuffle = o.shuffle;
  p.interleave = o.block_order == ShardShuffle::BlockOrder::kInterleave;
  p.drop_last = o.drop_last;
  p.seed = o.seed;
  return p;
}

// FNV-1a over the sizes' little-endian bytes: two lists of shard sizes that differ give
// different keys (with overwhelming likelihood), in 16 hex digits rather than one per shard.
std::uint64_t fingerprint(const std::vector<std::uint64_t>& first) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t s = 0; s + 1 < first.size(); ++s) {
    std::uint64_t size = first[s + 1] - first[s];
    for (int byte = 0; byte < 8; ++byte, size >>= 8) {
      h ^= size & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

}  // namespace

ShardShuffle::ShardShuffle(std::vector<std::uint64_t> shard_sizes, std::size_t num_replicas,
                           std::size_t rank, Options options)
    : first_(firsts_of(shard_sizes)),
      num_replicas_(num_replicas),
      rank_(rank),
      options_(options),
      block_(options.shuffle_block) {
  const Options& o = options_;
  if (o.canonical_partitions == 0) {
    throw std::invalid_argument(
        "ShardShuffle: Options::canonical_partitions is 0; it must be at least 1 (the largest "
        "number of nodes the run may use is a good choice)");
  }
  if (o.global_batch_size == 0) {
    throw std::invalid_argument(
        "ShardShuffle: Options::global_batch_size is 0; set it to the samples of one step "
        "summed over every rank");
  }
  if (o.global_batch_size % o.canonical_partitions != 0) {
    throw std::invalid_argument(fmt::format(
        "ShardShuffle: Options::global_batch_size ({}) is not a multiple of "
        "canonical_partitions ({}); every global batch takes the same number of samples from "
        "each partition",
        o.global_batch_size, o.canonical_partitions));
  }
  if (num_replicas_ == 0) {
    throw std::invalid_argument("ShardShuffle: num_replicas must be at least 1");
  }
  if (rank_ >= num_replicas_) {
    throw std::invalid_argument(
        fmt::format("ShardShuffle: rank {} is not below num_replicas {}; ranks count from 0", rank_,
                    num_replicas_));
  }
  if (o.global_batch_size % num_replicas_ != 0) {
    throw std::invalid_argument(fmt::format(
        "ShardShuffle: Options::global_batch_size ({}) is not a multiple of num_replicas ({}), "
        "so the ranks' batches could not be equal; run on a world size that divides it",
        o.global_batch_size, num_replicas_));
  }
  if (block_ == 0) {
    const std::uint64_t shards = std::max<std::uint64_t>(num_shards(), 1);
    const std::uint64_t mean = (num_samples() + shards - 1) / shards;
    block_ = std::max<std::uint64_t>(kDefaultBlockShards * mean, 1);
  }
}

ShardShuffle::ShardShuffle(const ShardedDataset& dataset, std::size_t num_replicas,
                           std::size_t rank, Options options)
    : ShardShuffle(sizes_of(dataset), num_replicas, rank, options) {}

std::size_t ShardShuffle::num_batches() const noexcept {
  const std::uint64_t g = options_.global_batch_size;
  const std::uint64_t full = num_samples() / g;
  return static_cast<std::size_t>(full) + (!options_.drop_last && num_samples() % g != 0 ? 1 : 0);
}

std::vector<std::vector<std::size_t>> ShardShuffle::batches(std::uint64_t epoch) {
  detail::ShardOrder order(first_, params_of(options_, block_), epoch);
  const std::uint64_t g = options_.global_batch_size;
  const std::uint64_t b = batch_size();
  std::vector<std::vector<std::size_t>> out(order.num_batches());
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::uint64_t begin = k * g + rank_ * b;
    order.append(begin, begin + b, out[k]);
  }
  return out;
}

std::vector<std::size_t> ShardShuffle::global_batch(std::uint64_t epoch, std::size_t k) const {
  if (k >= num_batches()) {
    throw std::out_of_range(
        fmt::format("ShardShuffle::global_batch: batch {} is past the epoch's {} global batches", k,
                    num_batches()));
  }
  detail::ShardOrder order(first_, params_of(options_, block_), epoch);
  std::vector<std::size_t> out;
  const std::uint64_t g = options_.global_batch_size;
  order.append(k * g, k * g + g, out);
  return out;
}

OrderInfo ShardShuffle::order_info() const {
  OrderInfo info;
  info.key = fmt::format(
      "shard-shuffle/1 seed={} shuffle={} partitions={} global_batch={} block={} within={} "
      "drop_last={} shards={} samples={} sizes={:016x}",
      options_.seed, options_.shuffle ? 1 : 0, options_.canonical_partitions,
      options_.global_batch_size, block_,
      options_.block_order == BlockOrder::kInterleave ? "interleave" : "permute",
      options_.drop_last ? 1 : 0, num_shards(), num_samples(), fingerprint(first_));
  info.world_size = num_replicas_;
  info.rank = rank_;
  return info;
}

}  // namespace stoker
