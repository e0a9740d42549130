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

#if STOKER_HAS_IMAGE_CODECS
#include <fcntl.h>
#include <png.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "os/posix.hpp"
#endif

namespace stoker {
namespace {

bool is_image(const std::filesystem::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

}  // namespace

ImageFolderDataset::ImageFolderDataset(const std::string& root, Options options)
    : options_(options) {
  if (!available()) {
    throw Error(
        "ImageFolderDataset: this stoker was built without libturbojpeg and libpng; install "
        "libturbojpeg0-dev and libpng-dev (Debian) and rebuild");
  }
  if (options_.crop <= 0 || options_.resize < options_.crop) {
    throw std::invalid_argument(fmt::format(
        "ImageFolderDataset: crop is {} and resize {}; they must satisfy 0 < crop <= resize",
        options_.crop, options_.resize));
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
         fs::recursive_directory_iterator(fs::path(root) / classes_[label], ec)) {
      if (entry.is_regular_file() && is_image(entry.path()))
        images.push_back(entry.path().string());
    }
    if (images.empty()) {
      throw Error(
          fmt::format("ImageFolderDataset: class '{}' ({}/{}) has no .jpg, .jpeg or .png file",
                      classes_[label], root, classes_[label]));
    }
    std::sort(images.begin(), images.end());
    for (std::string& path : images) files_.emplace_back(std::move(path), label);
  }
}

#if STOKER_HAS_IMAGE_CODECS

namespace {

// Per process (one batch at a time): buffers reused from sample to sample, so decoding does
// not page-fault fresh memory for every image.
struct Scratch {
  std::vector<unsigned char> file;
  std::vector<unsigned char> pixels;  // decoded RGB, height x width x 3
  tjhandle jpeg = nullptr;
  ~Scratch() {
    if (jpeg != nullptr) tjDestroy(jpeg);
  }
};
thread_local Scratch g_scratch;

void read_file(const std::string& path, std::vector<unsigned char>& out) {
  detail::posix::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    throw Error(detail::posix::errno_message(
        fmt::format("ImageFolderDataset: cannot open {}", path), errno));
  }
  out.clear();
  std::size_t used = 0;
  for (;;) {
    if (out.size() < used + 65536) out.resize(used + 65536);
    const ssize_t n = ::read(fd.get(), out.data() + used, out.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw Error(detail::posix::errno_message(
          fmt::format("ImageFolderDataset: cannot read {}", path), errno));
    }
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  out.resize(used);
}

[[noreturn]] void undecodable(const std::string& path, const std::string& why) {
  throw Error(fmt::format(
      "ImageFolderDataset: cannot decode {}: {}; the file is corrupt or not the image its "
      "extension says (skip such files with on_sample_error = kSkip)",
      path, why));
}

// Decodes into scratch.pixels; returns (width, height).
std::pair<int, int> decode_jpeg(const std::string& path, Scratch& s, std::int64_t shorter_target,
                                bool scale) {
  if (s.jpeg == nullptr) s.jpeg = tjInitDecompress();
  if (s.jpeg == nullptr) undecodable(path, "libturbojpeg could not start");
  int width = 0;
  int height = 0;
  int subsampling = 0;
  int colorspace = 0;
  if (tjDecompressHeader3(s.jpeg, s.file.data(), static_cast<unsigned long>(s.file.size()), &width,
                          &height, &subsampling, &colorspace) != 0) {
    undecodable(path, tjGetErrorStr2(s.jpeg));
  }
  if (width <= 0 || height <= 0) undecodable(path, "empty image");
  int out_w = width;
  int out_h = height;
  if (scale) {
    // The smallest DCT scaling whose shorter side still reaches the target.
    int count = 0;
    const tjscalingfactor* factors = tjGetScalingFactors(&count);
    for (int i = 0; i < count; ++i) {
      const int w = TJSCALED(width, factors[i]);
      const int h = TJSCALED(height, factors[i]);
      if (std::min(w, h) >= shorter_target && w * h < out_w * out_h) {
        out_w = w;
        out_h = h;
      }
    }
  }
  s.pixels.resize(static_cast<std::size_t>(out_w) * static_cast<std::size_t>(out_h) * 3);
  if (tjDecompress2(s.jpeg, s.file.data(), static_cast<unsigned long>(s.file.size()),
                    s.pixels.data(), out_w, 0, out_h, TJPF_RGB, TJFLAG_ACCURATEDCT) != 0) {
    // Warnings (a few corrupt bytes, a short file) still give an image; errors do not.
    if (tjGetErrorCode(s.jpeg) != TJERR_WARNING) undecodable(path, tjGetErrorStr2(s.jpeg));
  }
  return {out_w, out_h};
}

std::pair<int, int> decode_png(const std::string& path, Scratch& s) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_memory(&image, s.file.data(), s.file.size()) == 0) {
    undecodable(path, image.message);
  }
  image.format = PNG_FORMAT_RGB;
  s.pixels.resize(PNG_IMAGE_SIZE(image));
  if (png_image_finish_read(&image, nullptr, s.pixels.data(), 0, nullptr) == 0) {
    const std::string why = image.message;
    png_image_free(&image);
    undecodable(path, why);
  }
  return {static_cast<int>(image.width), static_cast<int>(image.height)};
}

bool looks_like_png(const std::vector<unsigned char>& bytes) {
  static constexpr unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return bytes.size() >= 8 && std::equal(kSignature, kSignature + 8, bytes.begin());
}

// Resize (shorter side -> resize, bilinear) and center crop (crop x crop) in one pass, from
// HWC RGB into the CHW output; only the cropped pixels are computed.
void resize_crop(const unsigned char* src, int width, int height, std::int64_t resize,
                 std::int64_t crop, bool flip, std::uint8_t* out) {
  const double scale = static_cast<double>(resize) / std::min(width, height);
  const auto rw = static_cast<std::int64_t>(std::llround(width * scale));
  const auto rh = static_cast<std::int64_t>(std::llround(height * scale));
  const std::int64_t x0 = (rw - crop) / 2;
  const std::int64_t y0 = (rh - crop) / 2;
  const double sx = static_cast<double>(width) / static_cast<double>(rw);
  const double sy = static_cast<double>(height) / static_cast<double>(rh);
  const std::size_t plane = static_cast<std::size_t>(crop * crop);
  std::vector<int> xa(static_cast<std::size_t>(crop));
  std::vector<int> xb(xa.size());
  std::vector<float> xw(xa.size());
  for (std::int64_t x = 0; x < crop; ++x) {
    // Pixel centers: output x maps to source (x + 0.5) * s - 0.5.
    const double fx = std::clamp((static_cast<double>(x0 + x) + 0.5) * sx - 0.5, 0.0,
                                 static_cast<double>(width - 1));
    const auto i = static_cast<std::size_t>(x);
    xa[i] = static_cast<int>(fx);
    xb[i] = std::min(xa[i] + 1, width - 1);
    xw[i] = static_cast<float>(fx - xa[i]);
  }
  for (std::int64_t y = 0; y < crop; ++y) {
    const double fy = std::clamp((static_cast<double>(y0 + y) + 0.5) * sy - 0.5, 0.0,
                                 static_cast<double>(height - 1));
    const int ya = static_cast<int>(fy);
    const int yb = std::min(ya + 1, height - 1);
    const auto wy = static_cast<float>(fy - ya);
    const unsigned char* ra =
        src + static_cast<std::size_t>(ya) * static_cast<std::size_t>(width) * 3;
    const unsigned char* rb =
        src + static_cast<std::size_t>(yb) * static_cast<std::size_t>(width) * 3;
    for (std::int64_t x = 0; x < crop; ++x) {
      const auto i = static_cast<std::size_t>(x);
      const std::size_t ox = static_cast<std::size_t>(flip ? crop - 1 - x : x);
      const std::size_t at = static_cast<std::size_t>(y * crop) + ox;
      for (std::size_t c = 0; c < 3; ++c) {
        const float top = ra[xa[i] * 3 + static_cast<int>(c)] * (1 - xw[i]) +
                          ra[xb[i] * 3 + static_cast<int>(c)] * xw[i];
        const float bottom = rb[xa[i] * 3 + static_cast<int>(c)] * (1 - xw[i]) +
                             rb[xb[i] * 3 + static_cast<int>(c)] * xw[i];
        out[c * plane + at] = static_cast<std::uint8_t>(top * (1 - wy) + bottom * wy + 0.5f);
      }
    }
  }
}

}  // namespace

bool ImageFolderDataset::available() noexcept { return true; }

Sample ImageFolderDataset::get(std::size_t i) const {
  if (i >= files_.size()) {
    throw std::out_of_range(
        fmt::format("ImageFolderDataset::get: index {} of {} images", i, files_.size()));
  }
  const auto& [path, label] = files_[i];
  Scratch& s = g_scratch;
  read_file(path, s.file);
  const auto [width, height] =
      looks_like_png(s.file) ? decode_png(path, s)
                             : decode_jpeg(path, s, options_.resize, options_.fast_jpeg_scaling);
  const bool flip = options_.random_flip && sample_rng().bernoulli(0.5);
  Tensor image = Tensor::empty(DType::kUInt8, {3, options_.crop, options_.crop});
  resize_crop(s.pixels.data(), width, height, options_.resize, options_.crop, flip,
              image.data<std::uint8_t>());
  Sample sample;
  sample.set("image", std::move(image));
  sample.set("label", Tensor::scalar<std::int64_t>(label));
  return sample;
}

#else

bool ImageFolderDataset::available() noexcept { return false; }

Sample ImageFolderDataset::get(std::size_t) const {
  throw Error("ImageFolderDataset: this stoker was built without libturbojpeg and libpng");
}

#endif

}  // namespace stoker
