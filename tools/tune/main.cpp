// stoker-tune: finds num_workers and batch_size for a dataset on this machine. Each setting is
// measured the same way — a warm-up, then a timed window (or timed epochs) — for samples/s,
// the peak memory of the whole process tree and the share of time the consumer waited; the
// results come out as a table, JSON and an SVG chart, with a recommendation and its reason.
//
//   stoker-tune (--workload {tiny,image,cpu} | --npy FILE | --tokens FILE [--window N] |
//                --images DIR) [--strategy progressive|grid] [--workers LIST] [--batch LIST]
//               [--seconds S] [--warmup S] [--epochs N] [--max-workers N] [--prefetch P]
//               [--simulate-work-us N] [--json] [--svg FILE]
//
// The method (docs/tuning.md): start at about a quarter of the cores, add workers until the
// gain is under 5% or throughput falls (or swap use rises), then try half and twice the batch
// size at that worker count. The recommendation is the setting with the fewest workers (then
// the least memory) whose throughput is within 5% of the best measured.
//
// The parts are in tools/tune/ (tune.hpp says which file holds what); this file picks the
// dataset and runs them in order.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench_workloads.hpp"
#include "os/posix.hpp"
#include "stoker/stoker.hpp"
#include "tune/measure.hpp"
#include "tune/tune.hpp"

namespace stoker::tune {
namespace {

template <class D>
int tune_dataset(D dataset, const Args& a, std::size_t default_batch,
                 const Clock::time_point started) {
  const stoker::SystemInfo system = stoker::probe_system();
  Report rep;
  rep.system = &system;
  rep.cores = usable_cores(system);
  rep.dataset_samples = static_cast<std::size_t>(dataset.size());
  if (rep.dataset_samples == 0) {
    std::fprintf(stderr, "stoker-tune: the dataset is empty; nothing to measure\n");
    return 1;
  }
  rep.bytes_per_sample = stoker::Sample(dataset.get(0)).nbytes();

  Tuner<D> tuner(std::move(dataset), a, system);
  const Measure measure = [&tuner](Setting s) { return tuner.measure(s); };
  const std::vector<Result> results = a.strategy == "grid"
                                          ? run_grid(measure, a, rep.cores, default_batch)
                                          : run_progressive(measure, a, rep.cores, default_batch);
  const std::optional<Recommendation> rec = recommend(results);
  rep.elapsed_s = std::chrono::duration<double>(Clock::now() - started).count();

  const std::string title = fmt::format("stoker-tune: {} {} on {} CPUs ({} strategy)",
                                        a.source_kind, a.source, rep.cores, a.strategy);
  std::string text = table(results, rec);
  if (rec) {
    text +=
        fmt::format("\nrecommended: {}\n  at it: {}\n", rec->reason, results[rec->index].diagnosis);
  } else {
    text += "\nno setting could be measured; see the errors above\n";
  }
  text += fmt::format("measured {} setting{} in {:.1f} s\n", results.size(),
                      results.size() == 1 ? "" : "s", rep.elapsed_s);
  std::fputs(text.c_str(), a.json ? stderr : stdout);
  if (a.json) std::fputs(to_json(a, rep, results, rec).c_str(), stdout);
  if (!a.svg.empty()) {
    namespace posix = stoker::detail::posix;
    const std::string svg = render_svg(title, results, rec);
    posix::Fd out(posix::open_write(a.svg.c_str()));
    if (!out.valid() || posix::write_all(out.get(), svg.data(), svg.size()) != 0 ||
        posix::close_fd(out.release()) != 0) {
      std::fprintf(
          stderr, "%s\n",
          posix::errno_message("stoker-tune: writing " + a.svg + " failed", errno).c_str());
      return 1;
    }
  }
  return rec ? 0 : 1;
}

}  // namespace
}  // namespace stoker::tune

int main(int argc, char** argv) {
  using namespace stoker::tune;
  const Clock::time_point started = Clock::now();
  const Args a = parse_args(argc, argv);
  try {
    if (a.source_kind == "workload") {
      if (a.source == "tiny") return tune_dataset(stoker::bench::TinyDataset{}, a, 256, started);
      if (a.source == "image") return tune_dataset(stoker::bench::ImageDataset{}, a, 64, started);
      return tune_dataset(stoker::bench::CpuDataset{}, a, 32, started);
    }
    if (a.source_kind == "npy") return tune_dataset(stoker::NpyDataset(a.source), a, 64, started);
    if (a.source_kind == "tokens") {
      stoker::TokenOptions o;
      o.context = a.window.value_or(1024);
      return tune_dataset(stoker::TokenDataset({a.source}, o), a, 16, started);
    }
    return tune_dataset(stoker::ImageFolderDataset(a.source), a, 64, started);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoker-tune: %s\n", e.what());
    return 1;
  }
}
