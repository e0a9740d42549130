// ImageFolderDataset: torchvision's ImageFolder layout, root/<class>/<image>. Each image is
// decoded (stoker::vision: libjpeg-turbo, libpng), resized so its shorter side is `resize`
// (torchvision's Resize, Pillow's pixels), center-cropped and, with random_flip, mirrored with
// probability 1/2 drawn from sample_rng(): the Options preset of a vision::Pipeline. Eight
// 64 x 48 images, dark left and bright right, show the flips. Built only with the codecs.
#include <png.h>
#include <turbojpeg.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <stoker/stoker.hpp>

#include "cli.hpp"

namespace {

bool write_image(const std::string& path, std::uint8_t tint) {
  std::vector<std::uint8_t> rgb(64 * 48 * 3);
  for (std::size_t p = 0; p < rgb.size(); ++p) {
    rgb[p] = p % 3 == 2 ? tint : static_cast<std::uint8_t>((p / 3) % 64 < 32 ? 20 : 230);
  }
  if (path.ends_with(".png")) {
    png_image png{};
    png.version = PNG_IMAGE_VERSION;
    png.width = 64;
    png.height = 48;
    png.format = PNG_FORMAT_RGB;
    return png_image_write_to_file(&png, path.c_str(), 0, rgb.data(), 0, nullptr) != 0;
  }
  tjhandle tj = tjInitCompress();
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  const bool ok =
      tjCompress2(tj, rgb.data(), 64, 0, 48, TJPF_RGB, &jpeg, &size, TJSAMP_444, 95, 0) == 0;
  std::ofstream out(path, std::ios::binary);
  if (ok) out.write(reinterpret_cast<char*>(jpeg), static_cast<std::streamsize>(size));
  tjFree(jpeg);
  tjDestroy(tj);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: image_folder\n  ImageFolderDataset over eight generated images, with "
                   "random flips.\n  It takes no arguments.");
  cli.done();
  char dir_template[] = "/tmp/stoker-images-example-XXXXXX";
  const std::string root = mkdtemp(dir_template);
  bool ok = true;
  for (const char* cls : {"cat", "dog"}) {
    std::filesystem::create_directory(root + "/" + cls);
    for (const char* file : {"a.jpg", "b.jpeg", "c.png", "d.png"}) {
      ok = ok && write_image(root + "/" + cls + "/" + file, cls[0] == 'c' ? 40 : 200);
    }
  }
  std::size_t flipped = 0;
  std::uint64_t images = 0;
  try {
    // 64 x 48 -> 43 x 32 (bilinear), then the center 32 x 32, mirrored half of the time.
    const stoker::ImageFolderDataset dataset(root, {.resize = 32, .crop = 32, .random_flip = true});
    stoker::LoaderOptions opt;
    opt.batch_size = 3;
    opt.num_workers = 2;
    opt.shuffle = true;
    stoker::DataLoader loader(dataset, opt);
    for (const stoker::Batch& batch : loader) {
      const std::uint8_t* px = batch["image"].data<std::uint8_t>();  // [B, 3, 32, 32], RGB
      std::string labels;
      for (std::size_t r = 0; r < batch.size(); ++r) {
        const std::int64_t label = batch["label"].data<std::int64_t>()[r];
        ok = ok && label == dataset.files()[batch.indices()[r]].second;
        const std::uint8_t* red = px + r * 3 * 32 * 32 + 16 * 32;  // row 16 of the red plane
        ok = ok && (red[2] < 60) != (red[29] < 60);  // one side dark, the other bright
        flipped += red[2] > red[29] ? 1U : 0U;
        labels += " " + dataset.classes()[static_cast<std::size_t>(label)] +
                  (red[2] > red[29] ? "(flipped)" : "");
      }
      std::printf("batch %llu: image %s, labels%s\n",
                  static_cast<unsigned long long>(batch.index()),
                  batch["image"].shape().to_string().c_str(), labels.c_str());
    }
    images = loader.stats().samples;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "image_folder: %s\n", e.what());
    ok = false;
  }
  std::filesystem::remove_all(root);
  std::printf("%llu images, %zu flipped\n", static_cast<unsigned long long>(images), flipped);
  return ok && images == 8 && flipped > 0 && flipped < images ? 0 : 1;
}
