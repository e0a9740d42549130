// The composed datasets (composition.hpp, mixture_dataset.hpp, mnist_dataset.hpp) through a
// DataLoader: the same batches, sample_rng() augmentation included, for 0, 1, 2 and 4
// workers; every sampler (DistributedSampler included); CachedDataset under and over a
// wrapper; the memory estimate; mid-epoch resume; ChainDataset's streams in workers; errors
// from a worker naming the part.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <catch2/catch.hpp>

#include "support/clean_state.hpp"
#include "support/datasets.hpp"

using namespace stoker;

namespace {

using Bytes = std::vector<std::byte>;

// Sample i: "id" = tag * 1000 + i and "noise", 3 draws of sample_rng(): what the loader seeds
// from (seed, epoch, the loader's index), whatever wraps this dataset.
struct Tagged {
  std::size_t n = 0;
  std::int64_t tag = 0;
  std::size_t size() const { return n; }
  Sample get(std::size_t i) const {
    Tensor noise = Tensor::empty(DType::kFloat32, {3});
    for (std::size_t k = 0; k < 3; ++k) {
      noise.data<float>()[k] = static_cast<float>(sample_rng().uniform());
    }
    Sample s;
    s.set("id", Tensor::scalar<std::int64_t>(tag * 1000 + static_cast<std::int64_t>(i)));
    s.set("noise", std::move(noise));
    return s;
  }
};

Bytes bytes_of(const Batch& batch) {
  Bytes out;
  for (const auto& [name, t] : batch) out.insert(out.end(), t.bytes().begin(), t.bytes().end());
  return out;
}

std::vector<std::int64_t> ids_of(const Batch& batch) {
  const std::int64_t* p = batch["id"].data<std::int64_t>();
  return std::vector<std::int64_t>(p, p + batch.size());
}

// Every batch of `epochs` epochs, as bytes.
template <class D>
std::vector<Bytes> run(D dataset, const LoaderOptions& opt, int epochs = 2) {
  DataLoader loader(std::move(dataset), opt);
  std::vector<Bytes> out;
  for (int e = 0; e < epochs; ++e) {
    for (const Batch& batch : loader) out.push_back(bytes_of(batch));
  }
  return out;
}

LoaderOptions options(int workers, bool shuffle = true) {
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.num_workers = workers;
  opt.shuffle = shuffle;
  opt.seed = 31;
  return opt;
}

// Subset, ConcatDataset (empty part included), StackDataset and transform() in one dataset:
// 40 samples, "id" of part 0 (tags 1-2) and "b.id" of the stacked part (tag 7).
auto composed() {
  ConcatDataset concat(Subset(Tagged{30, 1}, {29, 3, 5, 7, 11, 13, 17, 19, 23, 0, 1, 2}),
                       Tagged{0, 9}, Tagged{28, 2});
  StackDataset stack({{"a", std::move(concat)}, {"b", Tagged{40, 7}}});
  return transform(std::move(stack), [](Sample s) {
    // Augmentation in the transform draws from the same generator, after the parts' draws.
    const float jitter = static_cast<float>(sample_rng().uniform());
    return s.set("jitter", Tensor::scalar<float>(jitter));
  });
}

}  // namespace

TEST_CASE("composed datasets give the same batches for 0, 1, 2 and 4 workers", "[composition]") {
  const std::vector<Bytes> reference = run(composed(), options(0));
  REQUIRE(reference.size() == 10);  // 2 epochs x 5 batches
  for (const int workers : {1, 2, 4}) {
    CAPTURE(workers);
    REQUIRE(run(composed(), options(workers)) == reference);
  }
  // And the values are what the mapping says: a.id from the Subset/Concat, b.id = 7000 + i,
  // and the jitter is the 7th draw of sample i's generator (3 + 3 in the parts first).
  DataLoader loader(composed(), options(2));
  loader.set_epoch(3);
  const std::vector<std::int64_t> subset = {29, 3, 5, 7, 11, 13, 17, 19, 23, 0, 1, 2};
  std::set<std::size_t> seen;
  for (const Batch& batch : loader) {
    const std::int64_t* a = batch["a.id"].data<std::int64_t>();
    const std::int64_t* b = batch["b.id"].data<std::int64_t>();
    const float* jitter = batch["jitter"].data<float>();
    for (std::size_t r = 0; r < batch.size(); ++r) {
      const std::size_t i = batch.indices()[r];
      REQUIRE(seen.insert(i).second);
      REQUIRE(a[r] == (i < 12 ? 1000 + subset[i] : 2000 + static_cast<std::int64_t>(i - 12)));
      REQUIRE(b[r] == 7000 + static_cast<std::int64_t>(i));
      Generator g = Generator::from({31, 3, i});
      for (int k = 0; k < 6; ++k) g.uniform();
      REQUIRE(jitter[r] == static_cast<float>(g.uniform()));
    }
  }
  REQUIRE(seen.size() == 40);
}

TEST_CASE("a MixtureDataset's blend is exact per epoch and the same for any num_workers",
          "[composition]") {
  const auto mixture = [] {
    auto tripled = transform(Tagged{9, 3}, [](Sample s) { return s; });
    return MixtureDataset({{Tagged{50, 1}, 0.5}, {Tagged{20, 2}, 0.3}, {std::move(tripled), 0.2}},
                          101, 5);
  };
  REQUIRE(mixture().counts() == std::vector<std::size_t>{51, 30, 20});
  for (const bool shuffle : {false, true}) {
    CAPTURE(shuffle);
    const std::vector<Bytes> reference = run(mixture(), options(0, shuffle), 3);
    for (const int workers : {1, 2, 4}) {
      CAPTURE(workers);
      REQUIRE(run(mixture(), options(workers, shuffle), 3) == reference);
    }
  }
  DataLoader loader(mixture(), options(2));
  std::vector<std::vector<std::int64_t>> epochs;
  std::map<std::int64_t, int> source1;  // 20 samples, 30 an epoch: over 2 epochs, 3 each
  for (int e = 0; e < 2; ++e) {
    std::map<std::int64_t, std::size_t> counts;
    std::vector<std::int64_t> order;
    for (const Batch& batch : loader) {
      for (const std::int64_t id : ids_of(batch)) {
        ++counts[id / 1000];
        order.push_back(id);
        if (id / 1000 == 2) ++source1[id];
      }
    }
    REQUIRE(counts == std::map<std::int64_t, std::size_t>{{1, 51}, {2, 30}, {3, 20}});
    epochs.push_back(order);
  }
  REQUIRE(epochs[0] != epochs[1]);
  REQUIRE(source1.size() == 20);
  for (const auto& [id, count] : source1) REQUIRE(count == 3);
}

TEST_CASE("composed datasets resume mid-epoch with another num_workers", "[composition]") {
  const auto dataset = [] {
    MixtureDataset mixture({{Tagged{30, 1}, 2}, {ConcatDataset(Tagged{5, 2}, Tagged{6, 3}), 1}}, 45,
                           9);
    return StackDataset({{"mix", std::move(mixture)}, {"aux", Tagged{45, 4}}});
  };
  LoaderOptions opt = options(2);
  opt.batch_size = 4;  // 45 samples: 12 batches an epoch
  const auto uninterrupted = [&] {
    DataLoader loader(dataset(), opt);
    loader.set_epoch(1);
    std::vector<Bytes> out;
    for (int e = 0; e < 2; ++e) {
      for (const Batch& batch : loader) out.push_back(bytes_of(batch));
    }
    return out;
  }();
  REQUIRE(uninterrupted.size() == 24);
  std::string state;
  {
    DataLoader loader(dataset(), opt);
    loader.set_epoch(1);
    std::size_t b = 0;
    for (const Batch& batch : loader) {
      REQUIRE(bytes_of(batch) == uninterrupted[b]);
      if (++b == 5) {
        state = loader.state();
        break;
      }
    }
  }
  for (const int workers : {0, 3}) {
    CAPTURE(workers);
    opt.num_workers = workers;
    DataLoader resumed(dataset(), opt);
    resumed.load_state(state);
    std::vector<Bytes> rest;
    for (int e = 0; e < 2; ++e) {
      for (const Batch& batch : resumed) rest.push_back(bytes_of(batch));
    }
    REQUIRE(rest.size() == 19);
    for (std::size_t b = 0; b < rest.size(); ++b) REQUIRE(rest[b] == uninterrupted[5 + b]);
  }
}

TEST_CASE("composed datasets work with every sampler", "[composition]") {
  // A split of a concatenation: id of loader index i is concat id of split.indices()[i].
  auto pieces =
      random_split(ConcatDataset(Tagged{25, 1}, Tagged{0, 2}, Tagged{35, 3}), {0.75, 0.25}, 4);
  const Subset<ConcatDataset> train = pieces[0];
  REQUIRE(train.size() == 45);
  const auto expected_id = [&train](std::size_t i) {
    const std::size_t j = train.indices()[i];
    return j < 25 ? 1000 + static_cast<std::int64_t>(j) : 3000 + static_cast<std::int64_t>(j - 25);
  };
  RandomSampler::Options random_options;
  random_options.seed = 2;
  DistributedSampler::Options distributed_options;
  distributed_options.seed = 8;
  struct Case {
    const char* name;
    std::shared_ptr<Sampler> sampler;
    std::shared_ptr<BatchSamplerBase> batch_sampler;
  };
  std::vector<Case> cases = {
      {"RandomSampler", std::make_shared<RandomSampler>(45, random_options), {}},
      {"SubsetRandomSampler",
       std::make_shared<SubsetRandomSampler>(std::vector<std::size_t>{1, 4, 9, 44}, 3),
       {}},
      {"WeightedRandomSampler",
       std::make_shared<WeightedRandomSampler>(std::vector<double>(45, 1.0), 30, true, 5),
       {}},
      {"BatchSampler",
       {},
       std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(45), 7, false)},
  };
  for (std::size_t rank = 0; rank < 3; ++rank) {
    cases.push_back({"DistributedSampler",
                     std::make_shared<DistributedSampler>(45, 3, rank, distributed_options),
                     {}});
  }
  std::multiset<std::size_t> distributed;
  for (const Case& c : cases) {
    CAPTURE(c.name);
    LoaderOptions opt;
    opt.num_workers = 2;
    opt.seed = 1;
    if (c.batch_sampler) {
      opt.batch_sampler = c.batch_sampler;
    } else {
      opt.batch_size = 6;
      opt.sampler = c.sampler;
    }
    DataLoader loader(train, opt);
    std::size_t samples = 0;
    for (const Batch& batch : loader) {
      const std::vector<std::int64_t> ids = ids_of(batch);
      for (std::size_t r = 0; r < batch.size(); ++r) {
        REQUIRE(ids[r] == expected_id(batch.indices()[r]));
        if (std::strcmp(c.name, "DistributedSampler") == 0) distributed.insert(batch.indices()[r]);
      }
      samples += batch.size();
    }
    REQUIRE(samples > 0);
  }
  // The three ranks together: every index of the split once (45 divides by 3: no padding).
  REQUIRE(distributed.size() == 45);
  REQUIRE(std::set<std::size_t>(distributed.begin(), distributed.end()).size() == 45);
}

TEST_CASE("a CachedDataset works under and over composed datasets", "[composition]") {
  const test::ProcessState baseline = test::process_state();
  {
    // Decoded samples cached, augmentation on top: the cache's counters show through.
    CachedDataset cached(ConcatDataset(test::IndexDataset{30, {}}, test::IndexDataset{10, {}}),
                         1 << 20);
    auto augmented = transform(std::move(cached), [](Sample s) {
      return s.set("flip", Tensor::scalar<std::uint8_t>(sample_rng().bernoulli(0.5) ? 1 : 0));
    });
    LoaderOptions opt = options(2);
    opt.sample_bytes = 32;  // no probe: this test counts the cache's misses
    DataLoader loader(std::move(augmented), opt);
    std::vector<std::vector<std::uint8_t>> flips;
    for (int e = 0; e < 2; ++e) {
      std::vector<std::uint8_t> epoch_flips(40);
      for (const Batch& batch : loader) {
        for (std::size_t r = 0; r < batch.size(); ++r) {
          epoch_flips[batch.indices()[r]] = batch["flip"].data<std::uint8_t>()[r];
        }
      }
      flips.push_back(epoch_flips);
    }
    REQUIRE(loader.stats().cache_misses == 40);
    REQUIRE(loader.stats().cache_hits == 40);
    REQUIRE(flips[0] != flips[1]);  // augmented afresh each epoch, from the cached samples

    // Caches under a mixture: each source cached, the counters summed.
    MixtureDataset mixture(
        {{CachedDataset(Tagged{10, 1}, 1 << 16), 1}, {CachedDataset(Tagged{10, 2}, 1 << 16), 1}},
        20, 3);
    LoaderOptions mopt = options(2);
    mopt.sample_bytes = 20;
    DataLoader mixed(std::move(mixture), mopt);
    for (int e = 0; e < 3; ++e) {
      for (const Batch& batch : mixed) REQUIRE(batch.size() > 0);
    }
    REQUIRE(mixed.stats().cache_misses == 20);
    REQUIRE(mixed.stats().cache_hits == 40);
    REQUIRE(mixed.memory_estimate().cache_bytes == 2 << 16);
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("the memory estimate measures composed samples", "[composition]") {
  // Each Tagged sample is 8 + 12 bytes; the stack has two of them and a transform adds 4.
  auto stacked = transform(StackDataset({{"x", Tagged{20, 1}}, {"y", Tagged{20, 2}}}),
                           [](Sample s) { return s.set("w", Tensor::scalar<float>(1.0f)); });
  DataLoader loader(std::move(stacked), options(2));
  REQUIRE(loader.memory_estimate().bytes_per_sample == 44);
  // The probe's get() runs like a loader's: a MixtureDataset finds its epoch there too.
  DataLoader mixed(MixtureDataset({{Tagged{5, 1}, 1}, {Tagged{5, 2}, 1}}, 10, 0), options(1));
  REQUIRE(mixed.memory_estimate().bytes_per_sample == 20);
  std::size_t samples = 0;
  for (const Batch& batch : mixed) samples += batch.size();
  REQUIRE(samples == 10);
}

namespace {

// Items [first, first + n) of a stream, this worker's shard of them, restarted each epoch.
struct ShardedRange {
  std::int64_t first = 0;
  std::int64_t n = 0;
  std::int64_t next_item = 0;
  std::optional<Sample> next() {
    const IterableShard shard = iterable_shard();
    while (next_item < n && !shard.owns(static_cast<std::size_t>(next_item))) ++next_item;
    if (next_item >= n) return std::nullopt;
    return Sample().set("id", Tensor::scalar<std::int64_t>(first + next_item++));
  }
  void start_epoch(std::uint64_t) { next_item = 0; }
};

}  // namespace

TEST_CASE("a ChainDataset streams its parts in each worker, every epoch", "[composition]") {
  for (const int workers : {0, 2}) {
    CAPTURE(workers);
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = workers;
    opt.persistent_workers = workers > 0;
    DataLoader loader(ChainDataset(ShardedRange{0, 13}, ShardedRange{100, 0}, ShardedRange{200, 9}),
                      opt);
    for (int e = 0; e < 2; ++e) {
      std::multiset<std::int64_t> ids;
      for (const Batch& batch : loader) {
        for (const std::int64_t id : ids_of(batch)) ids.insert(id);
      }
      REQUIRE(ids.size() == 22);
      REQUIRE(std::set<std::int64_t>(ids.begin(), ids.end()).size() == 22);
      REQUIRE(*ids.begin() == 0);
      REQUIRE(*ids.rbegin() == 208);
    }
  }
}

TEST_CASE("a part with other fields fails in the worker, naming the part", "[composition]") {
  struct Renamed {
    std::size_t size() const { return 4; }
    Sample get(std::size_t i) const {
      return Sample().set("ID", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
    }
  };
  LoaderOptions opt;
  opt.batch_size = 3;
  opt.num_workers = 1;
  opt.sample_bytes = 8;
  DataLoader loader(ConcatDataset(test::IndexDataset{3, {}}, Renamed{}), opt);
  std::string message;
  try {
    for (const Batch& batch : loader) REQUIRE(batch.size() > 0);
  } catch (const WorkerException& e) {
    message = e.what();
  }
  REQUIRE_THAT(message, Catch::Contains("ConcatDataset: the samples of part 1 have other fields "
                                        "than those of part 0: ID (int64) against"));
}

TEST_CASE("MnistDataset splits and loads through workers", "[composition]") {
  char name[] = "/tmp/stoker-mnist-loader-XXXXXX";
  const std::filesystem::path dir = mkdtemp(name);
  const auto write = [&dir](const char* file, std::vector<std::uint8_t> header, std::size_t n,
                            std::size_t bytes_each) {
    std::ofstream out(dir / file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()),
              static_cast<std::streamsize>(header.size()));
    for (std::size_t i = 0; i < n * bytes_each; ++i) {
      out.put(static_cast<char>(bytes_each == 1 ? i % 10 : (i / bytes_each) % 256));
    }
  };
  write("train-images-idx3-ubyte", {0, 0, 8, 3, 0, 0, 0, 50, 0, 0, 0, 4, 0, 0, 0, 4}, 50, 16);
  write("train-labels-idx1-ubyte", {0, 0, 8, 1, 0, 0, 0, 50}, 50, 1);
  auto pieces = random_split(MnistDataset(dir.string()), {0.8, 0.2}, 1);
  std::filesystem::remove_all(dir);  // mapped: the data stays readable
  REQUIRE(pieces[0].size() == 40);
  LoaderOptions opt = options(2);
  opt.batch_size = 16;
  DataLoader loader(pieces[0], opt);
  std::size_t seen = 0;
  for (const Batch& batch : loader) {
    REQUIRE(batch["image"].shape() == Shape{static_cast<std::int64_t>(batch.size()), 1, 4, 4});
    for (std::size_t r = 0; r < batch.size(); ++r) {
      const std::size_t image = pieces[0].indices()[batch.indices()[r]];
      REQUIRE(batch["label"].data<std::int64_t>()[r] == static_cast<std::int64_t>(image % 10));
      REQUIRE(batch["image"].data<float>()[r * 16 + 5] == static_cast<float>(image) / 255.0f);
    }
    seen += batch.size();
  }
  REQUIRE(seen == 40);
}
