// The README's example: a dataset is any type with size() and get(i); the loader forks
// workers that collate batches straight into shared memory.
#include <cstdio>

#include <stoker/stoker.hpp>

#include "cli.hpp"

struct Squares {
  std::size_t size() const { return 1000; }
  stoker::Sample get(std::size_t i) {  // runs in a worker process
    const float x = static_cast<float>(i);
    stoker::Sample s;
    s.set("x", stoker::Tensor::from<float>({x, x * x}));
    s.set("label", stoker::Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i % 10)));
    return s;
  }
};

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: quickstart\n  the README's example: a dataset with size() and get(i), "
                   "two workers.\n  It takes no arguments.");
  cli.done();
  stoker::LoaderOptions opt;
  opt.batch_size = 64;
  opt.num_workers = 2;
  opt.shuffle = true;
  opt.seed = 42;
  stoker::DataLoader loader(Squares{}, opt);
  for (std::size_t epoch = 0; epoch < 3; ++epoch) {
    loader.set_epoch(epoch);
    double sum = 0;
    for (const stoker::Batch& batch : loader) {   // in order; zero-copy views
      const float* x = batch["x"].data<float>();  // shape [B, 2]
      for (std::size_t k = 0; k < batch.size(); ++k) sum += x[2 * k];
    }
    std::printf("epoch %zu: %zu batches, sum of x = %.0f\n", epoch, loader.size(), sum);
  }
}
