// TensorDataset: samples held in memory as named tensors whose first dimension indexes the
// samples (PyTorch's TensorDataset, with names). get(i) hands out views of row i, so nothing is
// copied until a worker stacks the rows into the batch's shared-memory slot. A shuffled loader
// with two workers delivers every row once; each batch's indices say which rows it holds.
#include <cstdio>
#include <vector>

#include <stoker/stoker.hpp>

#include "cli.hpp"

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: tensor_dataset\n  TensorDataset with a shuffled two-worker loader.\n  "
                   "It takes no arguments.");
  cli.done();
  constexpr std::int64_t kRows = 1000;
  constexpr std::int64_t kFeatures = 8;
  // Row i: x = {i, i + 0.1, ..., i + 0.7}, y = i % 3.
  std::vector<float> x(static_cast<std::size_t>(kRows * kFeatures));
  std::vector<std::int64_t> y(static_cast<std::size_t>(kRows));
  for (std::int64_t i = 0; i < kRows; ++i) {
    for (std::int64_t j = 0; j < kFeatures; ++j) {
      x[static_cast<std::size_t>(i * kFeatures + j)] =
          static_cast<float>(i) + 0.1f * static_cast<float>(j);
    }
    y[static_cast<std::size_t>(i)] = i % 3;
  }
  stoker::TensorDataset dataset{{"x", stoker::Tensor::from(x, {kRows, kFeatures})},
                                {"y", stoker::Tensor::from(y)}};

  stoker::LoaderOptions opt;
  opt.batch_size = 128;
  opt.num_workers = 2;
  opt.shuffle = true;
  opt.seed = 1;
  stoker::DataLoader loader(dataset, opt);
  std::printf("TensorDataset: %zu rows; %zu batches of up to %zu, 2 workers, shuffled\n",
              dataset.size(), loader.size(), opt.batch_size);

  std::vector<int> seen(static_cast<std::size_t>(kRows), 0);
  std::size_t wrong = 0;
  for (const stoker::Batch& batch : loader) {
    const float* bx = batch["x"].data<float>();                // [B, 8]
    const std::int64_t* by = batch["y"].data<std::int64_t>();  // [B]
    for (std::size_t r = 0; r < batch.size(); ++r) {
      const std::size_t i = batch.indices()[r];
      ++seen[i];
      const float want = static_cast<float>(i) + 0.1f * static_cast<float>(kFeatures - 1);
      if (bx[r * kFeatures + kFeatures - 1] != want || by[r] != static_cast<std::int64_t>(i % 3)) {
        ++wrong;
      }
    }
    if (batch.index() < 2 || batch.index() + 1 == loader.size()) {
      std::printf("batch %llu: x %s, y %s, rows %zu %zu %zu ...\n",
                  static_cast<unsigned long long>(batch.index()),
                  batch["x"].shape().to_string().c_str(), batch["y"].shape().to_string().c_str(),
                  batch.indices()[0], batch.indices()[1], batch.indices()[2]);
    }
  }
  std::size_t once = 0;
  for (const int count : seen) once += count == 1 ? 1 : 0;
  std::printf("%zu of %lld rows delivered exactly once, %zu with wrong values\n", once,
              static_cast<long long>(kRows), wrong);
  return once == static_cast<std::size_t>(kRows) && wrong == 0 ? 0 : 1;
}
