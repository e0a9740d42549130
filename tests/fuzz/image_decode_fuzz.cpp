// libFuzzer target for stoker::vision's decoders (JPEG, PNG, WebP; build with clang:
// -DSTOKER_BUILD_FUZZ=ON). The first byte picks the options (colour mode, DCT scale, a region);
// the second where to cut the image short; the rest is the image. Any input must decode to a
// consistent Image or throw DecodeError; a prefix of a decodable image must fail (or not) the
// same way for a full decode, a region decode and a cropping pipeline (the end-of-image checks
// of decode_jpeg.cpp / decode_png.cpp); the augmentations run on what decodes.
//   build-fuzz/tests/fuzz/image_decode_fuzz -max_total_time=60 -max_len=65536
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

#include "stoker/vision.hpp"

namespace {

namespace vision = stoker::vision;

// "" when `run` returns, else the DecodeError's text.
template <class F>
std::string outcome(F&& run) {
  try {
    run();
    return "";
  } catch (const vision::DecodeError& e) {
    return e.what();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::uint8_t knobs = data[0];
  const std::uint8_t cut = data[1];
  const std::span<const std::uint8_t> bytes(data + 2, size - 2);
  vision::DecodeOptions options;
  options.color = knobs & 1 ? vision::ColorMode::kGray
                            : (knobs & 2 ? vision::ColorMode::kRGBA : vision::ColorMode::kRGB);
  options.scale_denom = 1 << ((knobs >> 2) & 3);
  if (knobs & 16) options.roi = vision::Rect{3, 5, 40, 30};
  const vision::Pipeline crop{vision::Resize(24), vision::CenterCrop(16)};
  try {
    const vision::ImageInfo info = vision::read_info(bytes, "fuzz");
    if (info.width <= 0 || info.height <= 0) std::abort();
    const vision::Image image = vision::decode(bytes, options, "fuzz");
    if (image.pixels.size() < image.row_bytes() * static_cast<std::size_t>(image.height)) {
      std::abort();
    }
    // The pipeline's path too: header, plan, region decode, resample.
    const stoker::Tensor t = crop(bytes, "fuzz");
    if (t.numel() != 3 * 16 * 16) std::abort();
    // The augmentations on what decoded (a stoker::Error where an image is too small for them),
    // up to a megapixel: their cost grows with the pixels, and a few hundred bytes of JPEG can
    // declare 34 of them (16656 x 2060), which took 38 s through the blur in this
    // instrumented build, a timeout that says nothing about the code's correctness.
    if ((knobs & 32) && static_cast<std::int64_t>(info.width) * info.height <= (1 << 20)) {
      stoker::Generator rng(knobs);
      const vision::Pipeline augment{
          vision::RandomRotation(40.0, vision::Interpolation::kBicubic, (knobs & 64) != 0),
          vision::GaussianBlur(3), vision::TrivialAugmentWide(), vision::RandAugment(),
          vision::RandomErasing(1.0)};
      const stoker::Tensor a = augment.run(bytes, rng, "fuzz");
      if (a.dim() != 3 || a.size(0) != 3) std::abort();
    }
  } catch (const vision::DecodeError&) {
    return 0;
  } catch (const stoker::Error&) {  // e.g. a region outside a tiny image
    return 0;
  }
  // A decodable image cut short fails, or not, the same way whichever region is decoded.
  const std::span<const std::uint8_t> prefix =
      bytes.first(bytes.size() * static_cast<std::size_t>(cut) / 256);
  vision::DecodeOptions corner;
  corner.roi = vision::Rect{0, 0, 2, 2};
  try {
    const std::string whole = outcome([&] { vision::decode(prefix, {}, "cut"); });
    if (outcome([&] { vision::decode(prefix, corner, "cut"); }) != whole) std::abort();
    if (outcome([&] { crop(prefix, "cut"); }) != whole) std::abort();
  } catch (const stoker::Error&) {  // the prefix's image too small for the region
  }
  return 0;
}
