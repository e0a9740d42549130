// stoker::vision::decode: the format dispatch and what the three decoders share (error text,
// size limits, region arithmetic, Pillow's RGB -> L). The decoders themselves are
// decode_jpeg.cpp, decode_png.cpp and decode_webp.cpp.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "stoker/vision/image.hpp"
#include "vision/decoders.hpp"

namespace stoker::vision {

ImageFormat sniff_format(std::span<const std::uint8_t> bytes) noexcept {
  static constexpr std::uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) {
    return ImageFormat::kJpeg;
  }
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0) return ImageFormat::kPng;
  if (bytes.size() >= 12 && std::memcmp(bytes.data(), "RIFF", 4) == 0 &&
      std::memcmp(bytes.data() + 8, "WEBP", 4) == 0) {
    return ImageFormat::kWebp;
  }
  return ImageFormat::kUnknown;
}

std::string_view format_name(ImageFormat format) noexcept {
  switch (format) {
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kWebp:
      return "WebP";
    case ImageFormat::kUnknown:
      break;
  }
  return "unknown";
}

void Image::reset(int new_width, int new_height, int new_channels) {
  width = new_width;
  height = new_height;
  channels = new_channels;
  const std::size_t n = static_cast<std::size_t>(width) * static_cast<std::size_t>(height) *
                        static_cast<std::size_t>(channels);
  constexpr std::size_t kSpare = 64;  // the resampler's vector loads may read past the last row
  if (pixels.size() < n + kSpare) pixels.resize(n + kSpare);
  full_width = width;
  full_height = height;
  scale_denom = 1;
  x = 0;
  y = 0;
}

namespace detail {

void throw_undecodable(std::string_view source, std::string_view reason) {
  throw DecodeError(fmt::format(
      "vision::decode: cannot decode {}: {}; replace or remove it, or let a DataLoader skip such "
      "samples (on_sample_error = kSkip)",
      source.empty() ? std::string_view("image bytes") : source, reason));
}

void check_dimensions(std::string_view source, std::int64_t width, std::int64_t height) {
  if (width <= 0 || height <= 0) {
    throw_undecodable(source, fmt::format("its header says {} x {} pixels", width, height));
  }
  if (width * height > kMaxPixels) {
    throw_undecodable(source, fmt::format("{} x {} pixels is more than the {} decode() accepts",
                                          width, height, kMaxPixels));
  }
}

Span2 scaled_region(std::string_view source, const DecodeOptions& options, int width, int height,
                    int scaled_width, int scaled_height, int denom) {
  if (!options.roi) return {0, 0, scaled_width, scaled_height};
  const Rect& r = *options.roi;
  const int x0 = std::clamp(r.x, 0, width);
  const int y0 = std::clamp(r.y, 0, height);
  const int x1 = static_cast<int>(std::clamp<std::int64_t>(std::int64_t{r.x} + r.width, 0, width));
  const int y1 =
      static_cast<int>(std::clamp<std::int64_t>(std::int64_t{r.y} + r.height, 0, height));
  if (x1 <= x0 || y1 <= y0) {
    throw DecodeError(fmt::format(
        "vision::decode: the region of interest ({}, {}, {} x {}) of {} lies outside the {} x {} "
        "image; ask for a region inside it",
        r.x, r.y, r.width, r.height, source.empty() ? std::string_view("image bytes") : source,
        width, height));
  }
  // Scaled pixel i covers source pixels [i * denom, (i + 1) * denom).
  return {x0 / denom, y0 / denom, std::min(scaled_width, (x1 + denom - 1) / denom),
          std::min(scaled_height, (y1 + denom - 1) / denom)};
}

void rgb_to_luma(const std::uint8_t* rgb, std::uint8_t* grey, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i, rgb += 3) {
    grey[i] = static_cast<std::uint8_t>(
        (rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u + 0x8000u) >> 16);
  }
}

Reader::Reader() = default;
Reader::~Reader() = default;

Reader& Reader::for_this_thread() {
  thread_local Reader reader;
  return reader;
}

}  // namespace detail

namespace {

void check_options(const DecodeOptions& options) {
  const int d = options.scale_denom;
  if (d != 1 && d != 2 && d != 4 && d != 8) {
    throw std::invalid_argument(fmt::format(
        "vision::DecodeOptions::scale_denom is {}; it must be 1, 2, 4 or 8 (libjpeg-turbo's fast "
        "DCT scalings)",
        d));
  }
  if (options.roi && (options.roi->width <= 0 || options.roi->height <= 0)) {
    throw std::invalid_argument(fmt::format(
        "vision::DecodeOptions::roi is {} x {}; a region needs a width and height of at least 1",
        options.roi->width, options.roi->height));
  }
}

}  // namespace

ImageInfo read_info(std::span<const std::uint8_t> bytes, std::string_view source) {
  return detail::Reader::for_this_thread().open(bytes, source);
}

void decode_into(std::span<const std::uint8_t> bytes, const DecodeOptions& options, Image& out,
                 std::string_view source) {
  check_options(options);
  detail::Reader& reader = detail::Reader::for_this_thread();
  reader.open(bytes, source);
  reader.read(options, out);
}

Image decode(std::span<const std::uint8_t> bytes, const DecodeOptions& options,
             std::string_view source) {
  Image image;
  decode_into(bytes, options, image, source);
  return image;
}

#if STOKER_HAS_IMAGE_CODECS

bool codecs_available() noexcept { return true; }

namespace detail {

ImageInfo Reader::open(std::span<const std::uint8_t> bytes, std::string_view source) {
  format_ = sniff_format(bytes);
  switch (format_) {
    case ImageFormat::kJpeg:
      if (!jpeg_) jpeg_ = std::make_unique<JpegReader>();
      return jpeg_->open(bytes, source);
    case ImageFormat::kPng:
      if (!png_) png_ = std::make_unique<PngReader>();
      return png_->open(bytes, source);
    case ImageFormat::kWebp:
      if (!webp_) webp_ = std::make_unique<WebpReader>();
      return webp_->open(bytes, source);
    case ImageFormat::kUnknown:
      break;
  }
  std::string first;
  for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 4); ++i) {
    first += fmt::format("{}{:02x}", i == 0 ? "" : " ", bytes[i]);
  }
  throw_undecodable(source, bytes.empty() ? std::string("it is empty (0 bytes)")
                                          : fmt::format("its first bytes ({}) are not the magic "
                                                        "number of JPEG, PNG or WebP",
                                                        first));
}

void Reader::read(const DecodeOptions& options, Image& out) {
  switch (format_) {
    case ImageFormat::kJpeg:
      return jpeg_->read(options, out);
    case ImageFormat::kPng:
      return png_->read(options, out);
    case ImageFormat::kWebp:
      return webp_->read(options, out);
    case ImageFormat::kUnknown:
      break;
  }
  throw std::logic_error("vision::detail::Reader::read: called without a successful open()");
}

}  // namespace detail

#else

bool codecs_available() noexcept { return false; }

namespace detail {

// Without the codecs the readers exist only so that Reader can hold them.
struct JpegReader::State {};
struct PngReader::State {};
struct WebpReader::State {};
JpegReader::JpegReader() = default;
JpegReader::~JpegReader() = default;
PngReader::PngReader() = default;
PngReader::~PngReader() = default;
WebpReader::WebpReader() = default;
WebpReader::~WebpReader() = default;

ImageInfo Reader::open(std::span<const std::uint8_t>, std::string_view) {
  throw Error(
      "vision::decode: this stoker was built without libjpeg-turbo, libpng and libwebp; install "
      "libjpeg62-turbo-dev, libpng-dev and libwebp-dev (Debian) and rebuild");
}
void Reader::read(const DecodeOptions&, Image&) {
  throw Error("vision::decode: this stoker was built without the image codecs");
}

}  // namespace detail

#endif

}  // namespace stoker::vision
