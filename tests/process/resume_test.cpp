// Mid-epoch resume: state() after k batches, load_state() into a fresh loader with another
// num_workers, and the rest of the epoch (and the next one) are bit-identical to an
// uninterrupted run, random augmentation included.
#include <set>

#include <catch2/catch.hpp>

#include "support/datasets.hpp"

using namespace stoker;

namespace {

// Sample i: its index, and 6 floats of sample_rng() "augmentation".
struct Augmented {
  std::size_t size() const { return 53; }
  Sample get(std::size_t i) const {
    Generator& rng = sample_rng();
    Tensor noise = Tensor::empty(DType::kFloat32, {6});
    for (std::size_t k = 0; k < 6; ++k) noise.data<float>()[k] = static_cast<float>(rng.normal());
    Sample s;
    s.set("index", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
    s.set("noise", std::move(noise));
    return s;
  }
};

using Bytes = std::vector<std::byte>;

Bytes bytes_of(const Batch& batch) {
  Bytes out;
  for (const auto& [name, t] : batch) out.insert(out.end(), t.bytes().begin(), t.bytes().end());
  return out;
}

LoaderOptions options(int workers) {
  LoaderOptions opt;
  opt.batch_size = 5;  // 53 samples: 10 full batches and one of 3
  opt.num_workers = workers;
  opt.shuffle = true;
  opt.seed = 7;
  return opt;
}

// Every batch of epochs 1 and 2, uninterrupted.
std::vector<Bytes> reference() {
  DataLoader loader(Augmented{}, options(2));
  loader.set_epoch(1);
  std::vector<Bytes> out;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const Batch& batch : loader) out.push_back(bytes_of(batch));
  }
  return out;
}

}  // namespace

TEST_CASE("resuming mid-epoch gives the same batches with any num_workers", "[resume]") {
  const std::vector<Bytes> expected = reference();
  REQUIRE(expected.size() == 22);
  const std::size_t k = GENERATE(0u, 1u, 4u, 10u, 11u);
  const int resumed_workers = GENERATE(3, 0);
  CAPTURE(k, resumed_workers);
  std::string state;
  {
    // The way a training loop checkpoints: inside the loop, once batch k - 1 is processed.
    DataLoader loader(Augmented{}, options(2));
    loader.set_epoch(1);
    if (k == 0) state = loader.state();
    std::size_t b = 0;
    for (const Batch& batch : loader) {
      if (k == 0) break;
      REQUIRE(bytes_of(batch) == expected[b]);
      if (++b == k) {
        state = loader.state();
        break;
      }
    }
  }
  INFO(state);
  REQUIRE(state.size() < 300);  // a few hundred bytes at most
  DataLoader resumed(Augmented{}, options(resumed_workers));
  resumed.load_state(state);
  std::vector<Bytes> rest;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const Batch& batch : resumed) rest.push_back(bytes_of(batch));
  }
  REQUIRE(rest.size() == 22 - k);
  for (std::size_t b = 0; b < rest.size(); ++b) REQUIRE(rest[b] == expected[k + b]);
}

TEST_CASE("resuming an out-of-order epoch delivers each remaining batch once", "[resume]") {
  LoaderOptions opt = options(3);
  opt.in_order = false;
  std::set<std::int64_t> first;
  std::string state;
  {
    DataLoader loader(Augmented{}, opt);
    int b = 0;
    for (const Batch& batch : loader) {
      for (const std::int64_t v : test::batch_indices(batch)) first.insert(v);
      if (++b == 6) {
        state = loader.state();
        break;
      }
    }
  }
  DataLoader resumed(Augmented{}, opt);
  resumed.load_state(state);
  std::set<std::int64_t> rest;
  for (const Batch& batch : resumed) {
    for (const std::int64_t v : test::batch_indices(batch)) {
      REQUIRE(first.count(v) == 0);
      REQUIRE(rest.insert(v).second);
    }
  }
  REQUIRE(first.size() + rest.size() == 53);
}

TEST_CASE("bad or mismatched states are clear errors", "[resume]") {
  DataLoader loader(Augmented{}, options(2));
  const std::string state = loader.state();  // between epochs: epoch 0, position 0
  REQUIRE_THAT(state, Catch::Contains("epoch 0") && Catch::Contains("position 0"));
  REQUIRE_THROWS_WITH(loader.load_state("nonsense"), Catch::Contains("not a state saved by"));
  LoaderOptions other_seed = options(2);
  other_seed.seed = 8;
  DataLoader different(Augmented{}, other_seed);
  REQUIRE_THROWS_WITH(different.load_state(state),
                      Catch::Contains("saved by a loader with seed 7, this one has seed 8"));
  LoaderOptions other_batch = options(2);
  other_batch.batch_size = 4;
  DataLoader smaller(Augmented{}, other_batch);
  smaller.load_state(state);
  REQUIRE_THROWS_WITH(smaller.begin(), Catch::Contains("53 samples in 11 batches") &&
                                           Catch::Contains("53 samples in 14 batches"));
}
