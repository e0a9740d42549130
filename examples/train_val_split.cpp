// Holding out a validation split with random_split, as torch.utils.data.random_split does:
// MnistDataset's training set cut 5/6 : 1/6 into two Subsets that share the one dataset, a
// shuffled training loader over one and a plain validation loader over the other. The model is
// a nearest-centroid classifier (one mean image per class), so the loaders are the point.
//
// Without --root the program writes a small synthetic set in MNIST's IDX format to /tmp (each
// class a bar in its own columns, plus noise); --root DIR reads real MNIST, Fashion-MNIST or
// KMNIST files (Debian: dataset-fashion-mnist installs /usr/share/datasets/fashion-mnist).
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <stoker/stoker.hpp>

#include "cli.hpp"

namespace {

constexpr int kClasses = 10;
constexpr std::uint32_t kSide = 28;

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

void put_be32(std::ofstream& out, std::uint32_t v) {
  for (const int shift : {24, 16, 8, 0}) out.put(static_cast<char>((v >> shift) & 0xff));
}

// train-images-idx3-ubyte and train-labels-idx1-ubyte with n synthetic images.
void write_synthetic_mnist(const std::filesystem::path& dir, std::uint32_t n) {
  std::ofstream images(dir / "train-images-idx3-ubyte", std::ios::binary);
  std::ofstream labels(dir / "train-labels-idx1-ubyte", std::ios::binary);
  images.write("\0\0\x08\x03", 4);
  put_be32(images, n);
  put_be32(images, kSide);
  put_be32(images, kSide);
  labels.write("\0\0\x08\x01", 4);
  put_be32(labels, n);
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto label = static_cast<std::uint32_t>(mix(i) % kClasses);
    labels.put(static_cast<char>(label));
    for (std::uint32_t y = 0; y < kSide; ++y) {
      for (std::uint32_t x = 0; x < kSide; ++x) {
        const bool bar = x >= 4 + 2 * label && x < 6 + 2 * label;
        const auto noise = static_cast<std::uint32_t>(mix((i * kSide + y) * kSide + x) % 96);
        images.put(static_cast<char>((bar ? 150 : 0) + noise));
      }
    }
  }
}

using Image = std::array<float, kSide * kSide>;

}  // namespace

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: train_val_split [--root DIR] [--seed N] [--workers N]\n"
                   "  --root DIR   a folder with MNIST's train-images-idx3-ubyte(.gz) and\n"
                   "               train-labels-idx1-ubyte(.gz); default: synthetic files in /tmp\n"
                   "  --seed N     the split's seed (default 42)\n"
                   "  --workers N  the training loader's workers (default 2)");
  std::string root = cli.text("--root", "");
  const auto seed = static_cast<std::uint64_t>(cli.number("--seed", 42, 0, 1L << 62));
  const int workers = static_cast<int>(cli.number("--workers", 2, 0, 64));
  cli.done();

  std::filesystem::path temp;
  if (root.empty()) {
    char name[] = "/tmp/stoker-train-val-split-XXXXXX";
    if (mkdtemp(name) == nullptr) {
      std::perror("train_val_split: mkdtemp");
      return 1;
    }
    temp = name;
    write_synthetic_mnist(temp, 3000);
    root = temp.string();
  }
  int status = 0;
  try {
    stoker::MnistDataset mnist(root);  // float32 images in [0, 1], as libtorch's MNIST
    const std::size_t n = mnist.size();
    if (mnist.images().size(2) != kSide || mnist.images().size(3) != kSide) {
      throw std::runtime_error("this example's classifier expects 28 x 28 images");
    }
    std::printf("MnistDataset(%s): %zu images [1, %lld, %lld]%s\n", root.c_str(), n,
                static_cast<long long>(mnist.images().size(2)),
                static_cast<long long>(mnist.images().size(3)),
                temp.empty() ? "" : " (synthetic; --root DIR for real files)");

    // The split: disjoint, covering the dataset, a function of the seed only.
    auto splits = stoker::random_split(std::move(mnist), {5.0 / 6, 1.0 / 6}, seed);
    const stoker::Subset<stoker::MnistDataset>& train_set = splits[0];
    const stoker::Subset<stoker::MnistDataset>& val_set = splits[1];
    std::set<std::size_t> all(train_set.indices().begin(), train_set.indices().end());
    all.insert(val_set.indices().begin(), val_set.indices().end());
    const bool partition = all.size() == n && train_set.size() + val_set.size() == n;
    std::printf("random_split({5/6, 1/6}, seed %llu): train %zu, validation %zu; %s\n",
                static_cast<unsigned long long>(seed), train_set.size(), val_set.size(),
                partition ? "disjoint, covering every image" : "NOT a partition");

    stoker::LoaderOptions train_opt;
    train_opt.batch_size = 256;
    train_opt.shuffle = true;
    train_opt.seed = seed;
    train_opt.num_workers = workers;
    stoker::DataLoader train_loader(train_set, train_opt);  // copies share the dataset

    stoker::LoaderOptions val_opt;
    val_opt.batch_size = 500;
    val_opt.num_workers = 1;
    stoker::DataLoader val_loader(val_set, val_opt);

    // "Training": the mean image of each class.
    std::vector<Image> centroid(kClasses, Image{});
    std::vector<std::size_t> count(kClasses, 0);
    for (const stoker::Batch& batch : train_loader) {
      const float* pixels = batch["image"].data<float>();
      const std::int64_t* labels = batch["label"].data<std::int64_t>();
      for (std::size_t r = 0; r < batch.size(); ++r) {
        const auto c = static_cast<std::size_t>(labels[r]);
        for (std::size_t p = 0; p < kSide * kSide; ++p)
          centroid[c][p] += pixels[r * kSide * kSide + p];
        ++count[c];
      }
    }
    for (std::size_t c = 0; c < kClasses; ++c) {
      for (float& v : centroid[c]) v /= static_cast<float>(count[c] > 0 ? count[c] : 1);
    }
    std::printf("train: class means from %zu images in %zu batches (%d workers, shuffled)\n",
                train_set.size(), train_loader.size(), workers);

    // Validation: the nearest mean, on samples the training loop never saw.
    std::size_t correct = 0;
    std::size_t seen = 0;
    for (const stoker::Batch& batch : val_loader) {
      const float* pixels = batch["image"].data<float>();
      const std::int64_t* labels = batch["label"].data<std::int64_t>();
      for (std::size_t r = 0; r < batch.size(); ++r) {
        std::size_t best = 0;
        float best_distance = 0;
        for (std::size_t c = 0; c < kClasses; ++c) {
          float d = 0;
          for (std::size_t p = 0; p < kSide * kSide; ++p) {
            const float diff = pixels[r * kSide * kSide + p] - centroid[c][p];
            d += diff * diff;
          }
          if (c == 0 || d < best_distance) {
            best = c;
            best_distance = d;
          }
        }
        correct += static_cast<std::int64_t>(best) == labels[r] ? 1U : 0U;
        ++seen;
      }
    }
    std::printf("validation: %zu images, nearest-mean accuracy %.1f%%\n", seen,
                100.0 * static_cast<double>(correct) / static_cast<double>(seen));
    if (!partition || seen != val_set.size() || (!temp.empty() && correct < seen * 9 / 10)) {
      std::fprintf(stderr,
                   "train_val_split: the split or the classifier did not behave as described\n");
      status = 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_val_split: %s\n", e.what());
    status = 1;
  }
  if (!temp.empty()) std::filesystem::remove_all(temp);
  return status;
}
