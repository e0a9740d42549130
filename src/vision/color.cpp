// ColorJitter's adjustments with the arithmetic of Pillow's ImageEnhance, which torchvision
// uses on PIL images: each is Image.blend(degenerate, image, factor) with the factor as a C
// float, evaluated as in1 + factor * (in2 - in1) in single precision and truncated (clamped
// to 0..255 when the factor is outside [0, 1]). Brightness blends with black, contrast with
// the rounded mean of the grey ("L") image, saturation with each pixel's grey. Hue goes
// through Pillow's RGB -> HSV -> RGB conversion (single and double precision where Pillow
// uses each) with the hue byte shifted as numpy's uint8 addition shifts it. Written here
// because these exact roundings are Pillow's alone; the build compiles it with
// -ffp-contract=off so no multiply-add is fused.
//
// Also here, for the same reason: Grayscale (convert("L")), ImageEnhance.Sharpness (a blend
// with Pillow's SMOOTH 3x3 filter, single-precision sums of the rows below, at and above each
// pixel, the image's border left as it is) and the ImageOps lookup tables of TrivialAugmentWide
// and RandAugment (posterize, solarize, autocontrast, equalize), each computed per channel as
// ImageOps computes them in Python.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
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

void rgb_to_grayscale(const Image& in, int num_output_channels, Image& out) {
  check_rgb_or_grey("rgb_to_grayscale", in);
  if (num_output_channels != 1 && num_output_channels != 3) {
    throw std::invalid_argument(fmt::format(
        "vision::functional::rgb_to_grayscale: num_output_channels is {}; it must be 1 or 3",
        num_output_channels));
  }
  if (&in == &out) {
    const Image copy = in;
    return rgb_to_grayscale(copy, num_output_channels, out);
  }
  out.reset(in.width, in.height, num_output_channels);
  const std::size_t n = static_cast<std::size_t>(in.width) * static_cast<std::size_t>(in.height);
  const std::uint8_t* p = in.pixels.data();
  std::uint8_t* o = out.pixels.data();
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t l = in.channels == 3 ? luma(p + 3 * i) : p[i];
    if (num_output_channels == 1) {
      o[i] = l;
    } else {
      o[3 * i] = o[3 * i + 1] = o[3 * i + 2] = l;
    }
  }
}

namespace {

// Pillow's ImagingFilter3x3 with SMOOTH's kernel (1 1 1 / 1 5 1 / 1 1 1, divisor 13, as
// float32 weights): the rows below, at and above each pixel, each row's three products summed
// left to right, added to 0.5 in single precision and truncated; border pixels copied.
void smooth(const Image& in, Image& out) {
  out.reset(in.width, in.height, in.channels);
  std::memcpy(out.pixels.data(), in.pixels.data(),
              in.row_bytes() * static_cast<std::size_t>(in.height));
  if (in.width < 3 || in.height < 3) return;  // Pillow copies images smaller than the kernel
  const float k[9] = {1.0f / 13.0f, 1.0f / 13.0f, 1.0f / 13.0f, 1.0f / 13.0f, 5.0f / 13.0f,
                      1.0f / 13.0f, 1.0f / 13.0f, 1.0f / 13.0f, 1.0f / 13.0f};
  const int c = in.channels;
  auto row3 = [c](const std::uint8_t* r, int x, const float* w) {
    return static_cast<float>(r[(x - 1) * c]) * w[0] + static_cast<float>(r[x * c]) * w[1] +
           static_cast<float>(r[(x + 1) * c]) * w[2];
  };
  for (int y = 1; y + 1 < in.height; ++y) {
    std::uint8_t* o = out.row(y);
    for (int b = 0; b < c; ++b) {
      const std::uint8_t* above = in.row(y - 1) + b;
      const std::uint8_t* at = in.row(y) + b;
      const std::uint8_t* below = in.row(y + 1) + b;
      for (int x = 1; x + 1 < in.width; ++x) {
        float ss = 0.0f + 0.5f;
        ss += row3(below, x, &k[0]);
        ss += row3(at, x, &k[3]);
        ss += row3(above, x, &k[6]);
        o[x * c + b] = ss <= 0.0f ? 0 : ss >= 255.0f ? 255 : static_cast<std::uint8_t>(ss);
      }
    }
  }
}

using Histogram = std::array<std::uint64_t, 256>;
using Lut = std::array<std::uint8_t, 256>;

// ImageOps' per-channel tables: each channel's histogram turned into its table by `make`, then
// every value looked up (image.point).
template <class Make>
void apply_channel_luts(Image& image, Make make) {
  std::array<Histogram, 3> h{};
  std::uint8_t* p = image.pixels.data();
  const std::size_t n = value_count(image);
  const std::size_t c = static_cast<std::size_t>(image.channels);
  for (std::size_t i = 0; i < n; ++i) ++h[i % c][p[i]];
  std::array<Lut, 3> lut{};
  for (std::size_t b = 0; b < c; ++b) {
    for (std::size_t i = 0; i < 256; ++i) lut[b][i] = static_cast<std::uint8_t>(i);
    make(h[b], lut[b]);
  }
  for (std::size_t i = 0; i < n; ++i) p[i] = lut[i % c][p[i]];
}

}  // namespace

void adjust_sharpness(Image& image, double factor) {
  check_rgb_or_grey("adjust_sharpness", image);
  thread_local Image degenerate;
  smooth(image, degenerate);
  const auto alpha = static_cast<float>(factor);
  const bool clamp = !(alpha >= 0.0f && alpha <= 1.0f);
  std::uint8_t* p = image.pixels.data();
  const std::uint8_t* d = degenerate.pixels.data();
  const std::size_t n = value_count(image);
  for (std::size_t i = 0; i < n; ++i) p[i] = blend(d[i], p[i], alpha, clamp);
}

void posterize(Image& image, int bits) {
  check_rgb_or_grey("posterize", image);
  if (bits < 0 || bits > 8) {
    throw std::invalid_argument(
        fmt::format("vision::functional::posterize: bits is {}; it must be in [0, 8]", bits));
  }
  const auto mask = static_cast<std::uint8_t>(~((1u << (8 - bits)) - 1u));
  std::uint8_t* p = image.pixels.data();
  const std::size_t n = value_count(image);
  for (std::size_t i = 0; i < n; ++i) p[i] &= mask;
}

void solarize(Image& image, double threshold) {
  check_rgb_or_grey("solarize", image);
  std::uint8_t* p = image.pixels.data();
  const std::size_t n = value_count(image);
  for (std::size_t i = 0; i < n; ++i) {
    if (p[i] >= threshold) p[i] = static_cast<std::uint8_t>(255 - p[i]);
  }
}

void autocontrast(Image& image) {
  check_rgb_or_grey("autocontrast", image);
  apply_channel_luts(image, [](const Histogram& h, Lut& lut) {
    int lo = 0;
    while (lo < 255 && h[static_cast<std::size_t>(lo)] == 0) ++lo;
    int hi = 255;
    while (hi > 0 && h[static_cast<std::size_t>(hi)] == 0) --hi;
    if (hi <= lo) return;  // one value: the identity
    const double scale = 255.0 / (hi - lo);
    const double offset = -lo * scale;
    for (std::size_t i = 0; i < 256; ++i) {
      const auto v = static_cast<int>(static_cast<double>(i) * scale + offset);  // int(): to 0
      lut[i] = static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  });
}

void equalize(Image& image) {
  check_rgb_or_grey("equalize", image);
  apply_channel_luts(image, [](const Histogram& h, Lut& lut) {
    std::uint64_t total = 0;
    std::uint64_t last = 0;  // the count of the highest value present
    int present = 0;
    for (std::uint64_t count : h) {
      if (count == 0) continue;
      total += count;
      last = count;
      ++present;
    }
    if (present <= 1) return;  // the identity
    const std::uint64_t step = (total - last) / 255;
    if (step == 0) return;
    std::uint64_t n = step / 2;
    for (std::size_t i = 0; i < 256; ++i) {
      // n // step passes 255 only for values above the highest present, which do not occur.
      const std::uint64_t v = n / step;
      lut[i] = static_cast<std::uint8_t>(v > 255 ? 255 : v);
      n += h[i];
    }
  });
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
