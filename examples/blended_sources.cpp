// Blending two sources with fixed weights, as LLM trainers blend corpora: MixtureDataset over
// a large "web" source and a small "code" source, 70% / 30% of every epoch. Each epoch has the
// exact counts; each source is read without replacement, so no window repeats before all of
// its source has been seen, and a small source is reshuffled when it runs out; the blend is a
// function of (seed, epoch, index), so it is the same for any num_workers.
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <stoker/stoker.hpp>

#include "cli.hpp"

namespace {

// A stand-in for a tokenised corpus: window i of source `id` is 16 tokens made from (id, i).
struct Corpus {
  std::size_t n = 0;
  std::int64_t id = 0;
  std::size_t size() const { return n; }
  stoker::Sample get(std::size_t i) const {
    stoker::Tensor tokens = stoker::Tensor::empty(stoker::DType::kInt32, {16});
    stoker::Generator g = stoker::Generator::from({static_cast<std::uint64_t>(id), i});
    for (std::size_t t = 0; t < 16; ++t) {
      tokens.data<std::int32_t>()[t] = static_cast<std::int32_t>(g.below(50257));
    }
    stoker::Sample s;
    s.set("tokens", std::move(tokens));
    s.set("source", stoker::Tensor::scalar<std::int64_t>(id));
    s.set("window", stoker::Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
    return s;
  }
};

// Runs `epochs` epochs; counts each (source, window) drawn, and sums a checksum of the batches.
struct Run {
  std::map<std::pair<std::int64_t, std::int64_t>, int> draws;
  std::vector<std::map<std::int64_t, std::size_t>> per_epoch;
  std::string first_batch;
  std::uint64_t checksum = 0;
};

Run run(stoker::MixtureDataset mixture, int workers, int epochs) {
  stoker::LoaderOptions opt;
  opt.batch_size = 50;
  opt.num_workers = workers;
  stoker::DataLoader loader(std::move(mixture), opt);
  Run out;
  for (int e = 0; e < epochs; ++e) {
    std::map<std::int64_t, std::size_t> counts;
    for (const stoker::Batch& batch : loader) {
      const std::int64_t* source = batch["source"].data<std::int64_t>();
      const std::int64_t* window = batch["window"].data<std::int64_t>();
      for (std::size_t r = 0; r < batch.size(); ++r) {
        ++counts[source[r]];
        ++out.draws[{source[r], window[r]}];
        out.checksum =
            out.checksum * 1000003 + static_cast<std::uint64_t>(source[r] * 100000 + window[r]);
        if (e == 0 && out.first_batch.size() < 20) out.first_batch += source[r] == 0 ? 'W' : 'C';
      }
    }
    out.per_epoch.push_back(counts);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: blended_sources [--samples N] [--epochs N] [--workers N]\n"
                   "  --samples N  samples per epoch (default 4000)\n"
                   "  --epochs N   epochs to run (default 3)\n"
                   "  --workers N  loader workers (default 2; the blend is compared with 0)");
  const auto samples = static_cast<std::size_t>(cli.number("--samples", 4000, 1, 1L << 30));
  const int epochs = static_cast<int>(cli.number("--epochs", 3, 1, 1000));
  const int workers = static_cast<int>(cli.number("--workers", 2, 0, 64));
  cli.done();

  const Corpus web{10000, 0};
  const Corpus code{1200, 1};
  const auto blend = [&] { return stoker::MixtureDataset({{web, 0.7}, {code, 0.3}}, samples, 17); };
  try {
    const stoker::MixtureDataset mixture = blend();
    std::printf(
        "MixtureDataset: web %zu windows (weight 0.7), code %zu (weight 0.3); %zu samples an "
        "epoch: %zu web + %zu code\n",
        web.n, code.n, samples, mixture.counts()[0], mixture.counts()[1]);
    const Run with_workers = run(blend(), workers, epochs);
    bool exact = true;
    for (int e = 0; e < epochs; ++e) {
      const auto& counts = with_workers.per_epoch[static_cast<std::size_t>(e)];
      const std::size_t w = counts.count(0) ? counts.at(0) : 0;
      const std::size_t c = counts.count(1) ? counts.at(1) : 0;
      std::printf("epoch %d: web %zu, code %zu\n", e, w, c);
      exact = exact && w == mixture.counts()[0] && c == mixture.counts()[1];
    }
    std::printf("first 20 samples of epoch 0: %s (W web, C code)\n",
                with_workers.first_batch.c_str());

    // Without replacement: a source's windows all come once before any comes again.
    bool balanced = true;
    for (const auto& [corpus, name] : {std::pair{web, "web"}, std::pair{code, "code"}}) {
      const std::size_t drawn =
          mixture.counts()[static_cast<std::size_t>(corpus.id)] * static_cast<std::size_t>(epochs);
      int fewest = 1 << 30;
      int most = 0;
      for (std::size_t i = 0; i < corpus.n; ++i) {
        const auto it = with_workers.draws.find({corpus.id, static_cast<std::int64_t>(i)});
        const int k = it == with_workers.draws.end() ? 0 : it->second;
        fewest = std::min(fewest, k);
        most = std::max(most, k);
      }
      std::printf("%s: %zu draws over %d epochs; each of its %zu windows drawn %d to %d times\n",
                  name, drawn, epochs, corpus.n, fewest, most);
      balanced = balanced && most - fewest <= 1;
    }

    const Run in_process = run(blend(), 0, epochs);
    const bool same = in_process.checksum == with_workers.checksum;
    std::printf("%d workers and 0 workers: %s batches\n", workers, same ? "the same" : "DIFFERENT");
    if (!exact || !balanced || !same) {
      std::fprintf(stderr, "blended_sources: the blend did not behave as described\n");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "blended_sources: %s\n", e.what());
    return 1;
  }
  return 0;
}
