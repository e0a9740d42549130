// ColorJitter's adjustments with the arithmetic of Pillow's ImageEnhance, which torchvision
// uses on PIL images: each is Image.blend(degenerate, image, factor) with the factor as a C
// float, evaluated as in1 + factor * (in2 - in1) in single precision and truncated (clamped
// to 0..255 when the factor is outside [0, 1]). Brightness blends with black, contrast with
// the rounded mean of the grey ("L") image, saturation with each pixel's grey. Hue goes
// through Pillow's RGB -> HSV -> RGB conversion (single and double precision where Pillow
// uses each) with the hue byte shifted as numpy's uint8 addition shifts it. Written here
// because these exact roundings are Pillow's alone; the build compiles it with
// -ffp-contract=off so no multiply-add is fused.
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include <fmt/format.h>

#include "stoker/vision/transforms.hpp"
#include "vision/decoders.hpp"

namespace stoker::vision::functional {
namespace {

void check_rgb_or_grey(const char* what, const Image& image) {
  if (image.channels != 1 && image.channels != 3) {
    throw std::invalid_argument(fmt::format(
        "vision::functional::{}: the image has {} channels; colour adjustments take RGB (3) or "
        "grey (1) images",
        what, image.channels));
  }
}

inline std::uint8_t blend(int degenerate, int pixel, float alpha, bool clamp) {
  const float v = static_cast<float>(degenerate) + alpha * static_cast<float>(pixel - degenerate);
  if (!clamp) return static_cast<std::uint8_t>(v);
  if (v <= 0.0f) return 0;
  if (v >= 255.0f) return 255;
  return static_cast<std::uint8_t>(v);
}

std::size_t value_count(const Image& image) {
  return image.row_bytes() * static_cast<std::size_t>(image.height);
}

inline std::uint8_t luma(const std::uint8_t* rgb) {
  return static_cast<std::uint8_t>((rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u + 0x8000u) >>
                                   16);
}

// Pillow's rgb2hsv for one pixel.
void to_hsv(const std::uint8_t* rgb, std::uint8_t* hsv) {
  const int r = rgb[0];
  const int g = rgb[1];
  const int b = rgb[2];
  const int maxc = std::max(r, std::max(g, b));
  const int minc = std::min(r, std::min(g, b));
  hsv[2] = static_cast<std::uint8_t>(maxc);
  if (minc == maxc) {
    hsv[0] = 0;
    hsv[1] = 0;
    return;
  }
  const float cr = static_cast<float>(maxc - minc);
  const float s = cr / static_cast<float>(maxc);
  const float rc = static_cast<float>(maxc - r) / cr;
  const float gc = static_cast<float>(maxc - g) / cr;
  const float bc = static_cast<float>(maxc - b) / cr;
  float h = 0.0f;
  if (r == maxc) {
    h = bc - gc;
  } else if (g == maxc) {
    h = static_cast<float>(2.0 + static_cast<double>(rc) - static_cast<double>(bc));
  } else {
    h = static_cast<float>(4.0 + static_cast<double>(gc) - static_cast<double>(rc));
  }
  h = static_cast<float>(std::fmod(static_cast<double>(h) / 6.0 + 1.0, 1.0));
  auto clip = [](int v) { return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v); };
  hsv[0] = clip(static_cast<int>(static_cast<double>(h) * 255.0));
  hsv[1] = clip(static_cast<int>(static_cast<double>(s) * 255.0));
}

// Pillow's hsv2rgb for one pixel.
void to_rgb(const std::uint8_t* hsv, std::uint8_t* rgb) {
  const std::uint8_t h = hsv[0];
  const std::uint8_t s = hsv[1];
  const std::uint8_t v = hsv[2];
  if (s == 0) {
    rgb[0] = rgb[1] = rgb[2] = v;
    return;
  }
  const double h6 = static_cast<double>(static_cast<float>(h)) * 6.0 / 255.0;
  const int i = static_cast<int>(std::floor(h6));
  const float f = static_cast<float>(h6 - static_cast<double>(static_cast<float>(i)));
  const float fs = static_cast<float>(static_cast<double>(static_cast<float>(s)) / 255.0);
  const double fv = static_cast<double>(static_cast<float>(v));
  auto clip = [](double x) {
    const int n = static_cast<int>(std::round(x));
    return static_cast<std::uint8_t>(n < 0 ? 0 : n > 255 ? 255 : n);
  };
  const std::uint8_t p = clip(fv * (1.0 - static_cast<double>(fs)));
  const std::uint8_t q = clip(fv * (1.0 - static_cast<double>(fs * f)));
  const std::uint8_t t =
      clip(fv * (1.0 - static_cast<double>(fs) * (1.0 - static_cast<double>(f))));
  switch (i % 6) {
    case 0:
      rgb[0] = v, rgb[1] = t, rgb[2] = p;
      break;
    case 1:
      rgb[0] = q, rgb[1] = v, rgb[2] = p;
      break;
    case 2:
      rgb[0] = p, rgb[1] = v, rgb[2] = t;
      break;
    case 3:
      rgb[0] = p, rgb[1] = q, rgb[2] = v;
      break;
    case 4:
      rgb[0] = t, rgb[1] = p, rgb[2] = v;
      break;
    default:
      rgb[0] = v, rgb[1] = p, rgb[2] = q;
      break;
  }
}

}  // namespace

void adjust_brightness(Image& image, double factor) {
  const auto alpha = static_cast<float>(factor);
  const bool clamp = !(alpha >= 0.0f && alpha <= 1.0f);
  std::uint8_t* p = image.pixels.data();
  const std::size_t n = value_count(image);
  for (std::size_t i = 0; i < n; ++i) p[i] = blend(0, p[i], alpha, clamp);
}

void adjust_contrast(Image& image, double factor) {
  check_rgb_or_grey("adjust_contrast", image);
  const auto alpha = static_cast<float>(factor);
  const bool clamp = !(alpha >= 0.0f && alpha <= 1.0f);
  std::uint8_t* p = image.pixels.data();
  const std::size_t pixels =
      static_cast<std::size_t>(image.width) * static_cast<std::size_t>(image.height);
  std::uint64_t sum = 0;
  if (image.channels == 3) {
    for (std::size_t i = 0; i < pixels; ++i) sum += luma(p + 3 * i);
  } else {
    for (std::size_t i = 0; i < pixels; ++i) sum += p[i];
  }
  // ImageStat's mean of the "L" image, rounded as int(mean + 0.5).
  const int mean = static_cast<int>(static_cast<double>(sum) / static_cast<double>(pixels) + 0.5);
  const std::size_t n = value_count(image);
  for (std::size_t i = 0; i < n; ++i) p[i] = blend(mean, p[i], alpha, clamp);
}

void adjust_saturation(Image& image, double factor) {
  check_rgb_or_grey("adjust_saturation", image);
  if (image.channels == 1) return;  // a grey image is its own degenerate
  const auto alpha = static_cast<float>(factor);
  const bool clamp = !(alpha >= 0.0f && alpha <= 1.0f);
  std::uint8_t* p = image.pixels.data();
  const std::size_t pixels =
      static_cast<std::size_t>(image.width) * static_cast<std::size_t>(image.height);
  for (std::size_t i = 0; i < pixels; ++i, p += 3) {
    const int l = luma(p);
    p[0] = blend(l, p[0], alpha, clamp);
    p[1] = blend(l, p[1], alpha, clamp);
    p[2] = blend(l, p[2], alpha, clamp);
  }
}

void adjust_hue(Image& image, double hue_factor) {
  if (!(hue_factor >= -0.5 && hue_factor <= 0.5)) {
    throw std::invalid_argument(fmt::format(
        "vision::functional::adjust_hue: hue_factor is {}; it must be in [-0.5, 0.5]", hue_factor));
  }
  check_rgb_or_grey("adjust_hue", image);
  if (image.channels == 1) return;  // torchvision leaves grey images alone
  // np.uint8(hue_factor * 255): truncated toward zero, then taken modulo 256.
  const auto shift = static_cast<std::uint8_t>(static_cast<int>(hue_factor * 255.0) & 0xff);
  std::uint8_t* p = image.pixels.data();
  const std::size_t pixels =
      static_cast<std::size_t>(image.width) * static_cast<std::size_t>(image.height);
  for (std::size_t i = 0; i < pixels; ++i, p += 3) {
    std::uint8_t hsv[3];
    to_hsv(p, hsv);
    hsv[0] = static_cast<std::uint8_t>(hsv[0] + shift);
    to_rgb(hsv, p);
  }
}

void color_jitter(Image& image, const ColorJitter::Params& params) {
  for (std::uint8_t step : params.order) {
    if (step == 0 && params.brightness) adjust_brightness(image, *params.brightness);
    if (step == 1 && params.contrast) adjust_contrast(image, *params.contrast);
    if (step == 2 && params.saturation) adjust_saturation(image, *params.saturation);
    if (step == 3 && params.hue) adjust_hue(image, *params.hue);
  }
}

}  // namespace stoker::vision::functional
