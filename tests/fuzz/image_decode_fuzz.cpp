// libFuzzer target for stoker::vision's decoders (JPEG, PNG, WebP; build with clang:
// -DSTOKER_BUILD_FUZZ=ON). The first byte picks the options (colour mode, DCT scale, a region);
// the rest is the image. Any input must decode to a consistent Image or throw DecodeError.
//   build-fuzz/tests/fuzz/image_decode_fuzz -max_total_time=60 -max_len=65536
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "stoker/vision.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t knobs = data[0];
  const std::span<const std::uint8_t> bytes(data + 1, size - 1);
  namespace vision = stoker::vision;
  vision::DecodeOptions options;
  options.color = knobs & 1 ? vision::ColorMode::kGray
                            : (knobs & 2 ? vision::ColorMode::kRGBA : vision::ColorMode::kRGB);
  options.scale_denom = 1 << ((knobs >> 2) & 3);
  if (knobs & 16) options.roi = vision::Rect{3, 5, 40, 30};
  try {
    const vision::ImageInfo info = vision::read_info(bytes, "fuzz");
    if (info.width <= 0 || info.height <= 0) std::abort();
    const vision::Image image = vision::decode(bytes, options, "fuzz");
    if (image.pixels.size() < image.row_bytes() * static_cast<std::size_t>(image.height)) {
      std::abort();
    }
    // The pipeline's path too: header, plan, region decode, resample.
    const vision::Pipeline pipeline{vision::Resize(24), vision::CenterCrop(16)};
    const stoker::Tensor t = pipeline(bytes, "fuzz");
    if (t.numel() != 3 * 16 * 16) std::abort();
  } catch (const vision::DecodeError&) {
  } catch (const stoker::Error&) {  // e.g. a region outside a tiny image
  }
  return 0;
}
