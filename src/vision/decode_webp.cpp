// WebP decoding through libwebp (lossy and lossless, with or without alpha), with libwebp's
// default options (fancy upsampling), which is what Pillow's WebP plugin gets from libwebp;
// RGB drops the alpha, as Pillow's convert("RGB") does. A region is cut from the whole decoded
// image: libwebp's own cropping upsamples the region's edges differently from a full decode
// (measured by the parity test), so it would not give Pillow's pixels. libwebp reports errors
// by status codes, so no jump is needed here. Animated WebP is refused.
#include <webp/decode.h>

#include <algorithm>

#include <fmt/format.h>

#include "vision/decoders.hpp"

namespace stoker::vision::detail {
namespace {

const char* status_text(VP8StatusCode status) {
  switch (status) {
    case VP8_STATUS_OK:
      return "no error";
    case VP8_STATUS_OUT_OF_MEMORY:
      return "libwebp ran out of memory";
    case VP8_STATUS_INVALID_PARAM:
      return "libwebp rejected the decoding parameters";
    case VP8_STATUS_BITSTREAM_ERROR:
      return "the WebP bitstream is corrupt";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "it uses a WebP feature libwebp does not support";
    case VP8_STATUS_SUSPENDED:
      return "libwebp suspended decoding";
    case VP8_STATUS_USER_ABORT:
      return "decoding was aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return "the file ends inside the image (truncated)";
  }
  return "libwebp failed";
}

}  // namespace

struct WebpReader::State {
  std::span<const std::uint8_t> bytes;
  std::string source;
  WebPBitstreamFeatures features{};
  std::vector<std::uint8_t> scratch;  // RGBA before grey conversion
};

WebpReader::WebpReader() : state_(std::make_unique<State>()) {}
WebpReader::~WebpReader() = default;

ImageInfo WebpReader::open(std::span<const std::uint8_t> bytes, std::string_view source) {
  State& s = *state_;
  s.bytes = bytes;
  s.source.assign(source);
  const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &s.features);
  if (status != VP8_STATUS_OK) throw_undecodable(source, status_text(status));
  if (s.features.has_animation != 0) {
    throw_undecodable(source, "it is an animated WebP, which stoker does not decode");
  }
  check_dimensions(source, s.features.width, s.features.height);
  ImageInfo info;
  info.format = ImageFormat::kWebp;
  info.width = s.features.width;
  info.height = s.features.height;
  info.channels = s.features.has_alpha != 0 ? 4 : 3;
  return info;
}

void WebpReader::read(const DecodeOptions& options, Image& out) {
  State& s = *state_;
  const int width = s.features.width;
  const int height = s.features.height;
  const Span2 r = scaled_region(s.source, options, width, height, width, height, 1);
  const int w = r.x1 - r.x0;
  const int h = r.y1 - r.y0;
  const bool grey = options.color == ColorMode::kGray;
  const bool whole = w == width && h == height;
  const int channels = options.color == ColorMode::kRGBA ? 4 : 3;
  out.reset(w, h, grey ? 1 : channels);
  out.x = r.x0;
  out.y = r.y0;
  WebPDecoderConfig config;
  if (WebPInitDecoderConfig(&config) == 0) {
    throw_undecodable(s.source, "libwebp's version does not match its header");
  }
  // Straight into the output when it is the whole image in colour; else through scratch.
  std::uint8_t* target = out.pixels.data();
  const std::size_t stride = static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  if (grey || !whole) {
    s.scratch.resize(stride * static_cast<std::size_t>(height));
    target = s.scratch.data();
  }
  config.output.colorspace = channels == 4 ? MODE_RGBA : MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = target;
  config.output.u.RGBA.stride = static_cast<int>(stride);
  config.output.u.RGBA.size = stride * static_cast<std::size_t>(height);
  const VP8StatusCode status = WebPDecode(s.bytes.data(), s.bytes.size(), &config);
  WebPFreeDecBuffer(&config.output);  // external memory: frees nothing of ours
  if (status != VP8_STATUS_OK) throw_undecodable(s.source, status_text(status));
  if (target == out.pixels.data()) return;
  const auto c = static_cast<std::size_t>(channels);
  for (int y = 0; y < h; ++y) {
    const std::uint8_t* in =
        target + static_cast<std::size_t>(r.y0 + y) * stride + static_cast<std::size_t>(r.x0) * c;
    if (grey) {
      rgb_to_luma(in, out.row(y), static_cast<std::size_t>(w));
    } else {
      std::copy_n(in, static_cast<std::size_t>(w) * c, out.row(y));
    }
  }
}

}  // namespace stoker::vision::detail
