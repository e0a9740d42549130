// The ImageNet training recipe of torchvision's reference scripts as a stoker::vision::Pipeline:
// RandomResizedCrop(224) -> RandomHorizontalFlip() -> ColorJitter(0.4, 0.4, 0.4) ->
// Normalize(ImageNet mean, std), float32 [B, 3, 224, 224] batches from an ImageFolderDataset.
// The random parameters come from sample_rng(), so every epoch's augmentation is the same for
// any num_workers. Exact mode (the default) gives torchvision's pixels; --fast decodes JPEGs at
// a reduced DCT scale where the crop keeps its resolution.
//
//   imagenet_train_pipeline [--data DIR] [--epochs N] [--workers N] [--fast] [--bf16]
//
// Without --data it writes a small folder of generated JPEGs and trains on that.
#include <turbojpeg.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <stoker/stoker.hpp>

namespace {

namespace vision = stoker::vision;

[[noreturn]] void usage(const char* problem, int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "%s%simagenet_train_pipeline [--data DIR] [--epochs N] [--workers N] [--fast] "
               "[--bf16]\n  --data DIR    an ImageFolder tree (root/<class>/<image>); default: a "
               "generated one\n  --epochs N    epochs (default 2)\n  --workers N   worker "
               "processes (default 2)\n  --fast        vision::Mode::kFast (DCT-scaled JPEG "
               "decoding)\n  --bf16        bfloat16 output instead of float32\n",
               problem, *problem != '\0' ? "\nusage: " : "usage: ");
  std::exit(code);
}

// A few 640 x 480 JPEGs in two classes, for a run without --data.
std::string make_folder() {
  char dir_template[] = "/tmp/stoker-imagenet-train-XXXXXX";
  const std::string root = mkdtemp(dir_template);
  tjhandle tj = tjInitCompress();
  for (int i = 0; i < 12; ++i) {
    const std::string cls = root + (i % 2 == 0 ? "/n01440764" : "/n01443537");
    std::filesystem::create_directories(cls);
    std::vector<std::uint8_t> rgb(640 * 480 * 3);
    for (std::size_t p = 0; p < rgb.size(); ++p) {
      const std::size_t x = (p / 3) % 640;
      const std::size_t y = p / 3 / 640;
      rgb[p] = static_cast<std::uint8_t>(p % 3 == 0   ? x * 255 / 640
                                         : p % 3 == 1 ? y * 255 / 480
                                                      : static_cast<std::size_t>(40 * i));
    }
    unsigned char* jpeg = nullptr;
    unsigned long size = 0;
    if (tjCompress2(tj, rgb.data(), 640, 0, 480, TJPF_RGB, &jpeg, &size, TJSAMP_420, 90, 0) == 0) {
      std::ofstream(cls + "/" + std::to_string(i) + ".jpg", std::ios::binary)
          .write(reinterpret_cast<char*>(jpeg), static_cast<std::streamsize>(size));
    }
    tjFree(jpeg);
  }
  tjDestroy(tj);
  return root;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data;
  int epochs = 2;
  int workers = 2;
  bool fast = false;
  bool bf16 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage((a + " needs a value").c_str(), 2);
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      usage("", 0);
    } else if (a == "--data") {
      data = value();
    } else if (a == "--epochs") {
      epochs = std::atoi(value().c_str());
    } else if (a == "--workers") {
      workers = std::atoi(value().c_str());
    } else if (a == "--fast") {
      fast = true;
    } else if (a == "--bf16") {
      bf16 = true;
    } else {
      usage(("unknown flag " + a).c_str(), 2);
    }
  }
  const bool generated = data.empty();
  if (generated) data = make_folder();
  int status = 0;
  try {
    // transforms.Compose([RandomResizedCrop(224), RandomHorizontalFlip(),
    //                     ColorJitter(0.4, 0.4, 0.4), ToTensor(), Normalize(mean, std)])
    vision::Pipeline train =
        vision::Pipeline()
            .then(vision::RandomResizedCrop(224))
            .then(vision::RandomHorizontalFlip())
            .then(vision::ColorJitter(0.4, 0.4, 0.4))
            .then(vision::Normalize(vision::kImageNetMean, vision::kImageNetStd));
    if (fast) train.mode(vision::Mode::kFast);
    if (bf16) train.output(stoker::DType::kBFloat16);
    const stoker::ImageFolderDataset dataset(data, train);
    std::printf("%zu images in %zu classes; pipeline: %s\n", dataset.size(),
                dataset.classes().size(), dataset.pipeline().to_string().c_str());
    stoker::LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = workers;
    opt.shuffle = true;
    opt.seed = 2024;
    opt.on_sample_error = stoker::OnSampleError::kSkip;  // a corrupt file is skipped, counted
    stoker::DataLoader loader(dataset, opt);
    for (int epoch = 0; epoch < epochs; ++epoch) {
      loader.set_epoch(static_cast<std::size_t>(epoch));
      std::size_t samples = 0;
      double sum = 0;
      for (const stoker::Batch& batch : loader) {
        const stoker::Tensor& x = batch["image"];  // [B, 3, 224, 224], normalised
        if (x.dtype() == stoker::DType::kFloat32) {
          const float* v = x.data<float>();
          for (std::size_t i = 0; i < x.numel(); ++i) sum += v[i];
        }
        samples += batch.size();
        if (samples == batch.size()) {
          std::printf("epoch %d: first batch %s %s\n", epoch, x.shape().to_string().c_str(),
                      std::string(stoker::dtype_name(x.dtype())).c_str());
        }
      }
      std::printf("epoch %d: %zu samples, %llu skipped", epoch, samples,
                  static_cast<unsigned long long>(loader.stats().skipped_samples));
      if (!bf16)
        std::printf(", mean normalised value %.3f",
                    sum / (static_cast<double>(samples) * 3 * 224 * 224));
      std::printf("\n");
      if (samples + loader.stats().skipped_samples != dataset.size()) status = 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "imagenet_train_pipeline: %s\n", e.what());
    status = 1;
  }
  if (generated) std::filesystem::remove_all(data);
  return status;
}
