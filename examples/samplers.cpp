// Samplers decide what an epoch visits. A WeightedRandomSampler balances classes by drawing
// rare ones more often; a user BatchSamplerBase groups sequences of similar length into one
// batch (less padding), and collate_ragged packs them as values + offsets. The loader asks
// both once per epoch, in the main process, with the epoch number.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include <stoker/stoker.hpp>

#include "cli.hpp"

namespace {

constexpr std::size_t kN = 1000;
std::int64_t label_of(std::size_t i) { return i < 900 ? 0 : i < 990 ? 1 : 2; }  // 90%, 9%, 1%
std::size_t length_of(std::size_t i) { return 1 + (i * 2654435761U) % 64; }     // 1..64 tokens

struct Sequences {
  std::size_t size() const { return kN; }
  stoker::Sample get(std::size_t i) {
    const std::vector<std::int32_t> tokens(length_of(i), static_cast<std::int32_t>(i));
    return stoker::Sample()
        .set("tokens", stoker::Tensor::from(tokens))  // int32 [length]: varies
        .set("label", stoker::Tensor::scalar(label_of(i)));
  }
};

// Sorts a shuffled order by length, cuts it into batches of 16, and shuffles the batches.
class LengthBuckets final : public stoker::BatchSamplerBase {
 public:
  std::vector<std::vector<std::size_t>> batches(std::uint64_t epoch) override {
    stoker::Generator rng = stoker::Generator::from({7, epoch});
    std::vector<std::size_t> order(kN);
    std::iota(order.begin(), order.end(), std::size_t{0});
    rng.shuffle(order.begin(), order.end());
    std::stable_sort(order.begin(), order.end(),
                     [](std::size_t a, std::size_t b) { return length_of(a) < length_of(b); });
    std::vector<std::vector<std::size_t>> out((kN + 15) / 16);
    for (std::size_t k = 0; k < kN; ++k) out[k / 16].push_back(order[k]);
    rng.shuffle(out.begin(), out.end());
    return out;
  }
};

struct Summary {
  std::size_t labels[3] = {0, 0, 0};
  double padding = 0;  // the share of padding if each batch were padded to its longest row
};

// One epoch with two workers and collate_ragged; prints the first rows of its first batch.
Summary run(const char* name, stoker::LoaderOptions opt) {
  opt.num_workers = 2;
  opt.collate = stoker::collate_ragged({"tokens"});  // "tokens" (values) and "tokens.offsets"
  stoker::DataLoader loader(Sequences{}, opt);
  Summary out;
  std::size_t tokens = 0;
  std::size_t padded = 0;
  for (const stoker::Batch& batch : loader) {
    const std::int64_t* off = batch["tokens.offsets"].data<std::int64_t>();  // [B + 1]
    const std::int64_t* label = batch["label"].data<std::int64_t>();
    std::int64_t longest = 0;
    for (std::size_t r = 0; r < batch.size(); ++r) {  // row r is tokens[off[r] .. off[r + 1])
      ++out.labels[label[r]];
      longest = std::max(longest, off[r + 1] - off[r]);
    }
    tokens += static_cast<std::size_t>(off[batch.size()]);
    padded += batch.size() * static_cast<std::size_t>(longest);
    if (batch.index() > 0) continue;
    std::printf("%-8s %zu batches of %zu; batch 0 starts (label:length)", name, loader.size(),
                batch.size());
    for (std::size_t r = 0; r < 10; ++r) {
      std::printf(" %lld:%lld", static_cast<long long>(label[r]),
                  static_cast<long long>(off[r + 1] - off[r]));
    }
    std::printf("\n");
  }
  out.padding = 1.0 - static_cast<double>(tokens) / static_cast<double>(padded);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: samplers\n  a WeightedRandomSampler and a length-bucketing batch "
                   "sampler with collate_ragged.\n  It takes no arguments.");
  cli.done();
  constexpr double kClassSize[3] = {900, 90, 10};
  std::vector<double> weights(kN);  // 1 / class size: each class gets a third of the draws
  for (std::size_t i = 0; i < kN; ++i) weights[i] = 1.0 / kClassSize[label_of(i)];
  stoker::LoaderOptions weighted;
  weighted.batch_size = 100;
  weighted.sampler = std::make_shared<stoker::WeightedRandomSampler>(weights, 3000, true, 5);
  const Summary balanced = run("weighted", weighted);
  stoker::LoaderOptions shuffled;
  shuffled.batch_size = 16;
  shuffled.shuffle = true;
  stoker::LoaderOptions bucketed;  // batch_size, shuffle and drop_last stay at their defaults
  bucketed.batch_sampler = std::make_shared<LengthBuckets>();
  const double random = run("shuffled", shuffled).padding;
  const double by_length = run("bucketed", bucketed).padding;
  std::printf(
      "labels 0/1/2 (90%%/9%%/1%% of the dataset): %zu/%zu/%zu of 3000 weighted draws\n"
      "padding to the longest row would waste %.1f%% (shuffled), %.1f%% (bucketed)\n",
      balanced.labels[0], balanced.labels[1], balanced.labels[2], 100 * random, 100 * by_length);
  const bool ok = std::all_of(balanced.labels, balanced.labels + 3,
                              [](std::size_t c) { return c > 850 && c < 1150; });
  return ok && by_length < random / 4 ? 0 : 1;
}
