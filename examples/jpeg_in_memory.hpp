// The vision examples' images: RGB pixels they generate, encoded as a JPEG in memory with
// TurboJPEG (quality 90, 4:2:0), as a cache or a record shard would hold them.
#pragma once

#include <turbojpeg.h>

#include <cstdint>
#include <vector>

namespace example {

inline std::vector<std::uint8_t> encode_jpeg(const std::vector<std::uint8_t>& rgb, int width,
                                             int height) {
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  std::vector<std::uint8_t> bytes;
  if (tjCompress2(tj, rgb.data(), width, 0, height, TJPF_RGB, &out, &size, TJSAMP_420, 90, 0) ==
      0) {
    bytes.assign(out, out + size);
  }
  tjFree(out);
  tjDestroy(tj);
  return bytes;
}

}  // namespace example
