// stoker-tune's command line: the usage text, the checks of each flag's value, and the rules
// about which flags go together.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tune/tune.hpp"

namespace stoker::tune {
namespace {

constexpr const char* kUsage =
    "usage: stoker-tune SOURCE [options]\n"
    "SOURCE (one of):\n"
    "  --workload {tiny,image,cpu}  a built-in synthetic dataset (stoker-bench's)\n"
    "  --npy FILE                   a .npy array, one sample per row\n"
    "  --tokens FILE [--window N]   token windows of N tokens (default 1024) over a shard\n"
    "  --images DIR                 an image folder, DIR/<class>/<file>.jpg|.png\n"
    "options:\n"
    "  --strategy progressive|grid  progressive (default): start at a quarter of the cores, add\n"
    "                               workers until the gain is under 5%, then try batch x1/2, x2;\n"
    "                               grid: every --workers x --batch pair\n"
    "  --workers LIST               grid: worker counts, e.g. 0,1,2,4 (default 0,1,2,4.. to 2x "
    "cores)\n"
    "  --batch LIST                 grid: batch sizes, e.g. 32,64,128; progressive: the start\n"
    "  --seconds S                  timed seconds per setting (default 2)\n"
    "  --warmup S                   warm-up seconds per setting (default 0.5)\n"
    "  --epochs N                   time N whole epochs per setting (after one warm-up epoch)\n"
    "                               instead of --seconds\n"
    "  --max-workers N              progressive: the most workers to try (default 2x cores)\n"
    "  --prefetch LIST              prefetch_factor values, e.g. 0,2,8 (0: adaptive, the\n"
    "                               default); grid: every one; progressive: the first for the\n"
    "                               search, the others at its best setting\n"
    "  --simulate-work-us N         add N us of CPU work per sample, like augmentation\n"
    "  --json                       print JSON on stdout (the table goes to stderr)\n"
    "  --svg FILE                   write a chart of throughput and memory against workers\n";

[[noreturn]] void usage_error(const std::string& problem) {
  std::fprintf(stderr, "stoker-tune: %s\n%s", problem.c_str(), kUsage);
  std::exit(2);
}

long parse_whole(const std::string& flag, const std::string& text, long low, long high) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno != 0 || n < low || n > high) {
    usage_error(
        fmt::format("{} must be a whole number from {} to {}, not '{}'", flag, low, high, text));
  }
  return n;
}

double parse_seconds(const std::string& flag, const std::string& text, double low) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || *end != '\0' || !(v >= low) || v > 3600) {
    usage_error(
        fmt::format("{} must be a number of seconds from {} to 3600, not '{}'", flag, low, text));
  }
  return v;
}

std::vector<long> parse_list(const std::string& flag, const std::string& text, long low,
                             long high) {
  std::vector<long> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) values.push_back(parse_whole(flag, item, low, high));
  if (values.empty() || text.back() == ',') {
    usage_error(
        fmt::format("{} takes a comma-separated list, e.g. {} 1,2,4, not '{}'", flag, flag, text));
  }
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

}  // namespace

Args parse_args(int argc, char** argv) {
  Args a;
  a.command = "stoker-tune";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    a.command += " " + flag;
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(flag + " needs a value");
      a.command += std::string(" ") + argv[i + 1];
      return argv[++i];
    };
    auto set_source = [&](const char* kind) {
      if (!a.source_kind.empty()) {
        usage_error(fmt::format("give one data source, not --{} and {}", a.source_kind, flag));
      }
      a.source_kind = kind;
      a.source = value();
    };
    if (flag == "--workload") {
      set_source("workload");
      if (a.source != "tiny" && a.source != "image" && a.source != "cpu") {
        usage_error(fmt::format("--workload must be tiny, image or cpu, not '{}'", a.source));
      }
    } else if (flag == "--npy") {
      set_source("npy");
    } else if (flag == "--tokens") {
      set_source("tokens");
    } else if (flag == "--images") {
      set_source("images");
    } else if (flag == "--window") {
      a.window = static_cast<std::size_t>(parse_whole(flag, value(), 1, 1L << 24));
    } else if (flag == "--strategy") {
      a.strategy = value();
      if (a.strategy != "progressive" && a.strategy != "grid") {
        usage_error(fmt::format("--strategy must be progressive or grid, not '{}'", a.strategy));
      }
    } else if (flag == "--workers") {
      for (const long w : parse_list(flag, value(), 0, stoker::kMaxWorkers)) {
        a.workers.push_back(static_cast<int>(w));
      }
    } else if (flag == "--batch") {
      for (const long b : parse_list(flag, value(), 1, static_cast<long>(stoker::kMaxBatchSize))) {
        a.batches.push_back(static_cast<std::size_t>(b));
      }
    } else if (flag == "--seconds") {
      a.seconds = parse_seconds(flag, value(), 0.01);
    } else if (flag == "--warmup") {
      a.warmup = parse_seconds(flag, value(), 0);
    } else if (flag == "--epochs") {
      a.epochs = static_cast<int>(parse_whole(flag, value(), 1, 1000));
    } else if (flag == "--max-workers") {
      a.max_workers = static_cast<int>(parse_whole(flag, value(), 1, stoker::kMaxWorkers));
    } else if (flag == "--prefetch") {
      a.prefetches.clear();
      for (const long p :
           parse_list(flag, value(), 0, static_cast<long>(stoker::kMaxPrefetchFactor))) {
        a.prefetches.push_back(static_cast<std::size_t>(p));
      }
    } else if (flag == "--simulate-work-us") {
      a.simulate_work_us = parse_whole(flag, value(), 0, 10'000'000);
    } else if (flag == "--json") {
      a.json = true;
    } else if (flag == "--svg") {
      a.svg = value();
    } else if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else {
      usage_error("unknown option " + flag);
    }
  }
  if (a.source_kind.empty()) {
    usage_error("no data source: give --workload, --npy, --tokens or --images");
  }
  if (a.window && a.source_kind != "tokens") usage_error("--window goes with --tokens");
  if (a.strategy == "progressive") {
    if (!a.workers.empty()) {
      usage_error(
          "--workers lists the grid's worker counts: use --strategy grid, or "
          "--max-workers to bound the progressive search");
    }
    if (a.batches.size() > 1) {
      usage_error(
          "--strategy progressive takes one --batch (the size to start from); give a "
          "list with --strategy grid");
    }
  } else if (a.max_workers != 0) {
    usage_error(
        "--max-workers bounds the progressive search; with --strategy grid, list the "
        "counts with --workers");
  }
  return a;
}

}  // namespace stoker::tune
