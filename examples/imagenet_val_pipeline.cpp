// The ImageNet validation recipe as a stoker::vision::Pipeline: Resize(256) -> CenterCrop(224)
// -> Normalize(ImageNet mean, std), float32 [B, 3, 224, 224], in order, no randomness: the
// pixels of torchvision's Resize(256) + CenterCrop(224) + ToTensor() + Normalize(). The images
// here are not files but encoded bytes held in memory (as a cache or a record shard holds them),
// loaded through an ImageListDataset of (bytes, label); the same pipeline also runs directly
// on bytes, as the last lines show.
//
//   imagenet_val_pipeline [--images N] [--workers N] [--uint8]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <stoker/stoker.hpp>

#include "jpeg_in_memory.hpp"

namespace {

namespace vision = stoker::vision;

[[noreturn]] void usage(const char* problem, int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "%s%simagenet_val_pipeline [--images N] [--workers N] [--uint8]\n  --images N    "
               "generated JPEGs to validate on (default 10)\n  --workers N   worker processes "
               "(default 2)\n  --uint8       uint8 CHW output (PILToTensor) instead of normalised "
               "float32\n",
               problem, *problem != '\0' ? "\nusage: " : "usage: ");
  std::exit(code);
}

// A w x h JPEG in memory: a gradient whose blue channel encodes i.
std::vector<std::uint8_t> jpeg_bytes(int i, int w, int h) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w * h * 3));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      std::uint8_t* p = &rgb[static_cast<std::size_t>((y * w + x) * 3)];
      p[0] = static_cast<std::uint8_t>(x * 255 / w);
      p[1] = static_cast<std::uint8_t>(y * 255 / h);
      p[2] = static_cast<std::uint8_t>(20 * i);
    }
  }
  return example::encode_jpeg(rgb, w, h);
}

}  // namespace

int main(int argc, char** argv) {
  int images = 10;
  int workers = 2;
  bool uint8 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> int {
      if (i + 1 >= argc) usage((a + " needs a value").c_str(), 2);
      return std::atoi(argv[++i]);
    };
    if (a == "--help" || a == "-h") {
      usage("", 0);
    } else if (a == "--images") {
      images = value();
    } else if (a == "--workers") {
      workers = value();
    } else if (a == "--uint8") {
      uint8 = true;
    } else {
      usage(("unknown flag " + a).c_str(), 2);
    }
  }
  if (images < 1) usage("--images must be at least 1", 2);
  try {
    // transforms.Compose([Resize(256), CenterCrop(224), ToTensor(), Normalize(mean, std)]);
    // with --uint8: Compose([Resize(256), CenterCrop(224), PILToTensor()]).
    vision::Pipeline val{vision::Resize(256), vision::CenterCrop(224)};
    if (!uint8) val.then(vision::Normalize(vision::kImageNetMean, vision::kImageNetStd));
    std::vector<stoker::ImageListDataset::Entry> entries;
    for (int i = 0; i < images; ++i) {
      entries.push_back(stoker::ImageListDataset::encoded(jpeg_bytes(i, 320 + 16 * i, 300), i % 5,
                                                          "val/" + std::to_string(i) + ".jpg"));
    }
    const stoker::ImageListDataset dataset(entries, val);
    std::printf("pipeline: %s\n", val.to_string().c_str());
    stoker::LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = workers;  // in order, no shuffle: validation
    stoker::DataLoader loader(dataset, opt);
    std::size_t seen = 0;
    for (const stoker::Batch& batch : loader) {
      std::printf("batch %llu: image %s %s, labels", static_cast<unsigned long long>(batch.index()),
                  batch["image"].shape().to_string().c_str(),
                  std::string(stoker::dtype_name(batch["image"].dtype())).c_str());
      for (std::size_t r = 0; r < batch.size(); ++r) {
        std::printf(" %lld", static_cast<long long>(batch["label"].data<std::int64_t>()[r]));
      }
      std::printf("\n");
      seen += batch.size();
    }
    // The pipeline on bytes directly (no dataset): a fixed pipeline runs in any process.
    const stoker::Tensor one = val(entries[0].bytes, entries[0].path);
    std::printf("directly: %s %s\n", one.shape().to_string().c_str(),
                std::string(stoker::dtype_name(one.dtype())).c_str());
    return seen == static_cast<std::size_t>(images) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "imagenet_val_pipeline: %s\n", e.what());
    return 1;
  }
}
