// ImageFolderDataset: images laid out as root/<class>/**/<file> with extension .jpg, .jpeg,
// .png or .webp in any case (torchvision's ImageFolder), each decoded and transformed by a
// vision::Pipeline (default: Resize(256) -> CenterCrop(224), uint8 CHW, exact mode: the pixels
// of torchvision's Resize(256) + CenterCrop(224) + PILToTensor). Sample: "image" (the
// pipeline's tensor) and "label" int64, the index of its class in classes() (sorted by name).
//
// stoker builds it when libjpeg-turbo, libpng and libwebp are found (Debian:
// libjpeg62-turbo-dev, libpng-dev, libwebp-dev); without them the constructor throws
// stoker::Error saying so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "stoker/sample.hpp"
#include "stoker/vision/pipeline.hpp"

namespace stoker {

// The pipeline of the first versions, as a preset: Resize(resize) -> CenterCrop(crop) ->
// [RandomHorizontalFlip()], uint8 CHW; fast_jpeg_scaling selects vision::Mode::kFast.
struct ImageFolderOptions {
  std::int64_t resize = 256;       // the shorter side after resizing (bilinear)
  std::int64_t crop = 224;         // the side of the square center crop; <= resize
  bool random_flip = false;        // mirror left-right with probability 1/2
  bool fast_jpeg_scaling = false;  // vision::Mode::kFast (DCT-scaled JPEG decoding)
};

class ImageFolderDataset {
 public:
  using Options [[deprecated("ImageFolderOptions is now stoker::ImageFolderOptions")]] =
      ImageFolderOptions;
  // Throws std::invalid_argument unless 0 < crop <= resize.
  static vision::Pipeline preset(const ImageFolderOptions& options);
  static vision::Pipeline default_pipeline();  // preset(ImageFolderOptions{})

  // Lists the images. Throws stoker::Error when root is not a directory, has no class
  // directories, or a class has no image; std::invalid_argument for bad options.
  explicit ImageFolderDataset(const std::string& root)
      : ImageFolderDataset(root, default_pipeline()) {}
  ImageFolderDataset(const std::string& root, vision::Pipeline pipeline);
  ImageFolderDataset(const std::string& root, const ImageFolderOptions& options)
      : ImageFolderDataset(root, preset(options)) {}

  std::size_t size() const noexcept { return files_.size(); }
  // Inside get() of a loader (either process; random transforms use sample_rng()). Throws
  // stoker::Error naming the file when it cannot be read or decoded.
  Sample get(std::size_t i) const;

  // The samples the loader's memory probe loads (data_loader.hpp): the 4 images with the most
  // pixels among up to 256 spread over the dataset (their headers only), since a larger image
  // needs more decoding memory in each worker. Either process; never throws (an unreadable
  // header counts as the smallest image).
  std::vector<std::size_t> memory_probe_indices() const;

  const std::vector<std::string>& classes() const noexcept { return classes_; }
  // (path, label) of every image, in index order.
  const std::vector<std::pair<std::string, std::int64_t>>& files() const noexcept { return files_; }
  const vision::Pipeline& pipeline() const noexcept { return pipeline_; }
  static bool available() noexcept;  // built with the image codecs

 private:
  vision::Pipeline pipeline_;
  std::vector<std::string> classes_;
  std::vector<std::pair<std::string, std::int64_t>> files_;
};

}  // namespace stoker
