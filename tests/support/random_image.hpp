// Images for the vision tests that need pixels but no decoding (tests/unit/vision_*_test.cpp):
// random bytes of any size and channel count (the same for the same seed), and comparing two.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "stoker/random.hpp"
#include "stoker/vision/image.hpp"

namespace stoker::test {

inline vision::Image random_image(int width, int height, int channels = 3, std::uint64_t seed = 1) {
  vision::Image image;
  image.reset(width, height, channels);
  Generator rng(seed);
  for (std::size_t i = 0; i < image.row_bytes() * static_cast<std::size_t>(height); ++i) {
    image.pixels[i] = static_cast<std::uint8_t>(rng.below(256));
  }
  return image;
}

// Same size, channels and pixels (the bytes past the last row, a reused buffer's spare, are
// not compared).
inline bool same_pixels(const vision::Image& a, const vision::Image& b) {
  if (a.width != b.width || a.height != b.height || a.channels != b.channels) return false;
  const std::size_t n = a.row_bytes() * static_cast<std::size_t>(a.height);
  return std::equal(a.pixels.begin(), a.pixels.begin() + static_cast<std::ptrdiff_t>(n),
                    b.pixels.begin());
}

}  // namespace stoker::test
