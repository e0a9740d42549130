// The augmentation recipes of torchvision's reference scripts and of self-supervised training as
// stoker::vision::Pipelines, each with torchvision's pixels in exact mode:
//   - "trivialaugment": RandomResizedCrop(176) -> RandomHorizontalFlip() ->
//     TrivialAugmentWide(bilinear) -> Normalize -> RandomErasing(p=0.1) (torchvision's
//     classification recipe for its v2 weights);
//   - "randaugment": RandomResizedCrop(224) -> RandomHorizontalFlip() -> RandAugment(2, 9) ->
//     Normalize -> RandomErasing(p=0.25, value=random);
//   - "simclr": RandomResizedCrop(96) -> RandomHorizontalFlip() -> ColorJitter(0.4, 0.4, 0.4,
//     0.1) -> RandomGrayscale(0.2) -> GaussianBlur(9, sigma in (0.1, 2.0)) -> Normalize;
//   - "geometry": RandomRotation(15, bilinear) -> RandomVerticalFlip() -> CenterCrop(128) ->
//     Grayscale() -> Normalize(0.5, 0.25): a one-channel [B, 1, 128, 128] batch.
// Every random parameter comes from sample_rng(), so the batches are the same for any
// num_workers; the last lines replay one sample's draws (Pipeline::run with its Trace).
//
//   augment_recipes [--recipe NAME] [--images N] [--workers N]
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <stoker/stoker.hpp>

#include "cli.hpp"
#include "jpeg_in_memory.hpp"

namespace {

namespace vision = stoker::vision;

// A w x h JPEG in memory: a gradient with a checkerboard, so that rotations and blur show.
std::vector<std::uint8_t> jpeg_bytes(int i, int w, int h) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w * h * 3));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      std::uint8_t* p = &rgb[static_cast<std::size_t>((y * w + x) * 3)];
      const bool dark = ((x / 16) + (y / 16)) % 2 == 0;
      p[0] = static_cast<std::uint8_t>(x * 255 / w);
      p[1] = static_cast<std::uint8_t>(dark ? 40 : 200);
      p[2] = static_cast<std::uint8_t>(25 * i);
    }
  }
  return example::encode_jpeg(rgb, w, h);
}

vision::Pipeline recipe(const std::string& name) {
  using namespace vision;
  if (name == "trivialaugment") {
    return Pipeline{RandomResizedCrop(176), RandomHorizontalFlip(),
                    TrivialAugmentWide(31, Interpolation::kBilinear),
                    Normalize(kImageNetMean, kImageNetStd), RandomErasing(0.1)};
  }
  if (name == "randaugment") {
    return Pipeline{RandomResizedCrop(224), RandomHorizontalFlip(), RandAugment(2, 9),
                    Normalize(kImageNetMean, kImageNetStd),
                    RandomErasing(0.25, {0.02, 0.33}, {0.3, 3.3}, RandomErasing::kRandom)};
  }
  if (name == "simclr") {
    return Pipeline{RandomResizedCrop(96),           RandomHorizontalFlip(),
                    ColorJitter(0.4, 0.4, 0.4, 0.1), RandomGrayscale(0.2),
                    GaussianBlur(9, {0.1, 2.0}),     Normalize(kImageNetMean, kImageNetStd)};
  }
  return Pipeline{RandomRotation(15.0, Interpolation::kBilinear), RandomVerticalFlip(),
                  CenterCrop(128), Grayscale(), Normalize(0.5f, 0.25f)};
}

}  // namespace

constexpr const char* kUsage =
    "usage: augment_recipes [--recipe NAME] [--images N] [--workers N]\n"
    "  --recipe NAME  trivialaugment, randaugment, simclr, geometry or all (default all)\n"
    "  --images N     generated JPEGs (default 8)\n"
    "  --workers N    worker processes (default 2)";

int main(int argc, char** argv) {
  example::Cli cli(argc, argv, kUsage);
  const std::string which = cli.text("--recipe", "all");
  const auto images = static_cast<int>(cli.number("--images", 8, 1, 10000));
  const auto workers = static_cast<int>(cli.number("--workers", 2, 0, 64));
  cli.done();
  std::vector<std::string> names{"trivialaugment", "randaugment", "simclr", "geometry"};
  if (which != "all") {
    if (std::find(names.begin(), names.end(), which) == names.end()) {
      std::fprintf(stderr,
                   "augment_recipes: --recipe %s: not one of trivialaugment, randaugment, "
                   "simclr, geometry, all\n",
                   which.c_str());
      return 2;
    }
    names = {which};
  }
  try {
    std::vector<stoker::ImageListDataset::Entry> entries;
    for (int i = 0; i < images; ++i) {
      entries.push_back(stoker::ImageListDataset::encoded(jpeg_bytes(i, 300 + 8 * i, 260), i % 4,
                                                          "img" + std::to_string(i) + ".jpg"));
    }
    for (const std::string& name : names) {
      const vision::Pipeline pipeline = recipe(name);
      std::printf("%s: %s\n", name.c_str(), pipeline.to_string().c_str());
      const stoker::ImageListDataset dataset(entries, pipeline);
      stoker::LoaderOptions opt;
      opt.batch_size = 4;
      opt.num_workers = workers;
      opt.shuffle = true;
      opt.seed = 42;
      stoker::DataLoader loader(dataset, opt);
      for (std::size_t epoch = 0; epoch < 2; ++epoch) {
        loader.set_epoch(epoch);
        for (const stoker::Batch& batch : loader) {
          std::printf("  epoch %zu batch %llu: image %s %s\n", epoch,
                      static_cast<unsigned long long>(batch.index()),
                      batch["image"].shape().to_string().c_str(),
                      std::string(stoker::dtype_name(batch["image"].dtype())).c_str());
        }
      }
      // One sample's draws, replayable with torchvision's functional API.
      stoker::Generator rng(7);
      vision::Trace trace;
      const stoker::Tensor one = pipeline.run(entries[0].bytes, rng, entries[0].path, &trace);
      std::printf("  replay: %s;", one.shape().to_string().c_str());
      for (const auto& steps : trace.augments) {
        for (const vision::AugmentStep& s : steps) {
          std::printf(" %s(%.4g)", std::string(vision::augment_op_name(s.op)).c_str(), s.magnitude);
        }
      }
      for (double a : trace.angles) std::printf(" rotate(%.3f)", a);
      for (double s : trace.sigmas) std::printf(" blur(sigma %.3f)", s);
      for (const auto& e : trace.erasures) {
        if (e.erase)
          std::printf(" erase(%d, %d, %d x %d)", e.box.x, e.box.y, e.box.width, e.box.height);
      }
      std::printf("\n");
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "augment_recipes: %s\n", e.what());
    return 1;
  }
}
