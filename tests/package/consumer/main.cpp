// A program that knows stoker only through its installed package.
#include <cstdio>

#include <stoker/stoker.hpp>

struct Squares {
  std::size_t size() const { return 100; }
  stoker::Sample get(std::size_t i) const {
    stoker::Sample s;
    s.set("x", stoker::Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i * i)));
    return s;
  }
};

int main() {
  stoker::LoaderOptions opt;
  opt.batch_size = 10;
  opt.num_workers = 2;
  stoker::DataLoader loader(Squares{}, opt);
  std::size_t batches = 0;
  std::size_t samples = 0;
  for (const stoker::Batch& batch : loader) {
    ++batches;
    samples += batch.size();
  }
  std::printf("consumer: %zu batches, %zu samples\n", batches, samples);
  return batches == 10 && samples == 100 ? 0 : 1;
}
