// vision::Pipeline inside DataLoaders (worker processes): ImageFolderDataset with .webp and
// upper-case extensions and its output equal to the pipeline on the file's bytes;
// ImageListDataset over paths and over bytes; random training pipelines (the crops and colour
// jitter, and the augmentations: flips, grayscale, blur, rotation, TrivialAugmentWide,
// RandAugment, RandomErasing) whose samples are the same for any num_workers; float32 output;
// a bad entry skipped with on_sample_error = kSkip.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "stoker/stoker.hpp"
#include "support/files.hpp"
#include "support/images.hpp"

using namespace stoker;
namespace fs = std::filesystem;

namespace {

using stoker::test::TempDir;

void write(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::uint8_t> image_bytes(int i) {
  const int w = 260 + 17 * i;
  const int h = 240 + 9 * i;
  const auto rgb = test::photo_pixels(w, h, static_cast<std::uint64_t>(i));
  switch (i % 3) {
    case 0:
      return test::encode_jpeg(rgb, w, h);
    case 1:
      return test::encode_png(rgb, w, h);
    default:
      return test::encode_webp(rgb, w, h);
  }
}

// All batches of an epoch, concatenated: image bytes and labels.
std::pair<std::vector<std::byte>, std::vector<std::int64_t>> epoch(const auto& dataset, int workers,
                                                                   std::size_t epoch_index = 0) {
  LoaderOptions opt;
  opt.batch_size = 3;
  opt.num_workers = workers;
  opt.seed = 7;
  DataLoader loader(dataset, opt);
  loader.set_epoch(epoch_index);
  std::vector<std::byte> images;
  std::vector<std::int64_t> labels;
  for (const Batch& b : loader) {
    const auto bytes = b["image"].bytes();
    images.insert(images.end(), bytes.begin(), bytes.end());
    const std::int64_t* y = b["label"].data<std::int64_t>();
    labels.insert(labels.end(), y, y + b.size());
  }
  return {images, labels};
}

}  // namespace

TEST_CASE("ImageFolderDataset reads .webp and upper-case extensions through its pipeline",
          "[images]") {
  TempDir dir;
  write(dir.path + "/a/0.JPG", image_bytes(0));
  write(dir.path + "/a/1.Png", image_bytes(1));
  write(dir.path + "/b/2.webp", image_bytes(2));
  write(dir.path + "/b/3.WEBP", image_bytes(5));
  const ImageFolderDataset ds(dir.path);
  REQUIRE(ds.size() == 4);
  REQUIRE(ds.pipeline().to_string() == "Resize(256) -> CenterCrop((224, 224)) -> uint8 CHW, exact");
  for (std::size_t i = 0; i < ds.size(); ++i) {
    std::ifstream in(ds.files()[i].first, std::ios::binary);
    const std::vector<std::uint8_t> bytes(std::istreambuf_iterator<char>(in), {});
    const Tensor direct = ds.pipeline()(bytes);
    const Tensor loaded = ds.get(i)["image"];
    REQUIRE(loaded.shape() == Shape({3, 224, 224}));
    REQUIRE(std::equal(direct.bytes().begin(), direct.bytes().end(), loaded.bytes().begin()));
  }
}

TEST_CASE("a random training pipeline gives the same samples for any num_workers", "[images]") {
  std::vector<ImageListDataset::Entry> entries;
  for (int i = 0; i < 9; ++i) entries.push_back(ImageListDataset::encoded(image_bytes(i), i % 4));
  const vision::Pipeline train{vision::RandomResizedCrop(48), vision::RandomHorizontalFlip(),
                               vision::ColorJitter(0.4, 0.4, 0.4, 0.1),
                               vision::Normalize(vision::kImageNetMean, vision::kImageNetStd)};
  const ImageListDataset ds(std::move(entries), train);
  const auto in_process = epoch(ds, 0);
  REQUIRE(in_process.second == std::vector<std::int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 0});
  REQUIRE(in_process.first.size() == 9 * 3 * 48 * 48 * sizeof(float));
  REQUIRE(epoch(ds, 2) == in_process);
  REQUIRE(epoch(ds, 3) == in_process);
  REQUIRE(epoch(ds, 2, 1).first != in_process.first);  // another epoch, other draws
}

TEST_CASE("the augmentations draw from sample_rng(): the same for any num_workers, per epoch",
          "[images]") {
  std::vector<ImageListDataset::Entry> entries;
  for (int i = 0; i < 9; ++i) entries.push_back(ImageListDataset::encoded(image_bytes(i), i));
  const vision::Pipeline train{
      vision::RandomResizedCrop(40),
      vision::RandomVerticalFlip(),
      vision::RandomGrayscale(0.3),
      vision::GaussianBlur(3),
      vision::RandomRotation(15.0, vision::Interpolation::kBilinear),
      vision::TrivialAugmentWide(),
      vision::RandAugment(),
      vision::Normalize(vision::kImageNetMean, vision::kImageNetStd),
      vision::RandomErasing(0.5, {0.02, 0.33}, {0.3, 3.3}, vision::RandomErasing::kRandom)};
  const ImageListDataset ds(std::move(entries), train);
  const auto in_process = epoch(ds, 0);
  REQUIRE(in_process.first.size() == 9 * 3 * 40 * 40 * sizeof(float));
  REQUIRE(epoch(ds, 2) == in_process);
  REQUIRE(epoch(ds, 3) == in_process);
  const auto next = epoch(ds, 2, 1);
  REQUIRE(next.first != in_process.first);  // another epoch, other draws
  REQUIRE(epoch(ds, 0, 1) == next);
  // Each sample's draws are its own: the seed of sample i, epoch e is (seed, e, i), so running
  // the pipeline with that generator outside the loader gives the loader's sample.
  Generator rng = Generator::from({7, 0, 4});
  const Tensor alone = train.run(image_bytes(4), rng);
  const auto bytes = alone.bytes();
  REQUIRE(std::equal(bytes.begin(), bytes.end(),
                     in_process.first.begin() + static_cast<std::ptrdiff_t>(4 * bytes.size())));
}

TEST_CASE("ImageListDataset over paths and bytes, a bad entry skipped with kSkip", "[images]") {
  TempDir dir;
  std::vector<ImageListDataset::Entry> entries;
  for (int i = 0; i < 4; ++i) {
    const std::string path = dir.path + "/img" + std::to_string(i) + (i % 3 == 1 ? ".png" : ".jpg");
    write(path, image_bytes(i));
    entries.push_back(ImageListDataset::file(path, 10 + i));
  }
  auto broken = image_bytes(3);
  broken.resize(broken.size() / 3);
  entries.push_back(ImageListDataset::encoded(broken, 99, "record 17"));
  entries.push_back(ImageListDataset::file(dir.path + "/missing.jpg", 98));
  const ImageListDataset ds(std::move(entries),
                            vision::Pipeline{vision::Resize(64), vision::CenterCrop(64)});
  REQUIRE_THROWS_WITH(ds.get(4), Catch::Contains("cannot decode record 17 (entry 4)"));
  REQUIRE_THROWS_WITH(ds.get(5), Catch::Contains("cannot open " + dir.path + "/missing.jpg"));
  REQUIRE_THROWS_AS(ImageListDataset(std::vector<ImageListDataset::Entry>{{}}),
                    std::invalid_argument);
  LoaderOptions opt;
  opt.batch_size = 2;
  opt.num_workers = 2;
  opt.on_sample_error = OnSampleError::kSkip;
  DataLoader loader(ds, opt);
  std::vector<std::int64_t> labels;
  for (const Batch& b : loader) {
    const std::int64_t* y = b["label"].data<std::int64_t>();
    labels.insert(labels.end(), y, y + b.size());
  }
  REQUIRE(labels == std::vector<std::int64_t>{10, 11, 12, 13});
  REQUIRE(loader.stats().skipped_samples == 2);
}
