// stoker::vision images and decoding: Image (8-bit pixels, rows of interleaved channels) and
// decode(), which turns JPEG, PNG or WebP bytes from anywhere (a file, a record shard, a cache)
// into RGB, grey or RGBA pixels the way Pillow's Image.open(f).convert("RGB") does, optionally
// only a region of interest and, for JPEG, at a DCT scale of 1/2, 1/4 or 1/8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "stoker/errors.hpp"

namespace stoker::vision {

// An undecodable image: corrupt, truncated, of an unknown format, or too large. what() names
// the source and the decoder's reason.
class DecodeError : public Error {
 public:
  using Error::Error;
};

enum class ImageFormat : std::uint8_t { kUnknown, kJpeg, kPng, kWebp };

// The format the first bytes announce (magic numbers; file names are not consulted).
ImageFormat sniff_format(std::span<const std::uint8_t> bytes) noexcept;
std::string_view format_name(ImageFormat format) noexcept;  // "JPEG", "PNG", "WebP", "unknown"

// A rectangle in pixels: columns [x, x + width), rows [y, y + height).
struct Rect {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
  friend bool operator==(const Rect&, const Rect&) = default;
};

// What the header says, without decoding pixels.
struct ImageInfo {
  ImageFormat format = ImageFormat::kUnknown;
  int width = 0;
  int height = 0;
  int channels = 0;  // in the file: 1 grey, 2 grey + alpha, 3 colour, 4 colour + alpha
};

// Either process; reads only the header. Throws DecodeError naming `source`.
ImageInfo read_info(std::span<const std::uint8_t> bytes, std::string_view source = {});

enum class ColorMode : std::uint8_t {
  kRGB,   // 3 channels: Pillow's convert("RGB"): grey replicated, palette expanded, alpha dropped
  kGray,  // 1 channel: Pillow's convert("L") (ITU-R 601-2 luma of RGB sources)
  kRGBA,  // 4 channels: alpha kept (255 where the file has none)
};

struct DecodeOptions {
  ColorMode color = ColorMode::kRGB;
  // Decode only this region of the full-size image (clamped to it). JPEG decodes only the rows
  // and MCU columns the region needs; the result covers at least the region (Image::x/y say
  // where it starts), at most one MCU more on each side. PNG and WebP decode and keep the
  // region's rows.
  std::optional<Rect> roi;
  // JPEG only: 1, 2, 4 or 8 (libjpeg-turbo's fast DCT scalings); the image is decoded at
  // 1/scale_denom of its size. Other formats decode at full size and say so in
  // Image::scale_denom. Other values are std::invalid_argument.
  int scale_denom = 1;
};

// Decoded pixels: height rows of width * channels bytes, contiguous, at the start of `pixels`
// (which may be longer: an Image reused for many decodes keeps its buffer, and no allocation
// happens once it is large enough).
struct Image {
  int width = 0;
  int height = 0;
  int channels = 0;
  std::vector<std::uint8_t> pixels;
  // Where these pixels lie in the source: the source is full_width x full_height at scale 1;
  // decoded at 1/scale_denom, pixel (0, 0) here is pixel (x, y) of the scaled source.
  int full_width = 0;
  int full_height = 0;
  int scale_denom = 1;
  int x = 0;
  int y = 0;

  std::size_t row_bytes() const noexcept {
    return static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  }
  const std::uint8_t* row(int r) const noexcept {
    return pixels.data() + static_cast<std::size_t>(r) * row_bytes();
  }
  std::uint8_t* row(int r) noexcept {
    return pixels.data() + static_cast<std::size_t>(r) * row_bytes();
  }
  // Sets the size and makes pixels hold it (growing, never shrinking, the buffer, with a few
  // bytes to spare for vectorised readers); the provenance becomes "the whole source at
  // scale 1".
  void reset(int new_width, int new_height, int new_channels);
};

// Limit on width x height (pixels) decode() accepts: larger images are DecodeError, so a
// corrupt header cannot ask for gigabytes. Pillow's limit (its DecompressionBombError: twice
// Image.MAX_IMAGE_PIXELS), so what torchvision loads, stoker loads.
inline constexpr std::int64_t kMaxPixels = 2 * std::int64_t{89478485};

// Either process; does not block. JPEG uses libjpeg-turbo with Pillow's settings (ISLOW IDCT,
// fancy upsampling), so the pixels are Pillow's; PNG uses libpng (8 and 16 bit, palette, grey,
// alpha); WebP uses libwebp. Throws DecodeError naming `source` and the decoder's reason (a
// corrupt, truncated or unknown image never crashes the process), std::invalid_argument for
// bad options.
Image decode(std::span<const std::uint8_t> bytes, const DecodeOptions& options = {},
             std::string_view source = {});
// The same, into `out`, reusing its buffer.
void decode_into(std::span<const std::uint8_t> bytes, const DecodeOptions& options, Image& out,
                 std::string_view source = {});

// True when stoker was built with the codecs (libjpeg-turbo, libpng, libwebp); without them
// decode() throws stoker::Error saying what to install.
bool codecs_available() noexcept;

}  // namespace stoker::vision
