// Random augmentation with stoker::sample_rng(): inside get(i) it is the generator of sample i
// in this epoch, seeded from (LoaderOptions::seed, epoch, i) alone. So the augmented batches are
// bit-identical whichever worker loads a sample, for any num_workers, and the same sample is
// augmented differently each epoch. Here: a random 12 x 12 crop of a 16 x 16 image, a random
// flip, and Gaussian noise.
#include <cstdio>
#include <vector>

#include <stoker/stoker.hpp>

#include "cli.hpp"

namespace {

struct Augmented {
  std::size_t size() const { return 256; }
  stoker::Sample get(std::size_t i) {
    stoker::Generator& rng = stoker::sample_rng();  // not std::random_device, not a global
    const auto dx = static_cast<std::int64_t>(rng.below(5));  // crop offset, 0..4
    const auto dy = static_cast<std::int64_t>(rng.below(5));
    const bool flip = rng.bernoulli(0.5);
    stoker::Tensor image = stoker::Tensor::empty(stoker::DType::kFloat32, {12, 12});
    float* px = image.data<float>();
    for (std::int64_t y = 0; y < 12; ++y) {
      for (std::int64_t x = 0; x < 12; ++x) {
        const std::int64_t sx = flip ? dx + 11 - x : dx + x;  // source pixel of the 16 x 16 base
        const float base =
            static_cast<float>((static_cast<std::int64_t>(i) + sx * 3 + (dy + y) * 5) % 17);
        px[y * 12 + x] = base / 16.0f + 0.05f * static_cast<float>(rng.normal());
      }
    }
    stoker::Sample s;
    s.set("image", std::move(image));
    s.set("label", stoker::Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i % 4)));
    return s;
  }
};

// FNV-1a over the bytes of every field of a batch.
std::uint64_t checksum(const stoker::Batch& batch) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const auto& [name, tensor] : batch) {
    for (const std::byte b : tensor.bytes()) {
      h = (h ^ std::to_integer<std::uint64_t>(b)) * 1099511628211ULL;
    }
  }
  return h;
}

// The checksums of every batch of epochs 0 and 1.
std::vector<std::vector<std::uint64_t>> run(int workers) {
  stoker::LoaderOptions opt;
  opt.batch_size = 32;
  opt.num_workers = workers;
  opt.seed = 2024;  // no shuffle: batch b holds the same samples in every epoch
  stoker::DataLoader loader(Augmented{}, opt);
  std::vector<std::vector<std::uint64_t>> epochs(2);
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    loader.set_epoch(epoch);
    for (const stoker::Batch& batch : loader) epochs[epoch].push_back(checksum(batch));
  }
  return epochs;
}

}  // namespace

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: augmentation\n  random augmentation with sample_rng(): the same batches "
                   "for 0 and 2 workers,\n  new ones each epoch.\n  It takes no arguments.");
  cli.done();
  const auto in_process = run(0);
  const auto two_workers = run(2);
  for (std::size_t epoch = 0; epoch < 2; ++epoch) {
    for (const int workers : {0, 2}) {
      const std::vector<std::uint64_t>& sums = (workers == 0 ? in_process : two_workers)[epoch];
      std::printf("epoch %zu, num_workers %d: %zu batches, checksums %016llx %016llx ...\n", epoch,
                  workers, sums.size(), static_cast<unsigned long long>(sums[0]),
                  static_cast<unsigned long long>(sums[1]));
    }
  }
  const bool same_for_workers = in_process == two_workers;
  bool epochs_differ = true;
  for (std::size_t b = 0; b < in_process[0].size(); ++b) {
    epochs_differ = epochs_differ && in_process[0][b] != in_process[1][b];
  }
  std::printf("identical for 0 and 2 workers: %s; every batch differs between epochs: %s\n",
              same_for_workers ? "yes" : "NO", epochs_differ ? "yes" : "NO");
  return same_for_workers && epochs_differ ? 0 : 1;
}
