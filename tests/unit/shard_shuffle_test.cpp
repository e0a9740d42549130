// ShardShuffle (include/stoker/sampler.hpp) and its pure order (src/datasets/shard_order.hpp):
// every sample once an epoch (INV-SHARD-ORDER-1) with the padding or drop of the last global
// batch, the same global batches at every world size, a block's samples from a bounded number
// of shards (INV-SHARD-ORDER-2) and few shards open at a time, determinism, the unshuffled
// order, the state key, and each option's error.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "datasets/shard_order.hpp"
#include "stoker/sampler.hpp"
#include "support/error_message.hpp"

using namespace stoker;
using stoker::test::message_of;

namespace {

using Indices = std::vector<std::size_t>;
using Sizes = std::vector<std::uint64_t>;

// Unequal shards, an empty one among them: 250 samples in 9 shards.
const Sizes kSizes = {31, 17, 40, 0, 25, 33, 29, 45, 30};

ShardShuffle::Options options_of(
    std::size_t global_batch, std::size_t partitions, std::uint64_t block, bool drop_last = false,
    ShardShuffle::BlockOrder within = ShardShuffle::BlockOrder::kInterleave) {
  ShardShuffle::Options o;
  o.block_order = within;
  o.global_batch_size = global_batch;
  o.canonical_partitions = partitions;
  o.shuffle_block = block;
  o.seed = 7;
  o.drop_last = drop_last;
  return o;
}

// Global batches of the epoch, in order, concatenated.
Indices epoch_sequence(const ShardShuffle& s, std::uint64_t epoch) {
  Indices all;
  for (std::size_t k = 0; k < s.num_batches(); ++k) {
    const Indices b = s.global_batch(epoch, k);
    all.insert(all.end(), b.begin(), b.end());
  }
  return all;
}

std::vector<std::uint64_t> firsts(const Sizes& sizes) {
  std::vector<std::uint64_t> first{0};
  for (const std::uint64_t s : sizes) first.push_back(first.back() + s);
  return first;
}

}  // namespace

TEST_CASE("shard shuffle: every sample once an epoch, the last batch padded from the one before",
          "[shard_shuffle]") {
  const std::size_t n = 250;
  const auto within =
      GENERATE(ShardShuffle::BlockOrder::kInterleave, ShardShuffle::BlockOrder::kPermute);
  for (const std::size_t partitions : {1U, 3U, 4U, 12U}) {
    for (const std::uint64_t block : {1U, 7U, 16U, 60U, 1000U}) {
      INFO("partitions " << partitions << ", block " << block << ", within "
                         << static_cast<int>(within));
      const ShardShuffle s(kSizes, 1, 0, options_of(24, partitions, block, false, within));
      const std::size_t g = s.options().global_batch_size;
      const Indices all = epoch_sequence(s, 3);
      REQUIRE(s.num_batches() == (n + g - 1) / g);
      REQUIRE(all.size() == s.num_batches() * g);
      // The first n positions are each sample once ...
      Indices head(all.begin(), all.begin() + n);
      std::sort(head.begin(), head.end());
      Indices want(n);
      std::iota(want.begin(), want.end(), std::size_t{0});
      REQUIRE(head == want);
      // ... and the padding repeats the end of the last full batch, whose shards are open.
      const std::size_t pad = all.size() - n;
      for (std::size_t j = n; j < all.size(); ++j) REQUIRE(all[j] == all[j - g]);
      REQUIRE(pad == g - n % g);
    }
  }
}

TEST_CASE("shard shuffle: drop_last leaves out the samples after the full global batches",
          "[shard_shuffle]") {
  const ShardShuffle s(kSizes, 2, 1, options_of(24, 4, 16, true));
  REQUIRE(s.num_batches() == 10);  // floor(250 / 24)
  const Indices all = epoch_sequence(s, 0);
  REQUIRE(all.size() == 240);
  REQUIRE(std::set<std::size_t>(all.begin(), all.end()).size() == 240);
  for (const std::size_t i : all) REQUIRE(i < 250);
  // Fewer samples than one global batch: no batch at all.
  CHECK(ShardShuffle(Sizes{5, 6}, 1, 0, options_of(24, 4, 16, true)).num_batches() == 0);
  CHECK(ShardShuffle(Sizes{}, 1, 0, options_of(24, 4, 16)).num_batches() == 0);
}

TEST_CASE("shard shuffle: fewer samples than a global batch, padded round and round",
          "[shard_shuffle]") {
  const ShardShuffle s(Sizes{3, 2}, 1, 0, options_of(12, 4, 2));
  REQUIRE(s.num_batches() == 1);
  const Indices b = s.global_batch(0, 0);
  REQUIRE(b.size() == 12);
  CHECK(std::set<std::size_t>(b.begin(), b.begin() + 5) == std::set<std::size_t>{0, 1, 2, 3, 4});
  for (std::size_t j = 5; j < 12; ++j) CHECK(b[j] == b[(j - 5) % 5]);
}

TEST_CASE("shard shuffle: global batch k is the same for every world size", "[shard_shuffle]") {
  const auto within =
      GENERATE(ShardShuffle::BlockOrder::kInterleave, ShardShuffle::BlockOrder::kPermute);
  for (const bool drop_last : {false, true}) {
    const ShardShuffle whole(kSizes, 1, 0, options_of(24, 4, 16, drop_last, within));
    for (const std::size_t world : {1U, 2U, 3U, 4U, 6U, 8U, 12U, 24U}) {
      INFO("world " << world << (drop_last ? ", drop_last" : ""));
      std::vector<std::vector<Indices>> ranks;
      for (std::size_t r = 0; r < world; ++r) {
        ShardShuffle s(kSizes, world, r, options_of(24, 4, 16, drop_last, within));
        REQUIRE(s.batch_size() == 24 / world);
        ranks.push_back(s.batches(5));
        REQUIRE(ranks.back().size() == whole.num_batches());  // equal batches on every rank
      }
      for (std::size_t k = 0; k < whole.num_batches(); ++k) {
        Indices global;
        for (std::size_t r = 0; r < world; ++r) {
          REQUIRE(ranks[r][k].size() == 24 / world);
          global.insert(global.end(), ranks[r][k].begin(), ranks[r][k].end());
        }
        REQUIRE(global == whole.global_batch(5, k));
      }
    }
  }
}

TEST_CASE("shard shuffle: a pure function of seed, epoch, sizes and options", "[shard_shuffle]") {
  const ShardShuffle a(kSizes, 1, 0, options_of(24, 4, 16));
  const ShardShuffle b(kSizes, 1, 0, options_of(24, 4, 16));
  CHECK(epoch_sequence(a, 2) == epoch_sequence(b, 2));
  CHECK(epoch_sequence(a, 2) != epoch_sequence(a, 3));
  ShardShuffle::Options other_seed = options_of(24, 4, 16);
  other_seed.seed = 8;
  CHECK(epoch_sequence(a, 2) != epoch_sequence(ShardShuffle(kSizes, 1, 0, other_seed), 2));
  CHECK(epoch_sequence(a, 2) !=
        epoch_sequence(ShardShuffle(kSizes, 1, 0, options_of(24, 2, 16)), 2));
}

TEST_CASE("shard shuffle: without shuffle, the dataset's order partition by partition",
          "[shard_shuffle]") {
  ShardShuffle::Options o = options_of(10, 1, 16);
  o.shuffle = false;
  const Indices all = epoch_sequence(ShardShuffle(kSizes, 1, 0, o), 0);
  Indices want(250);
  std::iota(want.begin(), want.end(), std::size_t{0});
  CHECK(all == want);  // 25 full batches, no padding
  // Two partitions: each global batch takes 5 samples from the first half, then 5 from the
  // second.
  o.canonical_partitions = 2;
  const Indices halves = ShardShuffle(kSizes, 1, 0, o).global_batch(0, 1);
  CHECK(halves == Indices{5, 6, 7, 8, 9, 130, 131, 132, 133, 134});
}

TEST_CASE("shard shuffle: a block's samples come from a bounded number of shards",
          "[shard_shuffle]") {
  // INV-SHARD-ORDER-2, read from the order itself: the shards among each block's samples.
  const std::vector<std::uint64_t> first = firsts(kSizes);
  const std::uint64_t s_min = 17;
  const bool interleave = GENERATE(true, false);
  for (const std::uint64_t block : {8U, 16U, 50U, 120U}) {
    detail::ShardOrderParams p;
    p.partitions = 4;
    p.block = block;
    p.global_batch = 24;
    p.seed = 3;
    p.interleave = interleave;
    detail::ShardOrder order(first, p, 1);
    std::map<std::pair<std::size_t, std::uint64_t>, std::set<std::size_t>> shards_of_block;
    for (std::uint64_t j = 0; j < order.samples(); ++j) {
      const detail::ShardOrder::Place where = order.place(j);
      shards_of_block[{where.partition, where.local / block}].insert(order.shard_of(order.at(j)));
    }
    const std::size_t bound = static_cast<std::size_t>((block - 1) / s_min + 2);
    std::size_t most = 0;
    for (const auto& [key, shards] : shards_of_block) most = std::max(most, shards.size());
    INFO("block " << block << (interleave ? " interleaved" : " permuted") << ": at most " << most
                  << " shards, bound " << bound);
    CHECK(most <= bound);
    CHECK(most >= 2);  // the blocks do mix shards
  }
}

TEST_CASE("shard shuffle: few shards are open at any global batch", "[shard_shuffle]") {
  // 64 shards of 100 samples, 4 partitions, blocks of 200 samples (2 shards), global batches
  // of 32 (8 from each partition). A shard is open from the first global batch that reads it
  // to the last; at no batch may more than P x (ceil(c / B) + 2) x (floor((B - 1) / s) + 2)
  // shards be open, where a global permutation keeps nearly every shard open.
  const Sizes sizes(64, 100);
  const ShardShuffle s(sizes, 1, 0, options_of(32, 4, 200));
  std::map<std::size_t, std::pair<std::size_t, std::size_t>> span;  // shard -> first, last batch
  for (std::size_t k = 0; k < s.num_batches(); ++k) {
    for (const std::size_t i : s.global_batch(0, k)) {
      const std::size_t shard = i / 100;
      auto [it, fresh] = span.try_emplace(shard, k, k);
      it->second.second = k;
    }
  }
  std::size_t most = 0;
  for (std::size_t k = 0; k < s.num_batches(); ++k) {
    std::size_t open = 0;
    for (const auto& [shard, range] : span) open += range.first <= k && k <= range.second ? 1 : 0;
    most = std::max(most, open);
  }
  const std::size_t bound = 4 * (1 + 2) * ((200 - 1) / 100 + 2);
  INFO("at most " << most << " shards open, bound " << bound);
  CHECK(most <= bound);
  CHECK(most <= 64 / 4);
}

TEST_CASE("shard shuffle: the state key names the order but not the world size",
          "[shard_shuffle]") {
  const OrderInfo one = ShardShuffle(kSizes, 1, 0, options_of(24, 4, 16)).order_info();
  const OrderInfo four = ShardShuffle(kSizes, 4, 3, options_of(24, 4, 16)).order_info();
  CHECK(one.key == four.key);
  CHECK(one.world_size == 1);
  CHECK(four.world_size == 4);
  CHECK(four.rank == 3);
  CHECK(one.key.rfind("shard-shuffle/1 seed=7 shuffle=1 partitions=4 global_batch=24 block=16 "
                      "within=interleave drop_last=0 shards=9 samples=250 sizes=",
                      0) == 0);
  Sizes moved = kSizes;  // the same total, one sample moved between shards
  moved[0] -= 1;
  moved[1] += 1;
  CHECK(ShardShuffle(moved, 1, 0, options_of(24, 4, 16)).order_info().key != one.key);
  CHECK(ShardShuffle(kSizes, 1, 0, options_of(48, 4, 16)).order_info().key != one.key);
  ShardShuffle::Options permute = options_of(24, 4, 16);
  permute.block_order = ShardShuffle::BlockOrder::kPermute;
  CHECK(ShardShuffle(kSizes, 1, 0, permute).order_info().key.find(" within=permute ") !=
        std::string::npos);
  // The default block: kDefaultBlockShards x the mean shard size (250 / 9, rounded up).
  const ShardShuffle defaults(kSizes, 1, 0, options_of(24, 4, 0));
  CHECK(defaults.shuffle_block() == ShardShuffle::kDefaultBlockShards * 28);
  CHECK(defaults.order_info().key.find(" block=112 ") != std::string::npos);
}

TEST_CASE("shard shuffle: DistributedSampler's key names its world size", "[shard_shuffle]") {
  const OrderInfo info = DistributedSampler(100, 4, 2, DistributedSampler::Options{}).order_info();
  CHECK(info.key == "distributed/1 seed=0 shuffle=1 drop_last=0 replicas=4 samples=100");
  CHECK(info.world_size == 4);
  CHECK(info.rank == 2);
  CHECK(SequentialSampler(5).order_info().key.empty());
}

TEST_CASE("shard shuffle: each bad option is named", "[shard_shuffle]") {
  auto error = [](std::size_t world, std::size_t rank, ShardShuffle::Options o) {
    return message_of<std::invalid_argument>([&] { (void)ShardShuffle(kSizes, world, rank, o); });
  };
  CHECK(error(1, 0, options_of(0, 1, 0)) ==
        "ShardShuffle: Options::global_batch_size is 0; set it to the samples of one step "
        "summed over every rank");
  CHECK(error(1, 0, options_of(24, 0, 0)) ==
        "ShardShuffle: Options::canonical_partitions is 0; it must be at least 1 (the largest "
        "number of nodes the run may use is a good choice)");
  CHECK(error(1, 0, options_of(20, 8, 0)) ==
        "ShardShuffle: Options::global_batch_size (20) is not a multiple of "
        "canonical_partitions (8); every global batch takes the same number of samples from "
        "each partition");
  CHECK(error(5, 0, options_of(24, 4, 0)) ==
        "ShardShuffle: Options::global_batch_size (24) is not a multiple of num_replicas (5), "
        "so the ranks' batches could not be equal; run on a world size that divides it");
  CHECK(error(0, 0, options_of(24, 4, 0)) == "ShardShuffle: num_replicas must be at least 1");
  CHECK(error(4, 4, options_of(24, 4, 0)) ==
        "ShardShuffle: rank 4 is not below num_replicas 4; ranks count from 0");
  const ShardShuffle s(kSizes, 1, 0, options_of(24, 4, 0));
  CHECK(message_of<std::out_of_range>([&] { (void)s.global_batch(0, 11); }) ==
        "ShardShuffle::global_batch: batch 11 is past the epoch's 11 global batches");
}

TEST_CASE("shard shuffle: interleaved blocks read each shard in record order", "[shard_shuffle]") {
  // INV-SHARD-ORDER-3: within a block, a shard's samples come in increasing index order, so
  // each shard is read front to back; permuted blocks do not keep it.
  const std::vector<std::uint64_t> first = firsts(kSizes);
  for (const bool interleave : {true, false}) {
    detail::ShardOrderParams p;
    p.partitions = 3;
    p.block = 60;
    p.global_batch = 12;
    p.seed = 11;
    p.interleave = interleave;
    detail::ShardOrder order(first, p, 2);
    std::map<std::pair<std::size_t, std::uint64_t>, std::map<std::size_t, std::uint64_t>> last;
    std::size_t backwards = 0;
    // Global positions in order, as the ranks read them; the tail's positions belong to the
    // partitions' last blocks, read after their full batches.
    for (std::uint64_t j = 0; j < order.samples(); ++j) {
      const detail::ShardOrder::Place where = order.place(j);
      const std::uint64_t index = order.at(j);
      auto& seen = last[{where.partition, where.local / p.block}];
      const std::size_t shard = order.shard_of(index);
      const auto it = seen.find(shard);
      if (it != seen.end() && index < it->second) ++backwards;
      seen[shard] = index;
    }
    INFO((interleave ? "interleaved" : "permuted") << ": " << backwards << " steps back");
    if (interleave) {
      CHECK(backwards == 0);
    } else {
      CHECK(backwards > 50);
    }
  }
}

namespace {

// Bytes a cache of whole shards (least recently used out) fetches over `indices`, as a multiple
// of the corpus; `capacity` in samples, shard s of sizes[s] samples.
double corpus_reads(const std::vector<Indices>& batches, const Sizes& sizes,
                    const std::vector<std::size_t>& shard_of, std::uint64_t capacity) {
  std::vector<std::uint64_t> last_use(sizes.size(), 0);    // 0: not cached
  std::set<std::pair<std::uint64_t, std::size_t>> by_age;  // (last use, shard)
  std::uint64_t held = 0;
  std::uint64_t fetched = 0;
  std::uint64_t clock = 0;
  for (const Indices& batch : batches) {
    for (const std::size_t i : batch) {
      const std::size_t shard = shard_of[i];
      ++clock;
      if (last_use[shard] != 0) {
        by_age.erase({last_use[shard], shard});
      } else {
        while (!by_age.empty() && held + sizes[shard] > capacity) {
          const std::size_t victim = by_age.begin()->second;
          by_age.erase(by_age.begin());
          held -= sizes[victim];
          last_use[victim] = 0;
        }
        held += sizes[shard];
        fetched += sizes[shard];
      }
      last_use[shard] = clock;
      by_age.emplace(clock, shard);
    }
  }
  const std::uint64_t corpus = std::accumulate(sizes.begin(), sizes.end(), std::uint64_t{0});
  return static_cast<double>(fetched) / static_cast<double>(corpus);
}

// The most shards one worker has open at once (read from already and to be read from again),
// worker w of `workers` loading batches w, w + workers, ...
std::size_t most_open(const std::vector<Indices>& batches, const std::vector<std::size_t>& shard_of,
                      std::size_t workers, std::size_t w) {
  std::map<std::size_t, std::pair<std::size_t, std::size_t>> span;  // shard -> first, last read
  std::size_t t = 0;
  for (std::size_t k = w; k < batches.size(); k += workers) {
    for (const std::size_t i : batches[k]) {
      auto [it, fresh] = span.try_emplace(shard_of[i], t, t);
      it->second.second = t++;
    }
  }
  std::vector<long> delta(t + 1, 0);
  for (const auto& [shard, range] : span) {
    ++delta[range.first];
    --delta[range.second + 1];
  }
  long open = 0;
  long most = 0;
  for (const long d : delta) most = std::max(most, open += d);
  return static_cast<std::size_t>(most);
}

}  // namespace

TEST_CASE("shard shuffle: with the default block a 10% cache reads the corpus about once",
          "[shard_shuffle]") {
  // The "Done when" figures of bench/shard_order.cpp, on a smaller corpus: 1000 shards of 18
  // to 22 samples, global batches of 64, 4 workers a rank. One cache for all ranks (one
  // node), 10% of the corpus. A global permutation fetches each shard many times an epoch.
  Sizes sizes(1000);
  std::vector<std::size_t> shard_of;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    sizes[s] = 18 + (s * 7) % 5;
    shard_of.insert(shard_of.end(), sizes[s], s);
  }
  const std::uint64_t corpus = shard_of.size();
  const std::uint64_t cache = corpus / 10;
  constexpr std::size_t kWorkers = 4;
  const auto layout = GENERATE(std::pair<std::size_t, std::size_t>{1, 1},  // world, partitions
                               std::pair<std::size_t, std::size_t>{4, 2},
                               std::pair<std::size_t, std::size_t>{8, 8});
  const auto [world, partitions] = layout;
  ShardShuffle::Options o;
  o.global_batch_size = 64;
  o.canonical_partitions = partitions;
  o.seed = 5;
  std::vector<Indices> steps;  // the node's reads, step by step: every rank's batch k
  std::size_t open = 0;
  for (std::size_t r = 0; r < world; ++r) {
    ShardShuffle s(sizes, world, r, o);
    const std::vector<Indices> mine = s.batches(2);
    steps.resize(mine.size());
    for (std::size_t k = 0; k < mine.size(); ++k)
      steps[k].insert(steps[k].end(), mine[k].begin(), mine[k].end());
    for (std::size_t w = 0; w < kWorkers; ++w)
      open = std::max(open, most_open(mine, shard_of, kWorkers, w));
  }
  const double reads = corpus_reads(steps, sizes, shard_of, cache);
  RandomSampler::Options ro;
  ro.seed = 5;
  BatchSampler global(std::make_shared<RandomSampler>(corpus, ro), 64, false);
  const double permuted = corpus_reads(global.batches(2), sizes, shard_of, cache);
  INFO("world " << world << ", P " << partitions << ": " << open << " shards open at most, "
                << reads << "x the corpus read; a global permutation " << permuted << "x");
  // The block of 4 mean shards spans at most (B - 1) / s_min + 2 = 6 shards; one or two more
  // while a rank reads across a block's end and at the padding of the last batch.
  CHECK(open <= ShardShuffle::kDefaultBlockShards + 4);
  CHECK(reads <= 1.5);
  CHECK(permuted >= 10 * reads);
}
