// Mid-epoch resume: state() after k batches, load_state() into a fresh loader with another
// num_workers, and the rest of the epoch (and the next one) are bit-identical to an
// uninterrupted run, random augmentation included: with the loader's own shuffle, out of order,
// with a DistributedSampler or a user sampler, and skipping failing samples. An iterable
// dataset's loader refuses to save or load a state.
#include <cstring>
#include <set>
#include <typeinfo>

#include <catch2/catch.hpp>

#include "support/clean_state.hpp"
#include "support/datasets.hpp"

using namespace stoker;

namespace {

constexpr std::size_t kSize = 53;

// Sample i: its index and 6 floats of sample_rng() "augmentation". With `fail_every` > 0,
// get(i) throws for every index i with i % fail_every == 2.
struct Augmented {
  std::size_t fail_every = 0;
  std::size_t size() const { return kSize; }
  Sample get(std::size_t i) const {
    if (fail_every > 0 && i % fail_every == 2) {
      throw std::runtime_error("corrupt sample " + std::to_string(i));
    }
    Generator& rng = sample_rng();
    Tensor noise = Tensor::empty(DType::kFloat32, {6});
    for (std::size_t k = 0; k < 6; ++k) noise.data<float>()[k] = static_cast<float>(rng.normal());
    Sample s;
    s.set("index", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
    s.set("noise", std::move(noise));
    return s;
  }
};

// A user sampler: each epoch a different stride through the dataset, with repeats (every
// fifth position visits its index twice), depending only on the epoch.
class StrideSampler final : public Sampler {
 public:
  std::vector<std::size_t> indices(std::uint64_t epoch) override {
    std::vector<std::size_t> out;
    const std::size_t stride = epoch % 2 == 0 ? 7 : 11;  // both coprime with 53
    for (std::size_t p = 0; p < kSize; ++p) {
      const std::size_t i = (p * stride + epoch * 3) % kSize;
      out.push_back(i);
      if (p % 5 == 0) out.push_back(i);
    }
    return out;
  }
};

using Bytes = std::vector<std::byte>;

Bytes bytes_of(const Batch& batch) {
  Bytes out;
  for (const auto& [name, t] : batch) out.insert(out.end(), t.bytes().begin(), t.bytes().end());
  return out;
}

// The "index" field at the front of bytes_of(batch): 8 of each sample's 32 bytes.
std::vector<std::size_t> indices_of(const Bytes& bytes) {
  std::vector<std::size_t> out(bytes.size() / 32);
  for (std::size_t r = 0; r < out.size(); ++r) {
    std::int64_t v = 0;
    std::memcpy(&v, bytes.data() + r * sizeof v, sizeof v);
    out[r] = static_cast<std::size_t>(v);
  }
  return out;
}

enum class Order { kDistributed, kUser };

// A fresh sampler each time, as a resumed program builds one: only its parameters carry over.
LoaderOptions sampler_options(Order order, int workers) {
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = workers;
  opt.seed = 7;
  if (order == Order::kDistributed) {
    DistributedSampler::Options d;
    d.shuffle = true;
    d.seed = 19;
    opt.sampler = std::make_shared<DistributedSampler>(kSize, 3, 1, d);
  } else {
    opt.sampler = std::make_shared<StrideSampler>();
  }
  return opt;
}

// Every batch of epochs 1 and 2, uninterrupted.
template <class D>
std::vector<Bytes> run_two_epochs(D dataset, const LoaderOptions& opt) {
  DataLoader loader(std::move(dataset), opt);
  loader.set_epoch(1);
  std::vector<Bytes> out;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const Batch& batch : loader) out.push_back(bytes_of(batch));
  }
  return out;
}

// The state a training loop saves inside its loop once batch k - 1 of epoch 1 is processed
// (k == 0: before the epoch starts). Checks the batches it sees against `expected`.
template <class D>
std::string state_after(D dataset, const LoaderOptions& opt, std::size_t k,
                        const std::vector<Bytes>& expected) {
  DataLoader loader(std::move(dataset), opt);
  loader.set_epoch(1);
  if (k == 0) return loader.state();
  std::size_t b = 0;
  for (const Batch& batch : loader) {
    REQUIRE(bytes_of(batch) == expected[b]);
    if (++b == k) return loader.state();
  }
  FAIL("the epoch had fewer than " << k << " batches");
  return {};
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
std::vector<Bytes> reference() { return run_two_epochs(Augmented{}, options(2)); }

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

TEST_CASE("resuming an epoch ordered by a DistributedSampler or a user sampler is bit-identical",
          "[resume]") {
  const Order order = GENERATE(Order::kDistributed, Order::kUser);
  // Rank 1 of 3 gets 18 of the 53 indices: 5 batches of 4, 4, 4, 4, 2. The user sampler gives
  // 53 + 11 repeats = 64 indices: 16 batches.
  const std::size_t per_epoch = order == Order::kDistributed ? 5 : 16;
  const std::vector<Bytes> expected = run_two_epochs(Augmented{}, sampler_options(order, 2));
  REQUIRE(expected.size() == 2 * per_epoch);
  // The order is the sampler's, asked for the loader's epoch.
  for (const std::uint64_t epoch : {std::uint64_t{1}, std::uint64_t{2}}) {
    std::vector<std::size_t> seen;
    for (std::size_t b = (epoch - 1) * per_epoch; b < epoch * per_epoch; ++b) {
      const std::vector<std::size_t> batch = indices_of(expected[b]);
      seen.insert(seen.end(), batch.begin(), batch.end());
    }
    REQUIRE(seen == sampler_options(order, 0).sampler->indices(epoch));
  }
  // At the start, in the middle, before the last batch and after it.
  const std::size_t k =
      GENERATE_COPY(values<std::size_t>({0, per_epoch / 2, per_epoch - 1, per_epoch}));
  const int resumed_workers = GENERATE(3, 0);
  CAPTURE(order == Order::kDistributed ? "DistributedSampler" : "user sampler", k, resumed_workers);

  const test::ProcessState baseline = test::process_state();
  const std::string state = state_after(Augmented{}, sampler_options(order, 2), k, expected);
  INFO(state);
  {
    DataLoader resumed(Augmented{}, sampler_options(order, resumed_workers));
    resumed.load_state(state);
    std::vector<Bytes> rest;
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (const Batch& batch : resumed) rest.push_back(bytes_of(batch));
    }
    REQUIRE(rest.size() == expected.size() - k);
    for (std::size_t b = 0; b < rest.size(); ++b) {
      CAPTURE(b);
      REQUIRE(rest[b] == expected[k + b]);
    }
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

namespace {

LoaderOptions skip_options(int workers) {
  LoaderOptions opt;
  opt.batch_size = 5;
  opt.num_workers = workers;
  opt.shuffle = true;
  opt.seed = 7;
  opt.on_sample_error = OnSampleError::kSkip;
  return opt;
}

// The samples of every delivered batch of epochs 1 and 2, and each epoch's skipped count.
struct SkipRun {
  std::vector<Bytes> batches;
  std::vector<std::vector<std::int64_t>> indices;
  std::vector<std::uint64_t> skipped;  // per epoch, from stats() at its end
};

SkipRun run_skipping(DataLoader<Augmented>& loader) {
  SkipRun run;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const Batch& batch : loader) {
      run.batches.push_back(bytes_of(batch));
      run.indices.push_back(test::batch_indices(batch));
    }
    run.skipped.push_back(loader.stats().skipped_samples);
  }
  return run;
}

}  // namespace

TEST_CASE("resuming an epoch that skips failing samples delivers exactly the remaining ones",
          "[resume]") {
  const Augmented failing{5};  // indices 2, 7, 12, ... throw: 11 of the 53
  DataLoader<Augmented> reference_loader(failing, skip_options(2));
  reference_loader.set_epoch(1);
  const SkipRun expected = run_skipping(reference_loader);
  std::size_t delivered = 0;
  for (const auto& idx : expected.indices) {
    for (const std::int64_t i : idx) REQUIRE(i % 5 != 2);
    delivered += idx.size();
  }
  REQUIRE(delivered == 2 * (kSize - 11));
  REQUIRE(expected.skipped == std::vector<std::uint64_t>{11, 11});
  const std::size_t per_epoch = expected.batches.size() / 2;  // batches with a kept sample

  const std::size_t k = GENERATE_COPY(values<std::size_t>({0, 3, per_epoch - 1, per_epoch}));
  const int resumed_workers = GENERATE(3, 0);
  CAPTURE(k, resumed_workers, per_epoch);

  const std::string state = state_after(failing, skip_options(2), k, expected.batches);
  INFO(state);
  DataLoader<Augmented> resumed(failing, skip_options(resumed_workers));
  resumed.load_state(state);
  const SkipRun rest = run_skipping(resumed);
  REQUIRE(rest.batches.size() == expected.batches.size() - k);
  for (std::size_t b = 0; b < rest.batches.size(); ++b) {
    CAPTURE(b, expected.indices[k + b], rest.indices[b]);
    REQUIRE(rest.batches[b] == expected.batches[k + b]);
  }
  REQUIRE(rest.skipped[1] == 11);  // the next epoch, untouched by the resume
}

// The state records the skipped count ("skipped N"); the resumed epoch goes on counting from
// it (begin_epoch() once zeroed it after load_state() had set it), so stats().skipped_samples
// and max_skipped_samples see the same count as in an uninterrupted epoch.
TEST_CASE("a resumed epoch keeps counting the samples skipped before the save", "[resume]") {
  const Augmented failing{5};
  std::string state;
  {
    DataLoader<Augmented> loader(failing, skip_options(2));
    std::size_t b = 0;
    for (const Batch& batch : loader) {
      (void)batch;
      if (++b == 6) {
        state = loader.state();
        break;
      }
    }
  }
  INFO(state);
  REQUIRE(state.find("skipped 0\n") == std::string::npos);  // some were skipped before
  DataLoader<Augmented> resumed(failing, skip_options(0));
  resumed.load_state(state);
  for (const Batch& batch : resumed) (void)batch;
  REQUIRE(resumed.stats().skipped_samples == 11);
}

namespace {

// A stream of n items, sharded over the workers.
struct Stream {
  std::size_t n = 40;
  std::size_t position = 0;
  void start_epoch(std::uint64_t) { position = 0; }
  std::optional<Sample> next() {
    const IterableShard shard = iterable_shard();
    while (position < n && !shard.owns(position)) ++position;
    if (position >= n) return std::nullopt;
    Sample s;
    s.set("value", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(position++)));
    return s;
  }
};

// The documented error: std::logic_error itself (not a subclass such as invalid_argument),
// saying why and what to save instead.
void require_iterable_state_error(const DataLoader<Stream>& loader) {
  try {
    (void)loader.state();
    FAIL("state() of an iterable dataset's loader did not throw");
  } catch (const std::logic_error& e) {
    CHECK(typeid(e) == typeid(std::logic_error));
    REQUIRE_THAT(e.what(), Catch::StartsWith("DataLoader::state: an iterable dataset's position "
                                             "is inside its workers' streams") &&
                               Catch::Contains("save your stream's own position"));
  }
}

}  // namespace

TEST_CASE("state() of an iterable dataset's loader is a logic_error saying what to save",
          "[resume][iterable]") {
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  DataLoader loader(Stream{}, opt);
  require_iterable_state_error(loader);  // before any epoch
  std::size_t batches = 0;
  for (const Batch& batch : loader) {
    (void)batch;
    if (++batches == 3) require_iterable_state_error(loader);  // mid-epoch
  }
  REQUIRE(batches == 10);
  require_iterable_state_error(loader);  // between epochs
  // Nor can one be loaded: a map-style loader's state is refused at once, not at begin().
  DataLoader<test::IndexDataset> map_style(test::IndexDataset{40, {}}, opt);
  const std::string state = map_style.state();
  REQUIRE_THROWS_MATCHES(loader.load_state(state), std::logic_error,
                         Catch::Message("DataLoader::load_state: an iterable dataset's loader has "
                                        "no state to load (its position is inside its workers' "
                                        "streams); restore your stream's own position instead"));
}
