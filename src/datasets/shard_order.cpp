#include "datasets/shard_order.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

#include "datasets/index_permutation.hpp"
#include "stoker/random.hpp"

namespace stoker::detail {
namespace {

// Keys that keep the epoch's generators apart: the shard order, and each block's permutation.
constexpr std::uint64_t kShardOrderKey = 0x5348524453485546ull;
constexpr std::uint64_t kBlockKey = 0x53485546424c4f43ull;

}  // namespace

ShardOrder::ShardOrder(std::span<const std::uint64_t> first, const ShardOrderParams& params,
                       std::uint64_t epoch)
    : first_(first), params_(params), epoch_(epoch), n_(first.back()), blocks_(params.partitions) {
  const std::size_t num_shards = first.size() - 1;
  shards_.resize(num_shards);
  std::iota(shards_.begin(), shards_.end(), std::size_t{0});
  if (params_.shuffle) {
    Generator::from({params_.seed, epoch_, kShardOrderKey}).shuffle(shards_.begin(), shards_.end());
  }
  order_first_.reserve(num_shards + 1);
  std::uint64_t at = 0;
  for (const std::size_t s : shards_) {
    order_first_.push_back(at);
    at += first_[s + 1] - first_[s];
  }
  order_first_.push_back(at);

  const std::uint64_t g = params_.global_batch;
  per_partition_ = g / params_.partitions;
  full_batches_ = n_ / g;
  tail_ = n_ - full_batches_ * g;
  num_batches_ =
      static_cast<std::size_t>(full_batches_) + (!params_.drop_last && tail_ > 0 ? 1 : 0);
  tail_first_.reserve(params_.partitions + 1);
  std::uint64_t tail = 0;
  for (std::size_t p = 0; p < params_.partitions; ++p) {
    tail_first_.push_back(tail);
    tail += partition_length(p) - full_batches_ * per_partition_;
  }
  tail_first_.push_back(tail);  // == tail_
}

std::uint64_t ShardOrder::partition_length(std::size_t p) const noexcept {
  const std::uint64_t parts = params_.partitions;
  return n_ / parts + (p < n_ % parts ? 1 : 0);
}

ShardOrder::Place ShardOrder::place(std::uint64_t j) const noexcept {
  const std::uint64_t g = params_.global_batch;
  const std::uint64_t c = per_partition_;
  if (j < full_batches_ * g) {
    const std::uint64_t o = j % g;
    return {static_cast<std::size_t>(o / c), (j / g) * c + o % c};
  }
  // The tail: each partition's samples after its full batches, partition by partition (an
  // empty tail is stepped over by upper_bound).
  const std::uint64_t o = j - full_batches_ * g;
  const auto it = std::upper_bound(tail_first_.begin(), tail_first_.end() - 1, o) - 1;
  const auto p = static_cast<std::size_t>(it - tail_first_.begin());
  return {p, full_batches_ * c + (o - *it)};
}

ShardOrder::Block ShardOrder::block_at(std::size_t partition, std::uint64_t number) const {
  const std::uint64_t parts = params_.partitions;
  Block b;
  b.partition = partition;
  b.number = number;
  const std::uint64_t partition_start =
      partition * (n_ / parts) + std::min<std::uint64_t>(partition, n_ % parts);
  b.start = partition_start + number * params_.block;
  b.length = std::min(params_.block, partition_length(partition) - number * params_.block);
  const auto lo = std::upper_bound(order_first_.begin(), order_first_.end(), b.start) - 1;
  const auto hi =
      std::upper_bound(order_first_.begin(), order_first_.end(), b.start + b.length - 1);
  b.shard_lo = static_cast<std::size_t>(lo - order_first_.begin());
  b.shard_hi = static_cast<std::size_t>(hi - order_first_.begin());
  if (!params_.shuffle || b.length <= 1) return b;
  Generator keys = Generator::from({params_.seed, epoch_, partition, number, kBlockKey});
  if (!params_.interleave) {
    b.permutation.emplace(b.length, keys);
    return b;
  }
  // A uniformly random merge of the block's pieces of shards: one label per sample, naming
  // its piece, shuffled; each piece's samples then fill its labels' positions in record
  // order (INV-SHARD-ORDER-3).
  std::vector<std::uint64_t> next;  // per piece: the C offset (from b.start) it hands out next
  std::vector<std::uint32_t> label;
  label.reserve(b.length);
  for (std::size_t m = b.shard_lo; m < b.shard_hi; ++m) {
    const std::uint64_t from = std::max(order_first_[m], b.start);
    const std::uint64_t to = std::min(order_first_[m + 1], b.start + b.length);
    if (to <= from) continue;  // an empty shard
    next.push_back(from - b.start);
    label.insert(label.end(), to - from, static_cast<std::uint32_t>(next.size() - 1));
  }
  keys.shuffle(label.begin(), label.end());
  b.merged.resize(b.length);
  for (std::uint64_t q = 0; q < b.length; ++q) b.merged[q] = next[label[q]]++;
  return b;
}

std::uint64_t ShardOrder::index_in(const Block& b, std::uint64_t local) const {
  std::uint64_t offset = local - b.number * params_.block;
  if (b.permutation) offset = (*b.permutation)(offset);
  if (!b.merged.empty()) offset = b.merged[offset];
  const std::uint64_t c = b.start + offset;
  const auto begin = order_first_.begin() + static_cast<std::ptrdiff_t>(b.shard_lo);
  const auto end = order_first_.begin() + static_cast<std::ptrdiff_t>(b.shard_hi);
  const auto m =
      static_cast<std::size_t>(std::upper_bound(begin, end, c) - 1 - order_first_.begin());
  return first_[shards_[m]] + (c - order_first_[m]);
}

std::uint64_t ShardOrder::unpadded(std::uint64_t j) const noexcept {
  if (j < n_) return j;
  const std::uint64_t u = j - n_;  // the u-th sample of the padding
  const std::uint64_t g = params_.global_batch;
  if (full_batches_ == 0) return u % n_;
  return full_batches_ * g - (g - tail_) + u;  // the end of the last full batch
}

const ShardOrder::Block& ShardOrder::block_for(const Place& where) {
  const std::uint64_t number = where.local / params_.block;
  std::optional<Block>& block = blocks_[where.partition];
  if (!block || block->number != number) block = block_at(where.partition, number);
  return *block;
}

std::uint64_t ShardOrder::at(std::uint64_t j) {
  const Place where = place(unpadded(j));
  return index_in(block_for(where), where.local);
}

void ShardOrder::append(std::uint64_t begin, std::uint64_t end, std::vector<std::size_t>& out) {
  out.reserve(out.size() + (end - begin));
  for (std::uint64_t j = begin; j < end; ++j) {
    const Place where = place(unpadded(j));
    out.push_back(static_cast<std::size_t>(index_in(block_for(where), where.local)));
  }
}

std::size_t ShardOrder::shard_of(std::uint64_t index) const noexcept {
  const auto it = std::upper_bound(first_.begin(), first_.end() - 1, index) - 1;
  return static_cast<std::size_t>(it - first_.begin());
}

}  // namespace stoker::detail
