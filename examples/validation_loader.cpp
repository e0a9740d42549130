// A training loader and a validation loader side by side, with an evaluation after every
// training epoch. They are configured differently on purpose:
//
//   training:   batch_size 32, shuffle, 2 workers; persistent, so its workers start loading the
//               next epoch's first batches while validation runs.
//   validation: batch_size 16, smaller than training's: the metrics are sums over samples,
//               so the batch size does not change them, and small batches keep the validation
//               loader's ring (its slots are sized by the batch) small beside the training
//               loader's; no shuffle (the same order every time, so results compare across
//               epochs), 1 worker (it reads a small set once per epoch), persistent because it
//               runs every epoch and forking its worker again each time would be wasted work.
//
// And the pitfall of evaluation code: a Batch is a view into one of the loader's shared-memory
// slots, and the slot is reused only when the Batch is destroyed. Aggregate as you go (sums,
// counts), or keep batch.clone(); a vector of views holds every slot the loader has, and the
// next fetch fails. The end of the program shows that error, and the fix.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <stoker/stoker.hpp>

#include "cli.hpp"

namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

float unit(std::uint64_t key) {  // in [-1, 1), a function of key only
  return static_cast<float>(mix(key) >> 40) / static_cast<float>(1 << 23) - 1.0f;
}

// Two classes of 2-d points: label 1 when 2x - y + noise > 0. `offset` keeps the validation
// split's samples apart from the training split's.
struct Points {
  std::size_t n = 0;
  std::uint64_t offset = 0;
  std::size_t size() const { return n; }
  stoker::Sample get(std::size_t i) {
    const std::uint64_t key = (offset + i) * 4;
    const float x = unit(key);
    const float y = unit(key + 1);
    const float noise = 0.3f * unit(key + 2);
    stoker::Sample s;
    s.set("point", stoker::Tensor::from<float>({x, y}));
    s.set("label", stoker::Tensor::scalar<std::int64_t>(2 * x - y + noise > 0 ? 1 : 0));
    return s;
  }
};

// Logistic regression.
struct Model {
  float w0 = 0, w1 = 0, b = 0;

  float probability(const float* p) const {
    return 1.0f / (1.0f + std::exp(-(w0 * p[0] + w1 * p[1] + b)));
  }

  void train_step(const stoker::Batch& batch, float lr) {
    const float* points = batch["point"].data<float>();
    const std::int64_t* labels = batch["label"].data<std::int64_t>();
    float g0 = 0, g1 = 0, gb = 0;
    for (std::size_t r = 0; r < batch.size(); ++r) {
      const float err = probability(points + 2 * r) - static_cast<float>(labels[r]);
      g0 += err * points[2 * r];
      g1 += err * points[2 * r + 1];
      gb += err;
    }
    const float scale = lr / static_cast<float>(batch.size());
    w0 -= scale * g0;
    w1 -= scale * g1;
    b -= scale * gb;
  }
};

// What evaluation keeps: numbers, not batches.
struct Metrics {
  double loss = 0;
  std::size_t correct = 0;
  std::size_t samples = 0;
  std::size_t batches = 0;

  void add(const Model& model, const stoker::Batch& batch) {
    const float* points = batch["point"].data<float>();
    const std::int64_t* labels = batch["label"].data<std::int64_t>();
    for (std::size_t r = 0; r < batch.size(); ++r) {
      const double p = model.probability(points + 2 * r);
      const bool positive = labels[r] == 1;
      loss -= std::log(positive ? p + 1e-12 : 1 - p + 1e-12);
      correct += (p > 0.5) == positive ? 1 : 0;
    }
    samples += batch.size();
    ++batches;
  }
};

Metrics evaluate(const Model& model, stoker::DataLoader<Points>& val_loader) {
  Metrics m;
  // Each begin() starts an epoch of the validation loader; without shuffle every one visits
  // the samples in the same order, so the figures are comparable from one epoch to the next.
  for (const stoker::Batch& batch : val_loader) m.add(model, batch);
  return m;
}

// The pitfall and its fix, on a loader of 1 worker x prefetch_factor 2 = 2 slots. Returns
// whether both behaved as described.
bool held_batches(const Points& val_set) {
  stoker::LoaderOptions opt;
  // 63 batches: more than the deepest prefetch (kMaxAdaptivePrefetch = 32 slots a worker for
  // batches as small as these)
  opt.batch_size = 16;
  opt.num_workers = 1;
  stoker::DataLoader loader(val_set, opt);

  // Wrong: each element keeps its slot. The adaptive prefetch depth grows to make room for the
  // batches the program keeps, up to its limit; then the next batch has no slot.
  std::vector<stoker::Batch> views;
  bool failed = false;
  try {
    for (const stoker::Batch& batch : loader) views.push_back(batch);
  } catch (const stoker::Error& e) {
    std::printf("keeping views: error after %zu batches:\n  %s\n", views.size(), e.what());
    failed = true;
  }
  views.clear();

  std::vector<stoker::Batch> clones;  // right: owning copies hold no slot
  for (const stoker::Batch& batch : loader) clones.push_back(batch.clone());
  std::size_t samples = 0;
  bool any_view = false;
  for (const stoker::Batch& c : clones) {
    samples += c.size();
    any_view = any_view || c.is_view();
  }
  std::printf("keeping clone()s: %zu batches, %zu samples, views among them: %s\n", clones.size(),
              samples, any_view ? "yes" : "none");
  return failed && !any_view && samples == val_set.size();
}

}  // namespace

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: validation_loader\n  a training and a validation loader side by side, "
                   "and the pitfall of\n  keeping batches.\n  It takes no arguments.");
  cli.done();
  const Points train_set{4096, 0};
  const Points val_set{1000, 1u << 20};

  stoker::LoaderOptions train_opt;
  train_opt.batch_size = 32;
  train_opt.shuffle = true;
  train_opt.seed = 11;
  train_opt.num_workers = 2;
  train_opt.persistent_workers = true;

  stoker::LoaderOptions val_opt;
  val_opt.batch_size = 16;
  val_opt.shuffle = false;
  val_opt.num_workers = 1;
  val_opt.persistent_workers = true;

  try {
    stoker::DataLoader train_loader(train_set, train_opt);
    stoker::DataLoader val_loader(val_set, val_opt);
    std::printf(
        "train: %zu samples in %zu batches of %zu; validation: %zu samples in %zu "
        "batches of %zu (the last one short)\n",
        train_set.size(), train_loader.size(), train_opt.batch_size, val_set.size(),
        val_loader.size(), val_opt.batch_size);

    Model model;
    for (std::uint64_t epoch = 0; epoch < 4; ++epoch) {
      train_loader.set_epoch(epoch);
      for (const stoker::Batch& batch : train_loader) model.train_step(batch, 1.0f);
      const Metrics m = evaluate(model, val_loader);
      std::printf("epoch %llu: validation loss %.4f, accuracy %.1f%% (%zu samples, %zu batches)\n",
                  static_cast<unsigned long long>(epoch), m.loss / static_cast<double>(m.samples),
                  100.0 * static_cast<double>(m.correct) / static_cast<double>(m.samples),
                  m.samples, m.batches);
    }
    if (!held_batches(val_set)) {
      std::fprintf(stderr, "validation_loader: held batches did not behave as described\n");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "validation_loader: %s\n", e.what());
    return 1;
  }
  return 0;
}
