#include "stoker/image_folder_dataset.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "stoker/errors.hpp"
#include "stoker/random.hpp"
#include "stoker/tensor.hpp"

#include "datasets/image_sample.hpp"
#include "os/posix.hpp"

namespace stoker {
namespace {

bool is_image(const std::filesystem::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".webp";
}

}  // namespace

vision::Pipeline ImageFolderDataset::preset(const ImageFolderOptions& options) {
  if (options.crop <= 0 || options.resize < options.crop || options.resize > (1 << 30)) {
    throw std::invalid_argument(fmt::format(
        "ImageFolderDataset: crop is {} and resize {}; they must satisfy 0 < crop <= resize",
        options.crop, options.resize));
  }
  vision::Pipeline pipeline;
  pipeline.then(vision::Resize(static_cast<int>(options.resize)))
      .then(vision::CenterCrop(static_cast<int>(options.crop)));
  if (options.random_flip) pipeline.then(vision::RandomHorizontalFlip());
  pipeline.mode(options.fast_jpeg_scaling ? vision::Mode::kFast : vision::Mode::kExact);
  return pipeline;
}

vision::Pipeline ImageFolderDataset::default_pipeline() { return preset(ImageFolderOptions{}); }

ImageFolderDataset::ImageFolderDataset(const std::string& root, vision::Pipeline pipeline)
    : pipeline_(std::move(pipeline)) {
  if (!available()) {
    throw Error(
        "ImageFolderDataset: this stoker was built without the image codecs; install "
        "libjpeg62-turbo-dev, libpng-dev and libwebp-dev (Debian) and rebuild");
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    throw Error(fmt::format("ImageFolderDataset: {} is not a directory", root));
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
    if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
  }
  std::sort(classes_.begin(), classes_.end());
  if (classes_.empty()) {
    throw Error(fmt::format(
        "ImageFolderDataset: {} has no class directories; expected root/<class>/<image>", root));
  }
  for (std::size_t label = 0; label < classes_.size(); ++label) {
    std::vector<std::string> images;
    for (const fs::directory_entry& entry :
         fs::recursive_directory_iterator(fs::path(root) / classes_[label],
                                          fs::directory_options::follow_directory_symlink, ec)) {
      if (entry.is_regular_file() && is_image(entry.path()))
        images.push_back(entry.path().string());
    }
    if (images.empty()) {
      throw Error(fmt::format(
          "ImageFolderDataset: class '{}' ({}/{}) has no .jpg, .jpeg, .png or .webp file",
          classes_[label], root, classes_[label]));
    }
    std::sort(images.begin(), images.end());
    for (std::string& path : images) files_.emplace_back(std::move(path), label);
  }
}

#if STOKER_HAS_IMAGE_CODECS

bool ImageFolderDataset::available() noexcept { return true; }

Sample ImageFolderDataset::get(std::size_t i) const {
  if (i >= files_.size()) {
    throw std::out_of_range(
        fmt::format("ImageFolderDataset::get: index {} of {} images", i, files_.size()));
  }
  const auto& [path, label] = files_[i];
  return detail::image_sample(pipeline_, detail::read_image_file(path, "ImageFolderDataset"), path,
                              label);
}

std::vector<std::size_t> ImageFolderDataset::memory_probe_indices() const {
  constexpr std::size_t kCandidates = 256;
  constexpr std::size_t kPicks = 4;
  constexpr std::size_t kHeaderBytes = 64 << 10;  // past a large EXIF block to the frame header
  const std::size_t n = files_.size();
  const std::size_t candidates = std::min(n, kCandidates);
  std::vector<std::pair<std::uint64_t, std::size_t>> sized;  // (pixels, index)
  std::vector<std::uint8_t> header(kHeaderBytes);
  for (std::size_t k = 0; k < candidates; ++k) {
    const std::size_t i = candidates == n ? k : k * (n - 1) / (candidates - 1);
    std::uint64_t pixels = 0;
    const int fd = detail::posix::open_read(files_[i].first.c_str());
    if (fd >= 0) {
      const ssize_t got = detail::posix::read_full(fd, header.data(), header.size());
      detail::posix::close_fd(fd);
      try {
        if (got > 0) {
          const vision::ImageInfo info = vision::read_info(
              std::span<const std::uint8_t>(header.data(), static_cast<std::size_t>(got)),
              files_[i].first);
          pixels = static_cast<std::uint64_t>(info.width) * static_cast<std::uint64_t>(info.height);
        }
      } catch (...) {
      }
    }
    sized.emplace_back(pixels, i);
  }
  const std::size_t picks = std::min(kPicks, sized.size());
  std::partial_sort(sized.begin(), sized.begin() + static_cast<std::ptrdiff_t>(picks), sized.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first; });
  // The largest last: the allocator then keeps its decoding buffers in the heap (it serves a
  // size it has seen freed from there), so the probe's memory, measured after its last sample,
  // holds them as a worker's does, rather than returning them to the system at once.
  std::vector<std::size_t> out;
  for (std::size_t k = picks; k-- > 0;) out.push_back(sized[k].second);
  return out;
}

#else

std::vector<std::size_t> ImageFolderDataset::memory_probe_indices() const { return {}; }

bool ImageFolderDataset::available() noexcept { return false; }

Sample ImageFolderDataset::get(std::size_t) const {
  throw Error("ImageFolderDataset: this stoker was built without the image codecs");
}

#endif

}  // namespace stoker
