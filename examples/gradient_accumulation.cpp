// Gradient accumulation: the loader delivers micro-batches of 8 samples, and the optimizer
// steps once per 8 of them, so each step sees an effective batch of 64. The loader's batch and
// the optimizer's batch are two different numbers, chosen for different reasons:
//
// - The loader's batch_size sets its memory. Peak memory grows with batch_size: every worker
//   owns prefetch_factor slots of one batch each, and the consumer holds one more (docs/memory.md
//   has the formula and the breakdown). A small loader batch keeps that peak, and the activations
//   of the model on the device, small.
// - The effective batch (loader batch x micro-batches per step) is what the optimizer's
//   hyperparameters, such as the learning rate, are tuned for.
//
// The model is linear regression in plain C++ on synthetic data. The dataset's size is not a
// multiple of 64 (nor of 8), so each epoch ends with a short micro-batch and a partial
// accumulation window: the gradient is summed over samples and divided by the samples the window
// actually saw, so that last step is an ordinary step over fewer samples, not an overweighted one.
#include <array>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <stoker/stoker.hpp>

#include "cli.hpp"

namespace {

constexpr std::size_t kFeatures = 4;
constexpr std::array<float, kFeatures> kTrueWeights = {1.5f, -2.0f, 0.5f, 3.0f};
constexpr float kTrueBias = 0.25f;

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A value in [-1, 1) that depends only on (i, k).
float unit(std::size_t i, std::size_t k) {
  const std::uint64_t bits = mix(i * 16 + k) >> 40;  // 24 bits
  return static_cast<float>(bits) / static_cast<float>(1 << 23) - 1.0f;
}

// Sample i: features x (float32 [4]) and target y = w.x + b + noise (float32 []).
struct Regression {
  std::size_t n = 1004;  // 125 micro-batches of 8 and one of 4
  std::size_t size() const { return n; }
  stoker::Sample get(std::size_t i) {
    std::vector<float> x(kFeatures);
    float y = kTrueBias + 0.05f * unit(i, kFeatures);
    for (std::size_t k = 0; k < kFeatures; ++k) {
      x[k] = unit(i, k);
      y += kTrueWeights[k] * x[k];
    }
    stoker::Sample s;
    s.set("x", stoker::Tensor::from<float>(x));
    s.set("y", stoker::Tensor::scalar<float>(y));
    return s;
  }
};

struct Linear {
  std::array<float, kFeatures> w{};
  float b = 0;
};

// The accumulated gradient of the squared error, summed over the samples seen since the last
// optimizer step, and how many there were.
struct Accumulator {
  std::array<double, kFeatures> grad_w{};
  double grad_b = 0;
  std::size_t samples = 0;
  std::size_t micro_batches = 0;

  // Adds one micro-batch; returns its summed squared error (before any update of this window).
  double add(const Linear& model, const stoker::Batch& batch) {
    const float* x = batch["x"].data<float>();  // [B, 4]
    const float* y = batch["y"].data<float>();  // [B]
    double loss = 0;
    for (std::size_t r = 0; r < batch.size(); ++r) {
      float pred = model.b;
      for (std::size_t k = 0; k < kFeatures; ++k) pred += model.w[k] * x[r * kFeatures + k];
      const double err = static_cast<double>(pred) - static_cast<double>(y[r]);
      loss += err * err;
      for (std::size_t k = 0; k < kFeatures; ++k) grad_w[k] += 2 * err * x[r * kFeatures + k];
      grad_b += 2 * err;
    }
    samples += batch.size();
    ++micro_batches;
    return loss;
  }

  // One SGD step on the mean gradient of the window, then a fresh window. Dividing by the
  // samples actually seen (not by micro_batches_per_step x batch_size) keeps a short last
  // micro-batch or a partial last window from counting more than its samples.
  void step(Linear& model, double lr) {
    const double scale = lr / static_cast<double>(samples);
    for (std::size_t k = 0; k < kFeatures; ++k) {
      model.w[k] -= static_cast<float>(scale * grad_w[k]);
    }
    model.b -= static_cast<float>(scale * grad_b);
    *this = Accumulator{};
  }
};

}  // namespace

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: gradient_accumulation\n  micro-batches of 8 samples and an optimizer "
                   "step every 8 of them.\n  It takes no arguments.");
  cli.done();
  constexpr std::size_t kMicroBatchesPerStep = 8;
  constexpr double kLearningRate = 0.2;
  constexpr int kEpochs = 6;

  stoker::LoaderOptions opt;
  opt.batch_size = 8;  // the loader's batch: what memory is sized for
  opt.num_workers = 2;
  opt.shuffle = true;
  opt.seed = 3;
  opt.persistent_workers = true;
  try {
    stoker::DataLoader loader(Regression{}, opt);
    std::printf(
        "loader batch_size=%zu, %zu micro-batches per optimizer step: effective batch %zu "
        "samples\n%zu samples = %zu micro-batches per epoch\n",
        opt.batch_size, kMicroBatchesPerStep, opt.batch_size * kMicroBatchesPerStep,
        loader.dataset().size(), loader.size());

    Linear model;
    double first_loss = 0;
    double last_loss = 0;
    for (int epoch = 0; epoch < kEpochs; ++epoch) {
      loader.set_epoch(static_cast<std::uint64_t>(epoch));
      Accumulator acc;
      double loss = 0;
      std::size_t seen = 0;
      std::vector<std::size_t> step_sizes;  // the effective batch of each optimizer step
      for (const stoker::Batch& batch : loader) {
        loss += acc.add(model, batch);
        seen += batch.size();
        if (acc.micro_batches == kMicroBatchesPerStep) {
          step_sizes.push_back(acc.samples);
          acc.step(model, kLearningRate);
        }
      }
      if (acc.micro_batches > 0) {  // the partial last window: step on what it has
        step_sizes.push_back(acc.samples);
        acc.step(model, kLearningRate);
      }
      const double mse = loss / static_cast<double>(seen);
      if (epoch == 0) first_loss = mse;
      last_loss = mse;
      std::printf("epoch %d: %zu optimizer steps, effective batch %zu (last step %zu), mse %.5f\n",
                  epoch, step_sizes.size(), step_sizes.front(), step_sizes.back(), mse);
    }
    std::printf("learned w = [%.3f, %.3f, %.3f, %.3f], b = %.3f (true: [1.5, -2, 0.5, 3], 0.25)\n",
                static_cast<double>(model.w[0]), static_cast<double>(model.w[1]),
                static_cast<double>(model.w[2]), static_cast<double>(model.w[3]),
                static_cast<double>(model.b));
    if (!(last_loss < first_loss / 10)) {
      std::fprintf(stderr, "gradient_accumulation: the loss did not fall (%.5f -> %.5f)\n",
                   first_loss, last_loss);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gradient_accumulation: %s\n", e.what());
    return 1;
  }
  return 0;
}
