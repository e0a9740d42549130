// vision_pipeline: the per-image cost of stoker::vision on one core, files already in memory,
// beside the cost of decoding them alone (libjpeg-turbo, full size, ISLOW: what any loader pays
// at least). Prints one JSON line per measurement, then a table.
//
//   vision_pipeline --data DIR [--images N] [--repeat R]
//
// Then, for val and train, how far fast mode's pixels are from exact mode's on the same images
// with the same random draws: mean |difference| (levels of 255), share of values identical,
// and PSNR.
//
// DIR: any tree of .jpg/.jpeg/.png/.webp files (bench/compare/gen_data.py makes one). Measured:
// decode (vision::decode, full image), val (Resize(256) -> CenterCrop(224) ->
// RandomHorizontalFlip, uint8 CHW) and train (RandomResizedCrop(224) -> RandomHorizontalFlip),
// each in exact and fast mode. Each figure is the median of R passes over the images, in wall
// time and in the process's CPU time (std::clock: the bench is one thread), which other
// programs on a shared machine disturb less.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "stoker/stoker.hpp"

namespace {

using Clock = std::chrono::steady_clock;
namespace vision = stoker::vision;

[[noreturn]] void usage(const char* problem) {
  std::fprintf(stderr,
               "vision_pipeline: %s\nusage: vision_pipeline --data DIR [--images N] [--repeat R]\n",
               problem);
  std::exit(2);
}

std::vector<std::vector<std::uint8_t>> load(const std::string& dir, std::size_t limit) {
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::recursive_directory_iterator(
           dir, std::filesystem::directory_options::follow_directory_symlink)) {
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    if (e.is_regular_file() &&
        (ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".webp")) {
      paths.push_back(e.path().string());
    }
  }
  std::sort(paths.begin(), paths.end());
  if (paths.size() > limit) paths.resize(limit);
  std::vector<std::vector<std::uint8_t>> files;
  for (const std::string& p : paths) {
    std::ifstream in(p, std::ios::binary);
    files.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return files;
}

struct Cost {
  double wall_us = 0;  // per image
  double cpu_us = 0;
};

template <class F>
Cost median_us_per_image(std::size_t images, int repeat, F&& one) {
  std::vector<double> walls;
  std::vector<double> cpus;
  for (int r = 0; r < repeat + 1; ++r) {  // the first pass warms caches and buffers
    const auto start = Clock::now();
    const std::clock_t cpu_start = std::clock();
    for (std::size_t i = 0; i < images; ++i) one(i);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    const double cpu_us =
        1e6 * static_cast<double>(std::clock() - cpu_start) / static_cast<double>(CLOCKS_PER_SEC);
    if (r > 0) {
      walls.push_back(us / static_cast<double>(images));
      cpus.push_back(cpu_us / static_cast<double>(images));
    }
  }
  std::sort(walls.begin(), walls.end());
  std::sort(cpus.begin(), cpus.end());
  return {walls[walls.size() / 2], cpus[cpus.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  std::string data;
  std::size_t limit = 400;
  int repeat = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") usage("help");
    if (i + 1 >= argc) usage("a flag without its value");
    if (a == "--data") {
      data = argv[++i];
    } else if (a == "--images") {
      limit = std::strtoul(argv[++i], nullptr, 10);
    } else if (a == "--repeat") {
      repeat = std::atoi(argv[++i]);
    } else {
      usage(("unknown flag " + a).c_str());
    }
  }
  if (data.empty()) usage("--data is required");
  if (limit == 0 || repeat < 1) usage("--images and --repeat must be at least 1");
  const auto files = load(data, limit);
  if (files.empty()) usage("no image files under --data");

  const vision::Pipeline val = vision::Pipeline()
                                   .then(vision::Resize(256))
                                   .then(vision::CenterCrop(224))
                                   .then(vision::RandomHorizontalFlip());
  const vision::Pipeline train =
      vision::Pipeline().then(vision::RandomResizedCrop(224)).then(vision::RandomHorizontalFlip());
  struct Row {
    const char* name;
    Cost cost;
  };
  std::vector<Row> rows;
  vision::Image image;
  std::uint64_t checksum = 0;
  rows.push_back(
      {"decode (full size)", median_us_per_image(files.size(), repeat, [&](std::size_t i) {
         vision::decode_into(files[i], {}, image);
         checksum += image.pixels[0];
       })});
  for (const auto& [name, pipeline] :
       {std::pair<const char*, const vision::Pipeline*>{"val", &val}, {"train", &train}}) {
    for (vision::Mode mode : {vision::Mode::kExact, vision::Mode::kFast}) {
      vision::Pipeline p = *pipeline;
      p.mode(mode);
      const Cost us = median_us_per_image(files.size(), repeat, [&](std::size_t i) {
        stoker::Generator rng(i);
        const stoker::Tensor t = p.run(files[i], rng);
        checksum += t.data<std::uint8_t>()[0];
      });
      static std::string label[4];
      static int k = 0;
      label[k] = std::string(name) + (mode == vision::Mode::kExact ? " exact" : " fast");
      rows.push_back({label[k++].c_str(), us});
    }
  }
  for (const Row& r : rows) {
    std::printf(
        "{\"bench\": \"vision_pipeline\", \"what\": \"%s\", \"us_per_image\": %.1f, "
        "\"cpu_us_per_image\": %.1f, \"images\": %zu}\n",
        r.name, r.cost.wall_us, r.cost.cpu_us, files.size());
  }
  std::printf("\n%-22s %12s %12s %14s\n", "", "us / image", "cpu us", "x decode");
  for (const Row& r : rows) {
    std::printf("%-22s %12.1f %12.1f %14.2f\n", r.name, r.cost.wall_us, r.cost.cpu_us,
                r.cost.cpu_us / rows[0].cost.cpu_us);
  }

  // Fast against exact, the same draws (the plan is made from the header, before decoding).
  std::printf("\n%-8s %22s %12s %10s\n", "fast vs", "mean |diff| (levels)", "identical", "PSNR");
  for (const auto& [name, pipeline] :
       {std::pair<const char*, const vision::Pipeline*>{"val", &val}, {"train", &train}}) {
    vision::Pipeline exact = *pipeline;
    vision::Pipeline fast = *pipeline;
    fast.mode(vision::Mode::kFast);
    double abs_sum = 0;
    double square_sum = 0;
    double same = 0;
    double values = 0;
    for (std::size_t i = 0; i < files.size(); ++i) {
      stoker::Generator g1(i);
      stoker::Generator g2(i);
      const stoker::Tensor a = exact.run(files[i], g1);
      const stoker::Tensor b = fast.run(files[i], g2);
      const std::uint8_t* pa = a.data<std::uint8_t>();
      const std::uint8_t* pb = b.data<std::uint8_t>();
      for (std::size_t k = 0; k < a.numel(); ++k) {
        const double d = static_cast<double>(pa[k]) - static_cast<double>(pb[k]);
        abs_sum += std::abs(d);
        square_sum += d * d;
        same += d == 0 ? 1 : 0;
      }
      values += static_cast<double>(a.numel());
    }
    const double mse = square_sum / values;
    const double psnr = mse == 0 ? INFINITY : 10 * std::log10(255.0 * 255.0 / mse);
    std::printf("%-8s %22.3f %11.1f%% %8.1f dB\n", name, abs_sum / values, 100 * same / values,
                psnr);
    // JSON has no infinity: identical outputs have a PSNR of null.
    const std::string psnr_json = std::isinf(psnr) ? "null" : std::to_string(psnr);
    std::printf(
        "{\"bench\": \"vision_modes\", \"pipeline\": \"%s\", \"mean_abs_diff\": %.4f, "
        "\"identical\": %.4f, \"psnr_db\": %s, \"images\": %zu}\n",
        name, abs_sum / values, same / values, psnr_json.c_str(), files.size());
  }
  std::fprintf(stderr, "(checksum %llu)\n", static_cast<unsigned long long>(checksum));
  return 0;
}
