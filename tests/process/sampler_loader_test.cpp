// Samplers through a real DataLoader, in-process and with forked workers: the loader delivers
// exactly the sampler's (or batch sampler's) order, rejects bad indices and conflicting options
// with messages that say what to change, shards a dataset with DistributedSampler, and gives
// sample_rng() values that depend on (seed, epoch, index) only, never on num_workers.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "support/clean_state.hpp"
#include "support/datasets.hpp"

using namespace stoker;
using stoker::test::IndexDataset;

namespace {

using Indices = std::vector<std::size_t>;
using Batches = std::vector<Indices>;

// Matches an exception whose what() contains every one of `parts`.
class MessageContains final : public Catch::MatcherBase<std::exception> {
 public:
  MessageContains(std::initializer_list<std::string> parts) : parts_(parts) {}
  bool match(const std::exception& e) const override {
    const std::string what = e.what();
    return std::all_of(parts_.begin(), parts_.end(), [&](const std::string& part) {
      return what.find(part) != std::string::npos;
    });
  }
  std::string describe() const override {
    std::string out = "has a message containing";
    for (const std::string& part : parts_) out += " \"" + part + "\"";
    return out;
  }

 private:
  std::vector<std::string> parts_;
};

// The dataset indices of one epoch, batch by batch, checked against the samples' fields.
Batches run_epoch(DataLoader<IndexDataset>& loader) {
  Batches batches;
  for (const Batch& batch : loader) {
    REQUIRE(batch.index() == batches.size());
    const std::vector<std::int64_t> values = test::batch_indices(batch);
    REQUIRE(values.size() == batch.size());
    REQUIRE(batch.indices().size() == batch.size());
    for (std::size_t k = 0; k < values.size(); ++k) {
      REQUIRE(values[k] == static_cast<std::int64_t>(batch.indices()[k]));
    }
    REQUIRE(batch["data"].shape() == Shape({static_cast<std::int64_t>(batch.size()), 4}));
    const float* data = batch["data"].data<float>();
    for (std::size_t k = 0; k < batch.size(); ++k) {
      REQUIRE(data[k * 4 + 3] == static_cast<float>(batch.indices()[k] + 3));
    }
    batches.emplace_back(batch.indices().begin(), batch.indices().end());
  }
  return batches;
}

// `order` cut into batches of batch_size, the last one shorter or dropped.
Batches chunk(const Indices& order, std::size_t batch_size, bool drop_last) {
  Batches out;
  for (std::size_t begin = 0; begin < order.size(); begin += batch_size) {
    const std::size_t end = std::min(order.size(), begin + batch_size);
    if (drop_last && end - begin < batch_size) break;
    out.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(begin),
                     order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return out;
}

Indices flatten(const Batches& batches) {
  Indices out;
  for (const Indices& b : batches) out.insert(out.end(), b.begin(), b.end());
  return out;
}

// A user sampler: a fixed list per epoch (epoch e gets lists[e % lists.size()]).
class ListSampler final : public Sampler {
 public:
  explicit ListSampler(std::vector<Indices> lists) : lists_(std::move(lists)) {}
  Indices indices(std::uint64_t epoch) override { return lists_[epoch % lists_.size()]; }

 private:
  std::vector<Indices> lists_;
};

// A user sampler that records the epochs it is asked for, and whose list the test can change
// between epochs (from the main process, where the loader asks it).
class SettableSampler final : public Sampler {
 public:
  explicit SettableSampler(Indices list) : list_(std::move(list)) {}
  Indices indices(std::uint64_t epoch) override {
    epochs_.push_back(epoch);
    return list_;
  }
  void set(Indices list) { list_ = std::move(list); }
  const std::vector<std::uint64_t>& epochs() const { return epochs_; }

 private:
  Indices list_;
  std::vector<std::uint64_t> epochs_;
};

// A user batch sampler: fixed batches per epoch (epoch e gets lists[e % lists.size()]).
class ListBatchSampler final : public BatchSamplerBase {
 public:
  explicit ListBatchSampler(std::vector<Batches> lists) : lists_(std::move(lists)) {}
  Batches batches(std::uint64_t epoch) override { return lists_[epoch % lists_.size()]; }

 private:
  std::vector<Batches> lists_;
};

// A user batch sampler of buckets of sizes 1, 5, 2 and 7 (one with a repeated index), the
// buckets rotated by one each epoch.
class BucketBatchSampler final : public BatchSamplerBase {
 public:
  Batches batches(std::uint64_t epoch) override {
    Batches out{{4}, {0, 1, 2, 3, 5}, {9, 9}, {10, 11, 12, 13, 14, 15, 6}};
    std::rotate(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(epoch % out.size()),
                out.end());
    return out;
  }
};

TEST_CASE("LoaderOptions::sampler: the loader delivers exactly the sampler's order",
          "[loader][sampler]") {
  const int workers = GENERATE(0, 2);
  const bool drop_last = GENERATE(false, true);
  CAPTURE(workers, drop_last);
  const test::ProcessState baseline = test::process_state();
  SECTION("a user sampler, repeats included, its list for each epoch") {
    {
      LoaderOptions opt;
      opt.batch_size = 3;
      opt.drop_last = drop_last;
      opt.num_workers = workers;
      opt.sampler = std::make_shared<ListSampler>(
          std::vector<Indices>{{9, 2, 2, 7, 0, 5, 11}, {1, 3, 5, 7, 9, 11, 13, 0, 2}});
      DataLoader loader(IndexDataset{14, {}}, opt);
      const Batches epoch0 =
          drop_last ? Batches{{9, 2, 2}, {7, 0, 5}} : Batches{{9, 2, 2}, {7, 0, 5}, {11}};
      REQUIRE(loader.size() == epoch0.size());
      REQUIRE(run_epoch(loader) == epoch0);
      REQUIRE(loader.size() == 3);
      REQUIRE(run_epoch(loader) == Batches{{1, 3, 5}, {7, 9, 11}, {13, 0, 2}});
      loader.set_epoch(0);
      REQUIRE(run_epoch(loader) == epoch0);
    }
    STOKER_REQUIRE_CLEAN(baseline);
  }
  SECTION("a sampler with too few indices for a batch: an empty epoch, no worker forked") {
    {
      LoaderOptions opt;
      opt.batch_size = 3;
      opt.drop_last = drop_last;
      opt.num_workers = workers;
      opt.sampler = std::make_shared<ListSampler>(std::vector<Indices>{{}, {6, 1}});
      DataLoader loader(IndexDataset{14, {}}, opt);
      REQUIRE(loader.size() == 0);
      REQUIRE(run_epoch(loader).empty());
      REQUIRE(loader.size() == (drop_last ? 0u : 1u));
      REQUIRE(run_epoch(loader) == (drop_last ? Batches{} : Batches{{6, 1}}));
      REQUIRE(loader.epoch() == 2);
    }
    STOKER_REQUIRE_CLEAN(baseline);
  }
  SECTION("a RandomSampler drawing more samples than the dataset has") {
    {
      const RandomSampler::Options options{.replacement = false, .num_samples = 30, .seed = 7};
      RandomSampler reference(23, options);
      LoaderOptions opt;
      opt.batch_size = 4;
      opt.drop_last = drop_last;
      opt.num_workers = workers;
      opt.sampler = std::make_shared<RandomSampler>(23, options);
      DataLoader loader(IndexDataset{23, {}}, opt);
      REQUIRE(loader.size() == (drop_last ? 7u : 8u));
      const Batches epoch0 = run_epoch(loader);
      REQUIRE(epoch0 == chunk(reference.indices(0), 4, drop_last));
      REQUIRE(loader.size() == (drop_last ? 7u : 8u));
      const Batches epoch1 = run_epoch(loader);
      REQUIRE(epoch1 == chunk(reference.indices(1), 4, drop_last));
      REQUIRE(epoch1 != epoch0);
    }
    STOKER_REQUIRE_CLEAN(baseline);
  }
  SECTION("a WeightedRandomSampler with replacement repeats indices within a batch") {
    {
      // Two positive weights: 8 draws per batch must repeat an index.
      const std::vector<double> weights{0, 1, 0, 1, 0};
      WeightedRandomSampler reference(weights, 40, true, 5);
      LoaderOptions opt;
      opt.batch_size = 8;
      opt.drop_last = drop_last;
      opt.num_workers = workers;
      opt.sampler = std::make_shared<WeightedRandomSampler>(weights, 40, true, 5);
      DataLoader loader(IndexDataset{5, {}}, opt);
      REQUIRE(loader.size() == 5);
      for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
        CAPTURE(epoch);
        const Batches batches = run_epoch(loader);
        REQUIRE(batches == chunk(reference.indices(epoch), 8, drop_last));
        for (const Indices& batch : batches) {
          REQUIRE(batch.size() == 8);
          REQUIRE(std::set<std::size_t>(batch.begin(), batch.end()).size() < batch.size());
          for (const std::size_t i : batch) REQUIRE((i == 1 || i == 3));
        }
      }
    }
    STOKER_REQUIRE_CLEAN(baseline);
  }
}

TEST_CASE("the loader asks its sampler once per epoch, passing the epoch", "[loader][sampler]") {
  const int workers = GENERATE(0, 2);
  CAPTURE(workers);
  const test::ProcessState baseline = test::process_state();
  {
    auto sampler = std::make_shared<SettableSampler>(Indices{0, 1, 2, 3});
    LoaderOptions opt;
    opt.batch_size = 2;
    opt.num_workers = workers;
    opt.sampler = sampler;
    DataLoader loader(IndexDataset{10, {}}, opt);
    REQUIRE(loader.size() == 2);
    REQUIRE(loader.size() == 2);
    REQUIRE(run_epoch(loader) == Batches{{0, 1}, {2, 3}});
    REQUIRE(sampler->epochs() == std::vector<std::uint64_t>{0});  // size() and begin(): once
    // A change between epochs is seen by the next epoch.
    sampler->set(Indices{9, 8, 7, 6, 5});
    REQUIRE(run_epoch(loader) == Batches{{9, 8}, {7, 6}, {5}});
    loader.set_epoch(7);
    REQUIRE(loader.size() == 3);
    REQUIRE(run_epoch(loader) == Batches{{9, 8}, {7, 6}, {5}});
    REQUIRE(sampler->epochs() == std::vector<std::uint64_t>{0, 1, 7});
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

// With persistent workers the loader once asked the sampler for epoch e + 1 while epoch e ran
// (to prefetch), so a sampler changed between epochs (a curriculum, say) was seen one epoch
// late. A user's sampler is now asked at begin(), persistent workers or not, as in PyTorch.
TEST_CASE("persistent workers: a sampler changed between epochs is seen by the next epoch",
          "[loader][sampler][regression]") {
  auto sampler = std::make_shared<SettableSampler>(Indices{0, 1, 2, 3});
  LoaderOptions opt;
  opt.batch_size = 2;
  opt.num_workers = 2;
  opt.persistent_workers = true;
  opt.sampler = sampler;
  DataLoader loader(IndexDataset{10, {}}, opt);
  REQUIRE(run_epoch(loader) == Batches{{0, 1}, {2, 3}});
  sampler->set(Indices{9, 8, 7, 6, 5});
  CHECK(loader.size() == 3);
  REQUIRE(run_epoch(loader) == Batches{{9, 8}, {7, 6}, {5}});
}

// The same prefetch once asked for epoch 1's order while epoch 0 was being issued, so an index
// past the end in epoch 1 failed epoch 0. The sampler's contract: begin() of epoch 1 throws.
TEST_CASE("persistent workers: a bad index in the next epoch does not fail this one",
          "[loader][sampler][regression]") {
  LoaderOptions opt;
  opt.batch_size = 2;
  opt.num_workers = 2;
  opt.persistent_workers = true;
  opt.sampler = std::make_shared<ListSampler>(std::vector<Indices>{{0, 1, 2, 3, 4, 5}, {0, 1, 99}});
  DataLoader loader(IndexDataset{10, {}}, opt);
  REQUIRE(run_epoch(loader) == Batches{{0, 1}, {2, 3}, {4, 5}});
  REQUIRE_THROWS_MATCHES(loader.begin(), std::out_of_range,
                         MessageContains({"index 99", "position 2 of epoch 1"}));
}

TEST_CASE("LoaderOptions::batch_sampler: batches of different sizes arrive batch for batch",
          "[loader][sampler]") {
  const int workers = GENERATE(0, 2);
  CAPTURE(workers);
  const test::ProcessState baseline = test::process_state();
  {
    LoaderOptions opt;
    opt.num_workers = workers;
    opt.batch_sampler = std::make_shared<BucketBatchSampler>();
    DataLoader loader(IndexDataset{16, {}}, opt);
    REQUIRE(loader.size() == 4);
    REQUIRE(run_epoch(loader) ==
            Batches{{4}, {0, 1, 2, 3, 5}, {9, 9}, {10, 11, 12, 13, 14, 15, 6}});
    REQUIRE(loader.size() == 4);
    REQUIRE(run_epoch(loader) ==
            Batches{{0, 1, 2, 3, 5}, {9, 9}, {10, 11, 12, 13, 14, 15, 6}, {4}});
    loader.set_epoch(3);
    REQUIRE(run_epoch(loader) ==
            Batches{{10, 11, 12, 13, 14, 15, 6}, {4}, {0, 1, 2, 3, 5}, {9, 9}});
  }
  {
    // The built-in BatchSampler, as a batch sampler.
    LoaderOptions opt;
    opt.num_workers = workers;
    opt.batch_sampler =
        std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(10), 3, false);
    DataLoader loader(IndexDataset{10, {}}, opt);
    REQUIRE(loader.size() == 4);
    REQUIRE(run_epoch(loader) == Batches{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}});
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("a sampler's index past the dataset's end, or an empty batch, fails begin()",
          "[loader][sampler]") {
  const int workers = GENERATE(0, 2);
  CAPTURE(workers);
  const test::ProcessState baseline = test::process_state();
  SECTION("a user sampler: std::out_of_range naming the index, its position and the epoch") {
    {
      LoaderOptions opt;
      opt.batch_size = 2;
      opt.num_workers = workers;
      opt.sampler = std::make_shared<ListSampler>(std::vector<Indices>{{0, 1, 2, 57, 3}});
      DataLoader loader(IndexDataset{10, {}}, opt);
      loader.set_epoch(5);
      REQUIRE_THROWS_MATCHES(loader.begin(), std::out_of_range,
                             MessageContains({"the sampler gave index 57", "position 3 of epoch 5",
                                              "the dataset has 10 samples"}));
      REQUIRE(loader.epoch() == 5);  // the failed begin() did not start the epoch
    }
    STOKER_REQUIRE_CLEAN(baseline);
  }
  SECTION("a user batch sampler: std::out_of_range, the position counted across batches") {
    {
      LoaderOptions opt;
      opt.num_workers = workers;
      opt.batch_sampler =
          std::make_shared<ListBatchSampler>(std::vector<Batches>{{{0, 1}, {2, 12}}});
      DataLoader loader(IndexDataset{10, {}}, opt);
      REQUIRE_THROWS_MATCHES(
          loader.begin(), std::out_of_range,
          MessageContains({"the batch sampler gave index 12", "position 3 of epoch 0"}));
    }
    STOKER_REQUIRE_CLEAN(baseline);
  }
  SECTION("a user batch sampler's empty batch: std::invalid_argument") {
    {
      LoaderOptions opt;
      opt.num_workers = workers;
      opt.batch_sampler =
          std::make_shared<ListBatchSampler>(std::vector<Batches>{{{0, 1}, {}, {2}}});
      DataLoader loader(IndexDataset{10, {}}, opt);
      REQUIRE_THROWS_MATCHES(
          loader.begin(), std::invalid_argument,
          MessageContains({"batch sampler's batch 1 of epoch 0 is empty", "at least one index"}));
    }
    STOKER_REQUIRE_CLEAN(baseline);
  }
}

TEST_CASE("sampler and batch_sampler conflicts name the conflicting option", "[loader][sampler]") {
  const auto sampler = std::make_shared<SequentialSampler>(10);
  const auto batch_sampler = std::make_shared<BatchSampler>(sampler, 2, false);
  SECTION("sampler + shuffle") {
    LoaderOptions opt;
    opt.sampler = sampler;
    opt.shuffle = true;
    REQUIRE_THROWS_MATCHES(DataLoader(IndexDataset{10, {}}, opt), std::invalid_argument,
                           MessageContains({"LoaderOptions::sampler decides the order",
                                            "cannot be combined with shuffle"}));
  }
  SECTION("batch_sampler + batch_size 4") {
    LoaderOptions opt;
    opt.batch_sampler = batch_sampler;
    opt.batch_size = 4;
    REQUIRE_THROWS_MATCHES(DataLoader(IndexDataset{10, {}}, opt), std::invalid_argument,
                           MessageContains({"LoaderOptions::batch_sampler decides the batches",
                                            "cannot be combined with batch_size:"}));
  }
  SECTION("batch_sampler + shuffle") {
    LoaderOptions opt;
    opt.batch_sampler = batch_sampler;
    opt.shuffle = true;
    REQUIRE_THROWS_MATCHES(
        DataLoader(IndexDataset{10, {}}, opt), std::invalid_argument,
        MessageContains({"LoaderOptions::batch_sampler", "cannot be combined with shuffle:"}));
  }
  SECTION("batch_sampler + drop_last") {
    LoaderOptions opt;
    opt.batch_sampler = batch_sampler;
    opt.drop_last = true;
    REQUIRE_THROWS_MATCHES(
        DataLoader(IndexDataset{10, {}}, opt), std::invalid_argument,
        MessageContains({"LoaderOptions::batch_sampler", "cannot be combined with drop_last:"}));
  }
  SECTION("batch_sampler + sampler") {
    LoaderOptions opt;
    opt.batch_sampler = batch_sampler;
    opt.sampler = sampler;
    REQUIRE_THROWS_MATCHES(
        DataLoader(IndexDataset{10, {}}, opt), std::invalid_argument,
        MessageContains({"LoaderOptions::batch_sampler", "cannot be combined with sampler:"}));
  }
  SECTION("each alone, or the sampler with batch_size and drop_last, is fine") {
    LoaderOptions with_sampler;
    with_sampler.sampler = sampler;
    with_sampler.batch_size = 4;
    with_sampler.drop_last = true;
    REQUIRE_NOTHROW(DataLoader(IndexDataset{10, {}}, with_sampler));
    LoaderOptions with_batch_sampler;
    with_batch_sampler.batch_sampler = batch_sampler;
    REQUIRE_NOTHROW(DataLoader(IndexDataset{10, {}}, with_batch_sampler));
  }
}

// Per epoch, per rank: the indices one loader per simulated rank delivered, sharding a
// dataset of kShardedSize among 4 ranks.
constexpr std::size_t kShardedSize = 10;

std::vector<std::vector<Indices>> distributed_run(bool shuffle) {
  const std::size_t n = kShardedSize;
  const std::size_t replicas = 4;
  std::vector<std::vector<Indices>> per_epoch(2, std::vector<Indices>(replicas));
  for (std::size_t rank = 0; rank < replicas; ++rank) {
    LoaderOptions opt;
    opt.batch_size = 2;
    opt.num_workers = 2;
    opt.seed = 3;
    opt.sampler = std::make_shared<DistributedSampler>(
        n, replicas, rank,
        DistributedSampler::Options{.shuffle = shuffle, .seed = 3, .drop_last = false});
    DataLoader loader(IndexDataset{n, {}}, opt);
    REQUIRE(loader.size() == 2);  // ceil(10 / 4) = 3 per rank, in batches of 2
    for (std::size_t epoch = 0; epoch < 2; ++epoch) {
      per_epoch[epoch][rank] = flatten(run_epoch(loader));
    }
  }
  return per_epoch;
}

TEST_CASE("DistributedSampler: one loader per rank shards the dataset", "[loader][sampler]") {
  const std::size_t n = kShardedSize;
  const test::ProcessState baseline = test::process_state();
  SECTION("without shuffle: the documented shards, padded with 0 and 1") {
    const auto run = distributed_run(false);
    const std::vector<Indices> expected{{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}};
    REQUIRE(run[0] == expected);
    REQUIRE(run[1] == expected);
  }
  SECTION("with shuffle: a new split each epoch, the same one when rerun") {
    const auto run = distributed_run(true);
    for (std::size_t epoch = 0; epoch < 2; ++epoch) {
      CAPTURE(epoch);
      // Position k of the epoch's padded order is element k / 4 of rank k % 4.
      Indices order;
      for (std::size_t k = 0; k < 12; ++k) {
        REQUIRE(run[epoch][k % 4].size() == 3);
        order.push_back(run[epoch][k % 4][k / 4]);
      }
      const Indices head(order.begin(), order.begin() + 10);
      Indices sorted_head = head;
      std::sort(sorted_head.begin(), sorted_head.end());
      REQUIRE(sorted_head == Indices{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});  // the union covers all
      REQUIRE(order[10] == order[0]);  // padding repeats the start of the order
      REQUIRE(order[11] == order[1]);
      for (std::size_t rank = 0; rank < 4; ++rank) {
        DistributedSampler direct(n, 4, rank, {.shuffle = true, .seed = 3, .drop_last = false});
        REQUIRE(run[epoch][rank] == direct.indices(epoch));
      }
    }
    for (std::size_t rank = 0; rank < 4; ++rank) {
      CAPTURE(rank);
      REQUIRE(run[0][rank] != run[1][rank]);
    }
    REQUIRE(distributed_run(true) == run);
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

// Sample i draws from sample_rng(): a flip flag, a uniform float, and two raw 64-bit values,
// each from its own call of sample_rng().
struct RngDataset {
  std::size_t n = 40;

  std::size_t size() const { return n; }
  Sample get(std::size_t i) const {
    Generator& rng = sample_rng();
    const bool flip = rng.bernoulli(0.5);
    const auto u = static_cast<float>(rng.uniform());
    const std::uint64_t a = sample_rng().next();
    const std::uint64_t b = sample_rng().next();
    Sample s;
    s.set("index", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
    s.set("flip", Tensor::scalar<std::uint8_t>(static_cast<std::uint8_t>(flip ? 1 : 0)));
    s.set("u", Tensor::scalar<float>(u));
    s.set("a", Tensor::scalar<std::uint64_t>(a));
    s.set("b", Tensor::scalar<std::uint64_t>(b));
    return s;
  }
};

struct RngRow {
  std::size_t index = 0;
  std::uint8_t flip = 0;
  std::uint32_t u_bits = 0;  // the float's bits: compared bit for bit
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  bool operator==(const RngRow&) const = default;
};

std::ostream& operator<<(std::ostream& os, const RngRow& row) {
  return os << "{index " << row.index << ", flip " << int{row.flip} << ", u bits " << row.u_bits
            << ", a " << row.a << ", b " << row.b << "}";
}

float float_of(std::uint32_t bits) {
  float f = 0;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::vector<std::vector<RngRow>> rng_epoch(DataLoader<RngDataset>& loader) {
  std::vector<std::vector<RngRow>> batches;
  for (const Batch& batch : loader) {
    std::vector<RngRow> rows(batch.size());
    const std::int64_t* index = batch["index"].data<std::int64_t>();
    const std::uint8_t* flip = batch["flip"].data<std::uint8_t>();
    const float* u = batch["u"].data<float>();
    const std::uint64_t* a = batch["a"].data<std::uint64_t>();
    const std::uint64_t* b = batch["b"].data<std::uint64_t>();
    for (std::size_t k = 0; k < batch.size(); ++k) {
      REQUIRE(index[k] == static_cast<std::int64_t>(batch.indices()[k]));
      rows[k].index = batch.indices()[k];
      rows[k].flip = flip[k];
      std::memcpy(&rows[k].u_bits, &u[k], sizeof rows[k].u_bits);
      rows[k].a = a[k];
      rows[k].b = b[k];
    }
    batches.push_back(std::move(rows));
  }
  return batches;
}

// Two epochs of RngDataset{40}, shuffled, in batches of 6.
std::vector<std::vector<std::vector<RngRow>>> rng_run(int workers, std::uint64_t seed,
                                                      bool shuffle = true) {
  LoaderOptions opt;
  opt.batch_size = 6;
  opt.num_workers = workers;
  opt.shuffle = shuffle;
  opt.seed = seed;
  DataLoader loader(RngDataset{}, opt);
  std::vector<std::vector<std::vector<RngRow>>> epochs;
  epochs.push_back(rng_epoch(loader));
  epochs.push_back(rng_epoch(loader));
  return epochs;
}

std::map<std::size_t, RngRow> by_index(const std::vector<std::vector<RngRow>>& batches) {
  std::map<std::size_t, RngRow> out;
  for (const auto& batch : batches) {
    for (const RngRow& row : batch) out[row.index] = row;
  }
  return out;
}

TEST_CASE("sample_rng: the same values for any num_workers, new ones each epoch",
          "[loader][sampler][random]") {
  const test::ProcessState baseline = test::process_state();
  const auto reference = rng_run(0, 42);
  // The loader's thread left get(): sample_rng() is off again in the main process.
  REQUIRE_THROWS_AS(sample_rng(), std::logic_error);
  REQUIRE(reference.size() == 2);
  for (std::size_t epoch = 0; epoch < 2; ++epoch) {
    CAPTURE(epoch);
    REQUIRE(reference[epoch].size() == 7);  // 40 in batches of 6
    const auto rows = by_index(reference[epoch]);
    REQUIRE(rows.size() == 40);
    std::size_t flips = 0;
    for (const auto& [index, row] : rows) {
      CAPTURE(index);
      REQUIRE(row.a != row.b);  // the second sample_rng() call continued the first's stream
      const float u = float_of(row.u_bits);
      REQUIRE(u >= 0.0f);
      REQUIRE(u < 1.0f);
      flips += row.flip;
    }
    REQUIRE(flips > 0);  // all 40 the same: 2^-39
    REQUIRE(flips < 40);
  }
  SECTION("bit-identical batches with 1, 2 and 4 workers") {
    for (const int workers : {1, 2, 4}) {
      CAPTURE(workers);
      const auto run = rng_run(workers, 42);
      REQUIRE(run == reference);
      for (const auto& epoch : run) {
        for (const auto& batch : epoch) {
          for (const RngRow& row : batch) REQUIRE(row.a != row.b);  // advanced in the worker
        }
      }
    }
  }
  SECTION("different values in different epochs, and with another seed") {
    const auto epoch0 = by_index(reference[0]);
    const auto epoch1 = by_index(reference[1]);
    std::size_t same_flip = 0;
    for (std::size_t i = 0; i < 40; ++i) {
      CAPTURE(i);
      REQUIRE(epoch0.at(i).a != epoch1.at(i).a);
      REQUIRE(epoch0.at(i).u_bits != epoch1.at(i).u_bits);
      if (epoch0.at(i).flip == epoch1.at(i).flip) ++same_flip;
    }
    REQUIRE(same_flip < 40);
    const auto other_seed = by_index(rng_run(2, 43)[0]);
    for (std::size_t i = 0; i < 40; ++i) REQUIRE(other_seed.at(i).a != epoch0.at(i).a);
  }
  SECTION("a sample's values depend on its index, not on its position in the epoch") {
    const auto in_order = rng_run(2, 42, false);
    REQUIRE(in_order[0] != reference[0]);                      // other batches ...
    REQUIRE(by_index(in_order[0]) == by_index(reference[0]));  // ... the same samples
    REQUIRE(by_index(in_order[1]) == by_index(reference[1]));
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

}  // namespace
