// ShardShuffle's order against a global permutation (docs/distributed.md, "What the order
// reads: measured"):
//   shard_order [--shards N] [--shard-samples N] [--shard-mb M] [--global-batch G]
//               [--workers W] [--cache F] [--throughput-only | --simulate-only] [options]
// Part 1, simulated (no I/O; the orders are the real samplers'): for each layout (nodes x
// ranks, canonical partitions) and each order (a global permutation, as DistributedSampler
// over the ranks gives it; ShardShuffle with blocks of 1 to 16 mean shards), over one epoch:
//   - shards touched per 100 global batches;
//   - per worker (batch k of a rank goes to worker k mod W), the most shards open at once
//     (read from already, and to be read from again) and the mean shards of one batch;
//   - one LRU cache of whole shards per node, holding F of the corpus (0.10 by default): the
//     bytes it fetches in the epoch, as a multiple of the corpus (all nodes together);
//   - distinct shards per global batch, how far a batch mixes the corpus;
//   - shuffle quality against the global permutation (a full shuffle): the chance that two
//     samples of one global batch come from one shard, and how far apart in the epoch two
//     consecutive records of a shard land, in samples (a full shuffle: about N / 3).
// Part 2, measured: DataLoader epochs over local WebDataset tar shards in the sequential
// order, in ShardShuffle's (default block; interleaved blocks, the default, and permuted ones)
// and in a global permutation, interleaved rounds,
// with the page cache warm and cold (each shard's pages dropped with posix_fadvise before
// each run, so no other file's are); the median samples/s of each.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <stoker/stoker.hpp>
#include <stoker/webdataset.hpp>

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: shard_order [options]\n"
    "  --shards N          simulated corpus: shards (default 1000)\n"
    "  --shard-samples N   mean samples per shard, each within +-10% (default 1000)\n"
    "  --shard-mb M        MB per shard of the mean size (default 100)\n"
    "  --global-batch G    samples of one step over all ranks (default 256)\n"
    "  --workers W         workers per rank (default 4)\n"
    "  --cache F           shard cache per node, a fraction of the corpus (default 0.10)\n"
    "  --simulate-only     part 1 only\n"
    "  --throughput-only   part 2 only\n"
    "  --tp-shards N       part 2: tar shards to write (default 64)\n"
    "  --tp-samples N      part 2: samples per shard (default 256)\n"
    "  --sample-kib K      part 2: bytes per sample, KiB (default 16)\n"
    "  --tp-workers N      part 2: DataLoader workers (default 2)\n"
    "  --rounds N          part 2: interleaved rounds (default 5; medians)\n"
    "  --scratch DIR       part 2: where the shards go (default /tmp/stoker-bench-order)\n";

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "shard_order: %s\n%s", what.c_str(), kUsage);
  std::exit(2);
}

struct Args {
  std::size_t shards = 1000;
  std::size_t shard_samples = 1000;
  double shard_mb = 100;
  std::size_t global_batch = 256;
  std::size_t workers = 4;
  double cache = 0.10;
  bool simulate = true;
  bool throughput = true;
  std::size_t tp_shards = 64;
  std::size_t tp_samples = 256;
  std::size_t sample_kib = 16;
  int tp_workers = 2;
  std::size_t rounds = 5;
  std::string scratch = "/tmp/stoker-bench-order";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(flag + " needs a value");
      return argv[++i];
    };
    auto number = [&]() -> std::size_t {
      const std::string v = value();
      char* end = nullptr;
      const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || n == 0) usage_error(flag + " " + v + ": not >= 1");
      return static_cast<std::size_t>(n);
    };
    if (flag == "--shards") {
      a.shards = number();
    } else if (flag == "--shard-samples") {
      a.shard_samples = number();
    } else if (flag == "--shard-mb") {
      a.shard_mb = std::atof(value().c_str());
    } else if (flag == "--global-batch") {
      a.global_batch = number();
    } else if (flag == "--workers") {
      a.workers = number();
    } else if (flag == "--cache") {
      a.cache = std::atof(value().c_str());
    } else if (flag == "--simulate-only") {
      a.throughput = false;
    } else if (flag == "--throughput-only") {
      a.simulate = false;
    } else if (flag == "--tp-shards") {
      a.tp_shards = number();
    } else if (flag == "--tp-samples") {
      a.tp_samples = number();
    } else if (flag == "--sample-kib") {
      a.sample_kib = number();
    } else if (flag == "--tp-workers") {
      a.tp_workers = static_cast<int>(number());
    } else if (flag == "--rounds") {
      a.rounds = number();
    } else if (flag == "--scratch") {
      a.scratch = value();
    } else if (flag == "-h" || flag == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else {
      usage_error("unknown option " + flag);
    }
  }
  if (a.shard_mb <= 0 || a.cache <= 0 || a.cache > 1)
    usage_error("--shard-mb > 0, 0 < --cache <= 1");
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// ---------------------------------------------------------------------------------------------
// Part 1: simulation

struct Layout {
  const char* name;
  std::size_t nodes;
  std::size_t ranks_per_node;
  std::size_t partitions;
};

// [rank][local batch] -> dataset indices.
using RankBatches = std::vector<std::vector<std::vector<std::size_t>>>;

struct Figures {
  double shards_per_100 = 0;        // distinct shards in 100 consecutive global batches
  std::size_t worker_open_max = 0;  // most shards open at once in one worker's stream
  double worker_open_mean = 0;      // that most, averaged over the workers
  double shards_per_batch = 0;      // distinct shards of one rank's batch
  double corpus_reads = 0;          // bytes the node caches fetched / corpus bytes
  double global_mix = 0;            // distinct shards per global batch
  double same_shard_pairs = 0;      // of two samples of one global batch, P(same shard)
  double neighbour_gap = 0;         // a record and the next of its shard: epoch distance
};

class LruCache {
 public:
  explicit LruCache(double capacity) : capacity_(capacity) {}
  // Reads one sample of `shard` (of `bytes`); returns the bytes fetched (0 on a hit).
  double touch(std::size_t shard, double bytes) {
    const auto it = where_.find(shard);
    if (it != where_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      return 0;
    }
    while (!order_.empty() && used_ + bytes > capacity_) {
      used_ -= bytes_[order_.back()];
      where_.erase(order_.back());
      order_.pop_back();
    }
    order_.push_front(shard);
    where_[shard] = order_.begin();
    bytes_[shard] = bytes;
    used_ += bytes;
    return bytes;
  }

 private:
  double capacity_;
  double used_ = 0;
  std::list<std::size_t> order_;  // most recent first
  std::unordered_map<std::size_t, std::list<std::size_t>::iterator> where_;
  std::unordered_map<std::size_t, double> bytes_;
};

Figures measure(const RankBatches& ranks, const Layout& layout,
                const std::vector<std::size_t>& shard_of, const std::vector<double>& shard_bytes,
                double corpus_bytes, const Args& a) {
  Figures f;
  const std::size_t world = ranks.size();
  const std::size_t batches = ranks[0].size();
  std::vector<std::uint32_t> mark(shard_bytes.size(), 0);
  std::uint32_t stamp = 0;
  auto distinct = [&](auto&& for_each_index) {
    ++stamp;
    std::size_t count = 0;
    for_each_index([&](std::size_t i) {
      const std::size_t s = shard_of[i];
      if (mark[s] != stamp) {
        mark[s] = stamp;
        ++count;
      }
    });
    return count;
  };
  // Shards per 100 global batches and per global batch.
  double windows = 0;
  for (std::size_t k0 = 0; k0 + 100 <= std::max<std::size_t>(batches, 100); k0 += 100) {
    const std::size_t k1 = std::min(batches, k0 + 100);
    f.shards_per_100 += static_cast<double>(distinct([&](auto&& use) {
      for (std::size_t k = k0; k < k1; ++k) {
        for (const auto& rank : ranks) {
          for (const std::size_t i : rank[k]) use(i);
        }
      }
    }));
    ++windows;
  }
  f.shards_per_100 /= windows;
  for (std::size_t k = 0; k < batches; ++k) {
    f.global_mix += static_cast<double>(distinct([&](auto&& use) {
      for (const auto& rank : ranks) {
        for (const std::size_t i : rank[k]) use(i);
      }
    }));
  }
  f.global_mix /= static_cast<double>(batches);
  // Shuffle quality. Same-shard pairs: for each global batch, the share of its pairs of
  // samples that come from one shard (a full shuffle: about 1 / shards), averaged.
  std::vector<std::size_t> count(shard_bytes.size(), 0);
  std::vector<std::size_t> touched;
  std::vector<std::size_t> position(shard_of.size(), SIZE_MAX);  // first epoch position
  std::size_t next = 0;
  for (std::size_t k = 0; k < batches; ++k) {
    std::size_t g = 0;
    for (const auto& rank : ranks) {
      for (const std::size_t i : rank[k]) {
        if (count[shard_of[i]]++ == 0) touched.push_back(shard_of[i]);
        if (position[i] == SIZE_MAX) position[i] = next;
        ++next;
        ++g;
      }
    }
    double pairs = 0;
    for (const std::size_t s : touched) {
      pairs += static_cast<double>(count[s]) * static_cast<double>(count[s] - 1);
      count[s] = 0;
    }
    touched.clear();
    if (g > 1) f.same_shard_pairs += pairs / (static_cast<double>(g) * static_cast<double>(g - 1));
  }
  f.same_shard_pairs /= static_cast<double>(batches);
  // Neighbour gap: how far apart in the epoch two consecutive records of a shard land, in
  // samples (a full shuffle: about N / 3; reading in order: 1).
  double gap = 0;
  std::size_t gaps = 0;
  for (std::size_t i = 0; i + 1 < shard_of.size(); ++i) {
    if (shard_of[i] != shard_of[i + 1] || position[i] == SIZE_MAX || position[i + 1] == SIZE_MAX)
      continue;
    gap += std::abs(static_cast<double>(position[i]) - static_cast<double>(position[i + 1]));
    ++gaps;
  }
  f.neighbour_gap = gaps > 0 ? gap / static_cast<double>(gaps) : 0;
  // Per worker: shards open at once (first read .. last read, in the worker's own stream).
  std::vector<std::size_t> first(shard_bytes.size());
  std::vector<std::size_t> last(shard_bytes.size());
  double batch_shards = 0;
  for (std::size_t r = 0; r < world; ++r) {
    for (std::size_t w = 0; w < a.workers; ++w) {
      std::fill(first.begin(), first.end(), SIZE_MAX);
      std::size_t t = 0;
      for (std::size_t k = w; k < batches; k += a.workers) {
        batch_shards += static_cast<double>(distinct([&](auto&& use) {
          for (const std::size_t i : ranks[r][k]) use(i);
        }));
        for (const std::size_t i : ranks[r][k]) {
          const std::size_t s = shard_of[i];
          if (first[s] == SIZE_MAX) first[s] = t;
          last[s] = t;
          ++t;
        }
      }
      std::vector<long> delta(t + 1, 0);
      for (std::size_t s = 0; s < first.size(); ++s) {
        if (first[s] == SIZE_MAX) continue;
        ++delta[first[s]];
        --delta[last[s] + 1];
      }
      long open = 0;
      long most = 0;
      for (const long d : delta) most = std::max(most, open += d);
      f.worker_open_max = std::max(f.worker_open_max, static_cast<std::size_t>(most));
      f.worker_open_mean += static_cast<double>(most);
    }
  }
  f.worker_open_mean /= static_cast<double>(world * a.workers);
  f.shards_per_batch = batch_shards / static_cast<double>(world * batches);
  // One cache per node; its ranks' batches read in step order.
  double fetched = 0;
  for (std::size_t node = 0; node < layout.nodes; ++node) {
    LruCache cache(a.cache * corpus_bytes);
    for (std::size_t k = 0; k < batches; ++k) {
      for (std::size_t r = node * layout.ranks_per_node; r < (node + 1) * layout.ranks_per_node;
           ++r) {
        for (const std::size_t i : ranks[r][k])
          fetched += cache.touch(shard_of[i], shard_bytes[shard_of[i]]);
      }
    }
  }
  f.corpus_reads = fetched / corpus_bytes;
  return f;
}

void simulate(const Args& a) {
  stoker::Generator rng(2024);
  std::vector<std::uint64_t> sizes(a.shards);
  for (std::uint64_t& s : sizes) {
    const std::uint64_t spread = std::max<std::uint64_t>(a.shard_samples / 10, 0);
    s = a.shard_samples - spread + (spread > 0 ? rng.below(2 * spread + 1) : 0);
  }
  std::vector<std::size_t> shard_of;
  std::vector<double> shard_bytes;
  const double bytes_per_sample = a.shard_mb * 1e6 / static_cast<double>(a.shard_samples);
  double corpus_bytes = 0;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    shard_of.insert(shard_of.end(), sizes[s], s);
    shard_bytes.push_back(static_cast<double>(sizes[s]) * bytes_per_sample);
    corpus_bytes += shard_bytes.back();
  }
  const std::size_t n = shard_of.size();
  std::printf(
      "Simulated: %zu shards, %zu samples (%.0f MB a shard, corpus %.1f GB); global batch %zu; "
      "%zu workers a rank; LRU cache of whole shards, %.0f%% of the corpus a node; epoch 0\n\n",
      a.shards, n, a.shard_mb, corpus_bytes / 1e9, a.global_batch, a.workers, a.cache * 100);
  const Layout layouts[] = {{"1 node x 1 rank, P=1", 1, 1, 1},
                            {"1 node x 8 ranks, P=8", 1, 8, 8},
                            {"2 nodes x 4 ranks, P=2", 2, 4, 2},
                            {"1 node x 1 rank, P=8", 1, 1, 8}};
  std::printf(
      "| layout | order | shards / 100 batches | worker: open shards (max, mean) | "
      "worker: shards / batch | corpus read / epoch | shards / global batch | "
      "same-shard pairs / global batch | neighbour gap (samples) |\n");
  std::printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Layout& layout : layouts) {
    const std::size_t world = layout.nodes * layout.ranks_per_node;
    // The global permutation: DistributedSampler's shards in batches of G / world.
    {
      RankBatches ranks(world);
      for (std::size_t r = 0; r < world; ++r) {
        stoker::DistributedSampler::Options o;
        o.seed = 1;
        o.drop_last = true;
        auto sampler = std::make_shared<stoker::DistributedSampler>(n, world, r, o);
        ranks[r] = stoker::BatchSampler(sampler, a.global_batch / world, true).batches(0);
      }
      const std::size_t keep = std::min_element(ranks.begin(), ranks.end(), [](auto& x, auto& y) {
                                 return x.size() < y.size();
                               })->size();
      for (auto& r : ranks) r.resize(keep);
      const Figures f = measure(ranks, layout, shard_of, shard_bytes, corpus_bytes, a);
      std::printf(
          "| %s | global permutation | %.0f | %zu, %.1f | %.1f | %.1fx | %.1f | %.4f | %.0f |\n",
          layout.name, f.shards_per_100, f.worker_open_max, f.worker_open_mean, f.shards_per_batch,
          f.corpus_reads, f.global_mix, f.same_shard_pairs, f.neighbour_gap);
    }
    // Every block size interleaved (the default), and the default block permuted.
    const std::pair<std::uint64_t, bool> variants[] = {{1, false}, {2, false}, {4, false},
                                                       {4, true},  {8, false}, {16, false}};
    for (const auto& [block_shards, permute] : variants) {
      stoker::ShardShuffle::Options o;
      o.global_batch_size = a.global_batch;
      o.canonical_partitions = layout.partitions;
      o.shuffle_block = block_shards * a.shard_samples;
      if (permute) o.block_order = stoker::ShardShuffle::BlockOrder::kPermute;
      o.seed = 1;
      RankBatches ranks(world);
      for (std::size_t r = 0; r < world; ++r) {
        ranks[r] = stoker::ShardShuffle(sizes, world, r, o).batches(0);
      }
      const Figures f = measure(ranks, layout, shard_of, shard_bytes, corpus_bytes, a);
      const bool is_default = block_shards == stoker::ShardShuffle::kDefaultBlockShards && !permute;
      std::printf(
          "| %s | shard shuffle, block %llu shard%s%s%s | %.0f | %zu, %.1f | %.1f | %.2fx | %.1f | "
          "%.4f | %.1f |\n",
          layout.name, static_cast<unsigned long long>(block_shards), block_shards == 1 ? "" : "s",
          is_default ? " (default)" : "", permute ? ", permuted" : "", f.shards_per_100,
          f.worker_open_max, f.worker_open_mean, f.shards_per_batch, f.corpus_reads, f.global_mix,
          f.same_shard_pairs, f.neighbour_gap);
    }
  }
  std::printf("\n");
}

// ---------------------------------------------------------------------------------------------
// Part 2: throughput on local shards

std::vector<std::string> write_shards(const Args& a) {
  std::filesystem::remove_all(a.scratch);
  std::filesystem::create_directories(a.scratch);
  stoker::WebDatasetWriterOptions wo;
  wo.pattern = a.scratch + "/part-%04d.tar";
  wo.max_samples_per_shard = a.tp_samples;
  stoker::WebDatasetWriter writer(wo);
  std::vector<std::byte> payload(a.sample_kib * 1024);
  stoker::Generator rng(5);
  for (std::size_t i = 0; i < a.tp_shards * a.tp_samples; ++i) {
    for (std::size_t b = 0; b < payload.size(); b += 8) {
      const std::uint64_t v = rng.next();
      std::memcpy(payload.data() + b, &v, std::min<std::size_t>(8, payload.size() - b));
    }
    const std::string cls = std::to_string(i % 1000);
    const std::pair<std::string, std::span<const std::byte>> fields[] = {
        {"bin", payload}, {"cls", std::as_bytes(std::span<const char>(cls.data(), cls.size()))}};
    writer.write("s" + std::to_string(i), fields);
  }
  return writer.close();
}

void drop_pages(const std::vector<std::string>& shards) {
  for (const std::string& path : shards) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

enum class Order { kSequential, kShardShuffle, kShardPermute, kPermutation };
constexpr std::size_t kOrders = 4;
constexpr const char* kOrderName[] = {"sequential", "shard shuffle (defaults: interleaved blocks)",
                                      "shard shuffle, permuted blocks", "global permutation"};

struct Epoch {
  double rate = 0;          // samples/s, wall clock
  double cpu_ms_per_k = 0;  // CPU time (main process and its reaped workers) per 1000 samples
};

double cpu_seconds() {
  double total = 0;
  for (const int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage u{};
    ::getrusage(who, &u);
    total += static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
             static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  }
  return total;
}

Epoch run_epoch(const stoker::WebDatasetShards& ds, Order order, const Args& a) {
  stoker::LoaderOptions opt;
  opt.num_workers = a.tp_workers;
  if (order == Order::kShardShuffle || order == Order::kShardPermute) {
    stoker::ShardShuffle::Options o;
    o.global_batch_size = 64;
    o.seed = 3;
    if (order == Order::kShardPermute) o.block_order = stoker::ShardShuffle::BlockOrder::kPermute;
    opt.batch_sampler = std::make_shared<stoker::ShardShuffle>(ds, 1, 0, o);
  } else {
    opt.batch_size = 64;
    opt.shuffle = order == Order::kPermutation;
    opt.seed = 3;
  }
  const double cpu_before = cpu_seconds();
  std::size_t samples = 0;
  double seconds = 0;
  {
    stoker::DataLoader loader(ds, opt);
    const auto start = Clock::now();
    for (const stoker::Batch& batch : loader) samples += batch.size();
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }  // the workers are reaped here, so RUSAGE_CHILDREN holds their time
  Epoch e;
  e.rate = static_cast<double>(samples) / seconds;
  e.cpu_ms_per_k = (cpu_seconds() - cpu_before) * 1e6 / static_cast<double>(samples);
  return e;
}

void throughput(const Args& a) {
  const std::vector<std::string> shards = write_shards(a);
  stoker::WebDatasetShards ds(shards);
  std::printf(
      "Measured: DataLoader over %zu local tar shards x %zu samples of %zu KiB (%.0f MiB), "
      "batch 64, %d workers, %zu interleaved rounds, each round every order once (rotated). "
      "Medians; 'against sequential' is the median of each round's ratio to that round's "
      "sequential run (min .. max over the rounds)\n\n",
      a.tp_shards, a.tp_samples, a.sample_kib,
      static_cast<double>(a.tp_shards * a.tp_samples * a.sample_kib) / 1024, a.tp_workers,
      a.rounds);
  std::printf(
      "| page cache | order | samples/s | against sequential | CPU ms / 1000 samples |\n"
      "| --- | --- | ---: | ---: | ---: |\n");
  for (const bool cold : {false, true}) {
    std::vector<std::vector<Epoch>> runs(kOrders);  // [order][round]
    for (std::size_t round = 0; round < a.rounds + (cold ? 0 : 1); ++round) {
      for (std::size_t j = 0; j < kOrders; ++j) {
        const auto order = static_cast<Order>((round + j) % kOrders);  // rotated each round
        if (cold) drop_pages(shards);
        const Epoch e = run_epoch(ds, order, a);
        if (cold || round > 0) runs[static_cast<std::size_t>(order)].push_back(e);  // warm-up
      }
    }
    for (std::size_t j = 0; j < kOrders; ++j) {
      std::vector<double> rate;
      std::vector<double> ratio;
      std::vector<double> cpu;
      for (std::size_t r = 0; r < runs[j].size(); ++r) {
        rate.push_back(runs[j][r].rate);
        ratio.push_back(runs[j][r].rate / runs[0][r].rate);
        cpu.push_back(runs[j][r].cpu_ms_per_k);
      }
      std::printf("| %s | %s | %.0f | %.3f (%.3f .. %.3f) | %.1f |\n",
                  cold ? "cold (fadvise)" : "warm", kOrderName[j], median(rate), median(ratio),
                  *std::min_element(ratio.begin(), ratio.end()),
                  *std::max_element(ratio.begin(), ratio.end()), median(cpu));
    }
  }
  std::printf("\n");
  std::filesystem::remove_all(a.scratch);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  std::string command = "bench/shard_order";
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  std::printf("%s\n\n", command.c_str());
  try {
    if (a.simulate) simulate(a);
    if (a.throughput) throughput(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shard_order: %s\n", e.what());
    return 1;
  }
  return 0;
}
