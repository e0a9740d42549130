// A training-style loop on built-in synthetic data: 32x32 RGB images of 10 classes, each class
// a noisy version of its own template, and a softmax classifier trained with SGD on 8x8-pooled
// pixels. It prints the loader's settings and, per epoch, throughput, how long the loop waited
// for data, loss and accuracy. This is what scripts/demo.sh runs.
//
//   train_loop [--workers N] [--batch B] [--epochs E] [--samples N] [--persistent]
//              [--work-us U]   (simulated per-sample augmentation cost, in microseconds)
#include <time.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <stoker/stoker.hpp>

#include "cli.hpp"

namespace {

constexpr int kClasses = 10;
constexpr int kSide = 32;
constexpr int kPooled = 8;  // features: 3 x 8 x 8 averages of 4 x 4 pixel blocks
constexpr int kFeatures = 3 * kPooled * kPooled;

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Sample i: a uint8 image [3, 32, 32], half its class's template and half noise, and its label.
struct SyntheticImages {
  std::size_t n = 20000;
  long work_ns = 0;

  std::size_t size() const { return n; }

  stoker::Sample get(std::size_t i) const {
    const auto label = static_cast<std::int64_t>(mix(i) % kClasses);
    stoker::Tensor image = stoker::Tensor::empty(stoker::DType::kUInt8, {3, kSide, kSide});
    std::uint8_t* px = image.data<std::uint8_t>();
    std::uint64_t noise = mix(i ^ 0xabcdef);
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < kSide; ++y) {
        for (int x = 0; x < kSide; ++x) {
          const std::uint64_t cell =
              mix(static_cast<std::uint64_t>(label * 1000 + c * 100 + (y / 4) * 8 + x / 4));
          noise = mix(noise);
          px[(c * kSide + y) * kSide + x] =
              static_cast<std::uint8_t>((cell % 256) / 2 + (noise % 256) / 2);
        }
      }
    }
    if (work_ns > 0) spin(work_ns);
    stoker::Sample s;
    s.set("image", std::move(image));
    s.set("label", stoker::Tensor::scalar<std::int64_t>(label));
    return s;
  }

  static void spin(long ns) {
    timespec start;
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
      clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < ns);
  }
};

// Softmax regression on pooled pixels: the "model" of the loop.
struct Model {
  std::vector<float> w = std::vector<float>(kClasses * kFeatures, 0.0f);
  std::array<float, kClasses> b{};

  // One SGD step on the batch; returns (summed loss, correct predictions).
  std::pair<double, std::size_t> step(const stoker::Batch& batch, float lr) {
    const std::uint8_t* images = batch["image"].data<std::uint8_t>();
    const std::int64_t* labels = batch["label"].data<std::int64_t>();
    const std::size_t rows = batch.size();
    std::vector<float> gw(w.size(), 0.0f);
    std::array<float, kClasses> gb{};
    double loss = 0;
    std::size_t correct = 0;
    std::array<float, kFeatures> f{};
    for (std::size_t r = 0; r < rows; ++r) {
      pool(images + r * 3 * kSide * kSide, f);
      std::array<float, kClasses> z{};
      float top = -1e30f;
      int argmax = 0;
      for (int k = 0; k < kClasses; ++k) {
        float acc = b[static_cast<std::size_t>(k)];
        for (int j = 0; j < kFeatures; ++j) {
          acc += w[static_cast<std::size_t>(k * kFeatures + j)] * f[static_cast<std::size_t>(j)];
        }
        z[static_cast<std::size_t>(k)] = acc;
        if (acc > top) {
          top = acc;
          argmax = k;
        }
      }
      float sum = 0;
      for (float& v : z) sum += (v = std::exp(v - top));
      const auto y = static_cast<std::size_t>(labels[r]);
      loss -= std::log(z[y] / sum + 1e-12f);
      correct += static_cast<std::size_t>(argmax) == y ? 1 : 0;
      for (std::size_t k = 0; k < kClasses; ++k) {
        const float g = z[k] / sum - (k == y ? 1.0f : 0.0f);
        gb[k] += g;
        for (std::size_t j = 0; j < kFeatures; ++j) gw[k * kFeatures + j] += g * f[j];
      }
    }
    const float scale = lr / static_cast<float>(rows);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= scale * gw[i];
    for (std::size_t k = 0; k < kClasses; ++k) b[k] -= scale * gb[k];
    return {loss, correct};
  }

  static void pool(const std::uint8_t* image, std::array<float, kFeatures>& f) {
    f.fill(0.0f);
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < kSide; ++y) {
        for (int x = 0; x < kSide; ++x) {
          f[static_cast<std::size_t>((c * kPooled + y / 4) * kPooled + x / 4)] +=
              static_cast<float>(image[(c * kSide + y) * kSide + x]) / (16.0f * 255.0f);
        }
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  using Clock = std::chrono::steady_clock;
  example::Cli cli(
      argc, argv,
      "usage: train_loop [--samples N] [--work-us U] [--epochs E] [--batch B]\n"
      "                  [--workers W] [--persistent]\n"
      "  a softmax classifier trained on synthetic 32x32 images; per epoch, the\n"
      "  throughput, how long the loop waited for data, the loss and accuracy\n"
      "  --samples N   images in the dataset (default 20000)\n"
      "  --work-us U   extra CPU work per sample in get(), in microseconds (default 0)\n"
      "  --epochs E    epochs (default 3)\n"
      "  --batch B     batch_size (default 128)\n"
      "  --workers W   num_workers (default 2; -1 is kAuto)\n"
      "  --persistent  persistent_workers");
  SyntheticImages dataset;
  dataset.n = static_cast<std::size_t>(cli.number("--samples", 20000, 1, 100000000));
  dataset.work_ns = 1000L * cli.number("--work-us", 0, 0, 10000000);
  const int epochs = static_cast<int>(cli.number("--epochs", 3, 1, 10000));

  stoker::LoaderOptions opt;
  opt.batch_size = static_cast<std::size_t>(cli.number("--batch", 128, 1, 1 << 20));
  opt.num_workers = static_cast<int>(cli.number("--workers", 2, stoker::kAuto, 1024));
  opt.persistent_workers = cli.flag("--persistent");
  cli.done();
  opt.shuffle = true;
  opt.seed = 0;
  try {
    stoker::DataLoader loader(dataset, opt);
    std::printf(
        "stoker train_loop: %zu synthetic 3x32x32 images in %d classes, softmax regression\n"
        "DataLoader(batch_size=%zu, num_workers=%d, prefetch_factor=%s, persistent_workers=%s, "
        "shuffle=true, seed=%llu): %zu batches per epoch\n",
        dataset.n, kClasses, opt.batch_size, opt.num_workers,
        opt.prefetch_factor == stoker::kAdaptivePrefetch
            ? "adaptive"
            : std::to_string(opt.prefetch_factor).c_str(),
        opt.persistent_workers ? "true" : "false", static_cast<unsigned long long>(opt.seed),
        loader.size());
    Model model;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      loader.set_epoch(static_cast<std::uint64_t>(epoch));
      double loss = 0;
      std::size_t correct = 0;
      std::size_t samples = 0;
      std::size_t bytes = 0;
      Clock::duration waited{};
      const Clock::time_point start = Clock::now();
      Clock::time_point asked = start;
      for (const stoker::Batch& batch : loader) {
        waited += Clock::now() - asked;
        const auto [batch_loss, batch_correct] = model.step(batch, 0.5f);
        loss += batch_loss;
        correct += batch_correct;
        samples += batch.size();
        bytes += batch.nbytes();
        asked = Clock::now();
      }
      waited += Clock::now() - asked;
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      std::printf(
          "epoch %d: %zu samples in %.3f s = %.0f samples/s (%.1f MB/s); waited for data "
          "%.0f%% of the time; loss %.3f, accuracy %.1f%%\n",
          epoch, samples, seconds, static_cast<double>(samples) / seconds,
          static_cast<double>(bytes) / seconds / 1e6,
          100.0 * std::chrono::duration<double>(waited).count() / seconds,
          loss / static_cast<double>(samples),
          100.0 * static_cast<double>(correct) / static_cast<double>(samples));
    }
    // What the loader saw of the last epoch, and what limits this loop (docs/tuning.md).
    const stoker::LoaderStats stats = loader.stats();
    for (const stoker::WorkerStats& w : stats.workers) {
      std::printf(
          "worker %zu: %llu batches, %.0f%% busy (get() %.3f s, collate %.3f s), %.0f%% blocked on "
          "full slots\n",
          w.worker_id, static_cast<unsigned long long>(w.batches), 100.0 * w.busy_fraction,
          w.get_seconds, w.collate_seconds,
          stats.epoch_seconds > 0 ? 100.0 * w.blocked_seconds / stats.epoch_seconds : 0.0);
    }
    if (stats.prefetch_depth > 0) {
      std::printf("prefetch depth: %zu batches per worker (%s, at most %zu)\n",
                  stats.prefetch_depth, stats.prefetch_adaptive ? "adaptive" : "fixed",
                  stats.prefetch_depth_limit);
    }
    const stoker::Diagnosis diagnosis = stoker::diagnose(stats);
    std::printf("diagnosis: %s\n", diagnosis.summary.c_str());
    if (!diagnosis.advice.empty()) std::printf("advice: %s\n", diagnosis.advice.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_loop: %s\n", e.what());
    return 1;
  }
  return 0;
}
