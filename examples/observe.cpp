// Watching a loader: loader.stats() after an epoch, diagnose() on it, the periodic health line
// (run with STOKER_LOG=info to see it) and a Chrome trace of every batch (open the file it names
// in https://ui.perfetto.dev). The "training step" sleeps, so the verdict here is compute-bound;
// make get() slower, or the step faster, and it turns data-bound.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <stoker/stoker.hpp>

#include "cli.hpp"

namespace {

// 2,048 samples of float32[3, 64, 64] with a little work per sample.
struct Images {
  std::size_t size() const { return 2048; }
  stoker::Sample get(std::size_t i) {
    stoker::Tensor x = stoker::Tensor::empty(stoker::DType::kFloat32, {3, 64, 64});
    float* p = x.data<float>();
    stoker::Generator& rng = stoker::sample_rng();
    for (std::size_t k = 0; k < x.numel(); ++k) p[k] = static_cast<float>(rng.uniform());
    stoker::Sample s;
    s.set("image", std::move(x));
    s.set("label", stoker::Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i % 10)));
    return s;
  }
};

}  // namespace

int main(int argc, char** argv) {
  example::Cli cli(
      argc, argv,
      "usage: observe [TRACE_FILE]\n"
      "  loader.stats() after each epoch, diagnose() on them, the periodic health line\n"
      "  (run with STOKER_LOG=info) and a Chrome trace of every batch written to\n"
      "  TRACE_FILE (default /tmp/stoker-observe-trace.json).");
  const std::string trace = cli.positional("/tmp/stoker-observe-trace.json");
  cli.done();
  stoker::LoaderOptions opt;
  opt.batch_size = 64;
  opt.num_workers = 2;
  opt.persistent_workers = true;
  opt.log_interval = std::chrono::milliseconds(200);  // the health line, with STOKER_LOG=info
  opt.trace_path = trace;
  {
    stoker::DataLoader loader(Images{}, opt);
    for (std::size_t epoch = 0; epoch < 2; ++epoch) {
      loader.set_epoch(epoch);
      for (const stoker::Batch& batch : loader) {
        (void)batch;
        std::this_thread::sleep_for(std::chrono::milliseconds(8));  // the training step
      }
      const stoker::LoaderStats s = loader.stats();
      fmt::print(
          "epoch {}: {:.0f} samples/s, consumer waited {:.1f}%, ring {:.0f}% ready, "
          "tree PSS {:.1f} MiB\n",
          epoch, s.samples_per_second(), 100 * s.wait_fraction(), 100 * s.ring_occupancy,
          static_cast<double>(s.tree_pss_bytes()) / (1 << 20));
      for (const stoker::WorkerStats& w : s.workers) {
        fmt::print(
            "  worker {} (pid {}): {} batches, {:.0f}% busy: get() {:.3f} s, collate "
            "{:.3f} s, write {:.3f} s\n",
            w.worker_id, w.pid, w.batches, 100 * w.busy_fraction, w.get_seconds, w.collate_seconds,
            w.write_seconds);
      }
      const stoker::Diagnosis d = stoker::diagnose(s);
      fmt::print("  diagnosis: {}\n  advice: {}\n", d.summary, d.advice);
    }
  }  // the trace is written when the loader goes
  fmt::print("trace written to {} (open it in https://ui.perfetto.dev)\n", trace);
  return 0;
}
