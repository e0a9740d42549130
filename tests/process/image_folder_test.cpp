// ImageFolderDataset on JPEG and PNG files the test writes (with libturbojpeg and libpng):
// classes and labels, decoding, resize and center crop, random flips that do not depend on
// num_workers, corrupt files named in the error, and the fast preset (JPEG decoding at a
// reduced DCT scale) against the exact default.
#include <png.h>
#include <turbojpeg.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "support/datasets.hpp"
#include "support/files.hpp"

using namespace stoker;
namespace fs = std::filesystem;

namespace {

using stoker::test::TempDir;

using Pixel = std::array<std::uint8_t, 3>;

// An RGB image whose left half is `left` and right half is `right`.
std::vector<std::uint8_t> halves(int width, int height, Pixel left, Pixel right) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(width * height * 3));
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const Pixel& p = x < width / 2 ? left : right;
      for (int c = 0; c < 3; ++c)
        rgb[static_cast<std::size_t>((y * width + x) * 3 + c)] = p[static_cast<std::size_t>(c)];
    }
  }
  return rgb;
}

void write_jpeg(const std::string& path, const std::vector<std::uint8_t>& rgb, int width,
                int height) {
  fs::create_directories(fs::path(path).parent_path());
  tjhandle h = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  REQUIRE(tjCompress2(h, rgb.data(), width, 0, height, TJPF_RGB, &out, &size, TJSAMP_444, 95, 0) ==
          0);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(out), static_cast<std::streamsize>(size));
  tjFree(out);
  tjDestroy(h);
}

void write_png(const std::string& path, const std::vector<std::uint8_t>& rgb, int width,
               int height) {
  fs::create_directories(fs::path(path).parent_path());
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = PNG_FORMAT_RGB;
  REQUIRE(png_image_write_to_file(&image, path.c_str(), 0, rgb.data(), 0, nullptr) != 0);
}

Pixel at(const Tensor& image, std::int64_t x, std::int64_t y) {
  const std::int64_t side = image.size(2);
  const std::uint8_t* p = image.data<std::uint8_t>();
  const auto plane = static_cast<std::size_t>(side * side);
  const auto i = static_cast<std::size_t>(y * side + x);
  return {p[i], p[plane + i], p[2 * plane + i]};
}

bool near(Pixel a, Pixel b, int tolerance = 6) {
  for (std::size_t c = 0; c < 3; ++c) {
    if (std::abs(int(a[c]) - int(b[c])) > tolerance) return false;
  }
  return true;
}

constexpr Pixel kRed{250, 10, 10};
constexpr Pixel kGreen{10, 200, 30};
constexpr Pixel kBlue{20, 40, 230};
constexpr Pixel kWhite{255, 255, 255};

}  // namespace

TEST_CASE("ImageFolderDataset lists classes, decodes, resizes and crops", "[images]") {
  REQUIRE(ImageFolderDataset::available());
  TempDir dir;
  write_jpeg(dir.path + "/cat/a.jpg", halves(400, 300, kRed, kRed), 400, 300);
  write_png(dir.path + "/cat/b.png", halves(256, 256, kGreen, kGreen), 256, 256);
  write_jpeg(dir.path + "/dog/c.jpeg", halves(500, 260, kBlue, kWhite), 500, 260);
  write_png(dir.path + "/dog/sub/d.PNG", halves(300, 600, kWhite, kBlue), 300, 600);
  std::ofstream(dir.path + "/dog/notes.txt") << "not an image";
  const ImageFolderDataset ds(dir.path);
  REQUIRE(ds.classes() == std::vector<std::string>{"cat", "dog"});
  REQUIRE(ds.size() == 4);
  REQUIRE(ds.files()[0].second == 0);
  REQUIRE(ds.files()[3].second == 1);
  const Sample red = ds.get(0);
  REQUIRE(red["image"].shape() == Shape({3, 224, 224}));
  REQUIRE(red["label"].item<std::int64_t>() == 0);
  REQUIRE(near(at(red["image"], 0, 0), kRed));
  REQUIRE(near(at(red["image"], 223, 223), kRed));
  REQUIRE(near(at(ds.get(1)["image"], 100, 100), kGreen, 2));  // PNG: lossless
  // c: 500 x 260 -> 492 x 256, center crop 224: the left of the crop is blue, the right white.
  const Sample halves_sample = ds.get(2);
  REQUIRE(halves_sample["label"].item<std::int64_t>() == 1);
  REQUIRE(near(at(halves_sample["image"], 5, 100), kBlue));
  REQUIRE(near(at(halves_sample["image"], 218, 100), kWhite));
}

TEST_CASE("random flips come from sample_rng(): the same for any num_workers", "[images]") {
  TempDir dir;
  for (int i = 0; i < 12; ++i) {
    write_jpeg(dir.path + "/c/" + std::to_string(10 + i) + ".jpg", halves(256, 256, kBlue, kWhite),
               256, 256);
  }
  ImageFolderOptions iopt;
  iopt.random_flip = true;
  const ImageFolderDataset ds(dir.path, iopt);
  auto flips = [&ds](int workers, std::uint64_t epoch) {
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = workers;
    DataLoader loader(ds, opt);
    loader.set_epoch(epoch);
    std::vector<bool> flipped;
    for (const Batch& batch : loader) {
      for (std::size_t r = 0; r < batch.size(); ++r) {
        const Tensor image = batch["image"].row(r);
        flipped.push_back(near(at(image, 5, 100), kWhite));
        REQUIRE(near(at(image, 5, 100), flipped.back() ? kWhite : kBlue));
      }
    }
    return flipped;
  };
  const std::vector<bool> e0 = flips(0, 0);
  REQUIRE(flips(2, 0) == e0);
  REQUIRE(flips(3, 0) == e0);
  REQUIRE(std::count(e0.begin(), e0.end(), true) > 0);
  REQUIRE(std::count(e0.begin(), e0.end(), false) > 0);
  REQUIRE(flips(2, 1) != e0);
}

TEST_CASE("corrupt images are errors that name the file", "[images]") {
  TempDir dir;
  write_jpeg(dir.path + "/a/good.jpg", halves(240, 240, kRed, kRed), 240, 240);
  std::ofstream(dir.path + "/a/junk.jpg") << "this is not a jpeg at all";
  {
    std::vector<std::uint8_t> rgb = halves(64, 64, kGreen, kGreen);
    write_png(dir.path + "/a/short.png", rgb, 64, 64);
    fs::resize_file(dir.path + "/a/short.png", 60);  // cut inside the image data
  }
  const ImageFolderDataset ds(dir.path);
  REQUIRE(ds.size() == 3);
  REQUIRE_THROWS_WITH(ds.get(1), Catch::Contains("cannot decode " + dir.path + "/a/junk.jpg"));
  REQUIRE_THROWS_WITH(ds.get(2), Catch::Contains("cannot decode " + dir.path + "/a/short.png"));
  LoaderOptions opt;
  opt.batch_size = 1;
  opt.num_workers = 2;
  opt.on_sample_error = OnSampleError::kSkip;
  DataLoader loader(ds, opt);
  std::size_t samples = 0;
  for (const Batch& batch : loader) samples += batch.size();
  REQUIRE(samples == 1);
  REQUIRE(loader.stats().skipped_samples == 2);
}

TEST_CASE("bad roots and options are clear errors", "[images]") {
  TempDir dir;
  REQUIRE_THROWS_WITH(ImageFolderDataset(dir.path + "/none"),
                      Catch::Contains("is not a directory"));
  REQUIRE_THROWS_WITH(ImageFolderDataset(dir.path), Catch::Contains("no class directories"));
  fs::create_directories(dir.path + "/empty");
  REQUIRE_THROWS_WITH(ImageFolderDataset(dir.path), Catch::Contains("class 'empty'"));
  ImageFolderOptions bad;
  bad.crop = 300;
  REQUIRE_THROWS_AS(ImageFolderDataset(dir.path, bad), std::invalid_argument);
}

TEST_CASE("the fast preset (reduced DCT scale) nearly matches the exact default", "[images]") {
  TempDir dir;
  // A large image with a smooth gradient: decoding at 1/4 scale and resizing must give nearly
  // the same 224 x 224 crop as decoding it whole.
  const int w = 2000;
  const int h = 1600;
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w * h * 3));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const auto i = static_cast<std::size_t>((y * w + x) * 3);
      rgb[i] = static_cast<std::uint8_t>(x * 255 / w);
      rgb[i + 1] = static_cast<std::uint8_t>(y * 255 / h);
      rgb[i + 2] = 128;
    }
  }
  write_jpeg(dir.path + "/g/big.jpg", rgb, w, h);
  ImageFolderOptions fast;
  fast.fast_jpeg_scaling = true;
  REQUIRE(ImageFolderDataset(dir.path).pipeline().mode() == vision::Mode::kExact);
  const Tensor a = ImageFolderDataset(dir.path, fast).get(0)["image"].clone();
  const Tensor b = ImageFolderDataset(dir.path).get(0)["image"].clone();
  double diff = 0;
  for (std::size_t i = 0; i < a.nbytes(); ++i) {
    diff += std::abs(int(a.data<std::uint8_t>()[i]) - int(b.data<std::uint8_t>()[i]));
  }
  INFO("mean absolute difference " << diff / static_cast<double>(a.nbytes()));
  REQUIRE(diff > 0);  // 1600 -> 256 decodes at 1/4 scale in fast mode: other pixels...
  REQUIRE(diff / static_cast<double>(a.nbytes()) < 2.0);  // ... but nearly the same
}
