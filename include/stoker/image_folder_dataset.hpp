// ImageFolderDataset: images laid out as root/<class>/<file>.jpg|.jpeg|.png (torchvision's
// ImageFolder), decoded with libturbojpeg and libpng, resized so the shorter side is `resize`,
// center-cropped to crop x crop, optionally flipped at random (from sample_rng(), so the same
// for any num_workers). Sample: "image" uint8 [3, crop, crop] (RGB, channels first) and "label"
// int64, the index of its class in classes() (sorted by name).
//
// stoker builds it when libturbojpeg and libpng are found (Debian: libturbojpeg0-dev,
// libpng-dev); without them the constructor throws stoker::Error saying so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "stoker/sample.hpp"

namespace stoker {

class ImageFolderDataset {
 public:
  struct Options {
    std::int64_t resize = 256;  // the shorter side after resizing (bilinear)
    std::int64_t crop = 224;    // the side of the square center crop; <= resize
    bool random_flip = false;   // mirror left-right with probability 1/2
    // JPEGs are decoded straight to the smallest DCT scale (1/8 .. 1) whose shorter side is
    // still >= resize: much less work for large photos, the way torchvision's PIL draft mode
    // is used. false decodes at full size first.
    bool fast_jpeg_scaling = true;
  };

  // Lists the images. Throws stoker::Error when root is not a directory, has no class
  // directories, or a class has no image; std::invalid_argument for bad options.
  explicit ImageFolderDataset(const std::string& root) : ImageFolderDataset(root, Options{}) {}
  ImageFolderDataset(const std::string& root, Options options);

  std::size_t size() const noexcept { return files_.size(); }
  // Either process. Throws stoker::Error naming the file when it cannot be read or decoded.
  Sample get(std::size_t i) const;

  const std::vector<std::string>& classes() const noexcept { return classes_; }
  // (path, label) of every image, in index order.
  const std::vector<std::pair<std::string, std::int64_t>>& files() const noexcept { return files_; }
  static bool available() noexcept;  // built with libturbojpeg and libpng

 private:
  Options options_;
  std::vector<std::string> classes_;
  std::vector<std::pair<std::string, std::int64_t>> files_;
};

}  // namespace stoker
