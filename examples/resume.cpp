// Resume after an interruption: a "training run" checkpoints the loader's state every 5
// batches; it is cut short, and a fresh loader (with a different num_workers, as after a
// restart on another machine) continues from the checkpoint with exactly the batches the
// uninterrupted run would have seen.
#include <cstdio>
#include <string>
#include <vector>

#include <stoker/stoker.hpp>

#include "cli.hpp"

struct Noisy {
  std::size_t size() const { return 100; }
  stoker::Sample get(std::size_t i) const {
    stoker::Sample s;
    s.set("x",
          stoker::Tensor::scalar<double>(static_cast<double>(i) + stoker::sample_rng().uniform()));
    return s;
  }
};

stoker::LoaderOptions options(int workers) {
  stoker::LoaderOptions opt;
  opt.batch_size = 8;
  opt.num_workers = workers;
  opt.shuffle = true;
  opt.seed = 3;
  return opt;
}

double first_value(const stoker::Batch& batch) { return batch["x"].data<double>()[0]; }

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: resume\n  a checkpointed loader state resumed with another "
                   "num_workers.\n  It takes no arguments.");
  cli.done();
  // What an uninterrupted epoch delivers.
  std::vector<double> reference;
  {
    stoker::DataLoader loader(Noisy{}, options(2));
    for (const stoker::Batch& batch : loader) reference.push_back(first_value(batch));
  }
  // The interrupted run: checkpoint every 5 batches, "crash" after 7.
  std::string checkpoint;
  std::size_t seen = 0;
  {
    stoker::DataLoader loader(Noisy{}, options(2));
    for (const stoker::Batch& batch : loader) {
      (void)batch;  // ... a training step ...
      if (++seen % 5 == 0) checkpoint = loader.state();
      if (seen == 7) break;
    }
  }
  std::printf("checkpoint after 5 batches:\n%s", checkpoint.c_str());
  // The restart: 3 workers this time; it goes on from batch 5.
  stoker::DataLoader loader(Noisy{}, options(3));
  loader.load_state(checkpoint);
  std::size_t k = 5;
  bool same = true;
  for (const stoker::Batch& batch : loader) same = same && first_value(batch) == reference[k++];
  std::printf("resumed with 3 workers: batches 5..%zu %s the uninterrupted run's\n", k - 1,
              same ? "match" : "DO NOT match");
  return same && k == reference.size() ? 0 : 1;
}
