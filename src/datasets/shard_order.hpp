// ShardOrder: one epoch of ShardShuffle's order (include/stoker/sampler.hpp), a pure function
// of (seed, epoch, shard sizes, canonical partitions) and of the block and global batch sizes:
// no I/O, no table of the epoch's samples. Any process computes any global position's sample
// in O(log shards) time, so each rank builds only its own slice, with no barrier and nothing
// shared.
//
// The order, in four steps (docs/distributed.md shows a worked example):
//   1. the shards are shuffled with (seed, epoch) and their samples concatenated: sequence C
//      of N samples, shard by shard, each shard's records in order;
//   2. C is cut into P canonical partitions of N / P samples (the first N mod P one more);
//   3. each partition is cut into blocks of `block` samples, and each block's samples are
//      reordered with a generator keyed by (seed, epoch, partition, block): interleaved (the
//      block's pieces of shards merged in a random order, each piece's samples in record
//      order, so every shard is read front to back) or permuted (an IndexPermutation: every
//      sample anywhere in its block). A shard's samples stay within the one or two blocks it
//      overlaps;
//   4. global batch k is, partition by partition, c = G / P consecutive positions of each
//      partition's permuted sequence: partition p's positions [k c, k c + c).
// The K_full = floor(N / G) full global batches use every partition equally; the t = N - K_full G
// samples left (each partition's tail, partition by partition) make one more global batch,
// padded with the last G - t positions of the last full batch, whose shards are the ones still
// open (with no full batch, the epoch's positions from the first, round and round); with
// drop_last the t samples are not used.
//
// INV-SHARD-ORDER-1: the positions 0 .. K_full G + t - 1 (those before the padding) visit each
//   of the N samples exactly once (each step above is a bijection).
// INV-SHARD-ORDER-2: the samples of one block come from the shards that overlap one range of
//   `block` consecutive samples of C: at most floor((block - 1) / s_min) + 2 shards, s_min the
//   smallest non-empty shard.
// INV-SHARD-ORDER-3 (interleaved): within a block, the samples of each shard come in record
//   order.
//
// Cost: O(log shards) a sample; an interleaved block is built once per append() in O(block)
// time and memory (its merge order), a permuted one in O(1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "datasets/index_permutation.hpp"

namespace stoker::detail {

struct ShardOrderParams {
  std::size_t partitions = 1;    // P >= 1
  std::uint64_t block = 1;       // samples per block, >= 1
  std::size_t global_batch = 1;  // G >= 1, a multiple of P
  bool shuffle = true;           // false: shards in the given order, blocks as they are
  bool interleave = true;        // false: blocks permuted
  bool drop_last = false;
  std::uint64_t seed = 0;
};

class ShardOrder {
 public:
  // `first` holds each shard's first dataset index and then N (shards.size() + 1 entries,
  // non-decreasing); the caller has checked `params` (ShardShuffle's constructor does).
  ShardOrder(std::span<const std::uint64_t> first, const ShardOrderParams& params,
             std::uint64_t epoch);

  std::uint64_t samples() const noexcept { return n_; }
  std::size_t num_batches() const noexcept { return num_batches_; }  // global batches
  std::uint64_t full_batches() const noexcept { return full_batches_; }
  std::uint64_t tail() const noexcept { return tail_; }  // t: samples after the full batches

  // The dataset index at global position j < num_batches() x G (the padding included). Not
  // const: each partition's current block is kept, so positions read in order (as every
  // rank reads its slices) build each block once.
  std::uint64_t at(std::uint64_t j);
  // Appends the dataset indices of global positions [begin, end) to `out`.
  void append(std::uint64_t begin, std::uint64_t end, std::vector<std::size_t>& out);

  // Where global position j (below K_full G + t) lies: its partition and its position in that
  // partition's permuted sequence (before the block permutation). For tests and the bench.
  struct Place {
    std::size_t partition = 0;
    std::uint64_t local = 0;
  };
  Place place(std::uint64_t j) const noexcept;
  // The shard (an index into the sizes given) of dataset index i.
  std::size_t shard_of(std::uint64_t index) const noexcept;

 private:
  // One (partition, block): where it lies in C, the shards it can hold, and its order.
  struct Block {
    std::size_t partition = 0;
    std::uint64_t number = 0;
    std::uint64_t start = 0;   // its first position in C
    std::uint64_t length = 0;  // block samples, fewer for a partition's last block
    std::optional<IndexPermutation> permutation;  // permuted blocks
    std::vector<std::uint64_t> merged;            // interleaved: the C offset of each position
    std::size_t shard_lo = 0;  // the entries of order_first_ that can hold its samples:
    std::size_t shard_hi = 0;  // [shard_lo, shard_hi), INV-SHARD-ORDER-2
  };
  const Block& block_for(const Place& where);
  // The position a padding position repeats (j itself below N).
  std::uint64_t unpadded(std::uint64_t j) const noexcept;
  Block block_at(std::size_t partition, std::uint64_t b) const;
  std::uint64_t index_in(const Block& block, std::uint64_t local) const;
  std::uint64_t partition_length(std::size_t p) const noexcept;

  std::span<const std::uint64_t> first_;
  ShardOrderParams params_;
  std::uint64_t epoch_ = 0;
  std::uint64_t n_ = 0;
  std::uint64_t per_partition_ = 0;  // c = G / P
  std::uint64_t full_batches_ = 0;
  std::uint64_t tail_ = 0;
  std::size_t num_batches_ = 0;
  std::vector<std::size_t> shards_;           // the epoch's shard order
  std::vector<std::uint64_t> order_first_;    // C position of each, then N
  std::vector<std::uint64_t> tail_first_;     // tail position of each partition's tail, then t
  std::vector<std::optional<Block>> blocks_;  // each partition's current block
};

}  // namespace stoker::detail
