// Encoded test images for the vision tests: smooth, photo-like RGB pixels and their JPEG
// (TurboJPEG), PNG (libpng) and WebP (libwebp) encodings, in memory.
#pragma once

#include <png.h>
#include <turbojpeg.h>
#include <webp/encode.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "stoker/random.hpp"

namespace stoker::test {

// width x height RGB: a smooth gradient with a little noise, as photographs compress.
inline std::vector<std::uint8_t> photo_pixels(int width, int height, std::uint64_t seed = 1) {
  Generator rng(seed);
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) *
                                3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const std::size_t i = (static_cast<std::size_t>(y) * static_cast<std::size_t>(width) +
                             static_cast<std::size_t>(x)) *
                            3;
      const int noise = static_cast<int>(rng.below(17)) - 8;
      rgb[i] = static_cast<std::uint8_t>(std::clamp(x * 255 / width + noise, 0, 255));
      rgb[i + 1] = static_cast<std::uint8_t>(std::clamp(y * 255 / height + noise, 0, 255));
      rgb[i + 2] = static_cast<std::uint8_t>(std::clamp(128 + (x - y) / 4 + noise, 0, 255));
    }
  }
  return rgb;
}

inline std::vector<std::uint8_t> encode_jpeg(const std::vector<std::uint8_t>& rgb, int width,
                                             int height, int subsampling = TJSAMP_420,
                                             bool progressive = false) {
  tjhandle h = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int flags = progressive ? TJFLAG_PROGRESSIVE : 0;
  if (tjCompress2(h, rgb.data(), width, 0, height, TJPF_RGB, &out, &size, subsampling, 90, flags) !=
      0) {
    tjDestroy(h);
    throw std::runtime_error("test: tjCompress2 failed");
  }
  std::vector<std::uint8_t> bytes(out, out + size);
  tjFree(out);
  tjDestroy(h);
  return bytes;
}

// format: PNG_FORMAT_RGB, PNG_FORMAT_RGBA, PNG_FORMAT_GRAY, ... (pixels to match).
inline std::vector<std::uint8_t> encode_png(const std::vector<std::uint8_t>& pixels, int width,
                                            int height, png_uint_32 format = PNG_FORMAT_RGB) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = format;
  png_alloc_size_t size = 0;
  if (png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, nullptr) == 0) {
    throw std::runtime_error("test: png_image_write_to_memory (size) failed");
  }
  std::vector<std::uint8_t> bytes(size);
  if (png_image_write_to_memory(&image, bytes.data(), &size, 0, pixels.data(), 0, nullptr) == 0) {
    throw std::runtime_error("test: png_image_write_to_memory failed");
  }
  bytes.resize(size);
  return bytes;
}

inline std::vector<std::uint8_t> encode_webp(const std::vector<std::uint8_t>& rgb, int width,
                                             int height, bool lossless = false) {
  std::uint8_t* out = nullptr;
  const std::size_t size = lossless
                               ? WebPEncodeLosslessRGB(rgb.data(), width, height, width * 3, &out)
                               : WebPEncodeRGB(rgb.data(), width, height, width * 3, 80.0f, &out);
  if (size == 0) throw std::runtime_error("test: WebPEncodeRGB failed");
  std::vector<std::uint8_t> bytes(out, out + size);
  WebPFree(out);
  return bytes;
}

}  // namespace stoker::test
