// The geometric transforms that are not resampling: flips, Pillow's Image.rotate and
// Image.transform(AFFINE) (what torchvision's rotate and affine do to PIL images, and so
// RandomRotation and the shear / translate / rotate steps of TrivialAugmentWide and
// RandAugment), with Pillow's arithmetic: the inverse matrix in double precision (its
// rotation entries rounded to 15 decimals, as Image.rotate rounds them), NEAREST in 16.16
// fixed point where the image's corners fit it (Pillow's affine_fixed), a table of columns for
// a pure scale / translation, BILINEAR and BICUBIC through Pillow's 2x2 and 4x4 affine filters
// (not Resize's), each output pixel's source computed afresh. Written here because these
// roundings are Pillow's alone; compiled with -ffp-contract=off.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "stoker/vision/transforms.hpp"
#include "vision/plan.hpp"

namespace stoker::vision::functional {
namespace {

void check_geometry_image(const char* what, const Image& in) {
  if (in.width < 1 || in.height < 1 || (in.channels != 1 && in.channels != 3) ||
      in.pixels.size() < in.row_bytes() * static_cast<std::size_t>(in.height)) {
    throw std::invalid_argument(fmt::format(
        "vision::functional::{}: the image is {} x {} x {} with {} bytes of pixels; it takes RGB "
        "(3) or grey (1) images of at least 1 x 1 with all their bytes",
        what, in.width, in.height, in.channels, in.pixels.size()));
  }
}

// Pillow's COORD and FLOOR (Geometry.c): truncation toward zero, with negative values mapped
// to -1 (COORD) or floored (FLOOR).
inline int coord(double v) { return v < 0.0 ? -1 : static_cast<int>(v); }
inline int floor_int(double v) {
  return v < 0.0 ? static_cast<int>(std::floor(v)) : static_cast<int>(v);
}

// Python's x % y for floats: the result has the sign of y.
double python_mod(double x, double y) {
  double m = std::fmod(x, y);
  if (m != 0.0) {
    if ((y < 0) != (m < 0)) m += y;
  } else {
    m = std::copysign(0.0, y);
  }
  return m;
}

// Python's round(x, 15): x to 15 decimals, correctly rounded, and back.
double round15(double x) {
  char text[400];
  const auto printed = std::to_chars(text, text + sizeof text, x, std::chars_format::fixed, 15);
  double v = x;
  std::from_chars(text, printed.ptr, v);
  return v;
}

// The fill of an image with `channels` channels; a grey image takes one value, as Pillow
// does (torchvision raises for three values on a one-band image).
std::array<std::uint8_t, 3> fill_for(const char* what, const Image& image,
                                     std::array<std::uint8_t, 3> fill) {
  if (image.channels == 1 && (fill[1] != fill[0] || fill[2] != fill[0])) {
    throw std::invalid_argument(fmt::format(
        "vision::functional::{}: fill is ({}, {}, {}) but the image is grey (one channel); give "
        "one value for all three, as torchvision requires one value per band",
        what, fill[0], fill[1], fill[2]));
  }
  return fill;
}

void fill_image(Image& out, int width, int height, int channels, std::array<std::uint8_t, 3> fill) {
  out.reset(width, height, channels);
  std::uint8_t* p = out.pixels.data();
  const std::size_t n = static_cast<std::size_t>(width) * static_cast<std::size_t>(height);
  if (channels == 1) {
    std::memset(p, fill[0], n);
    return;
  }
  for (std::size_t i = 0; i < n; ++i, p += 3) std::memcpy(p, fill.data(), 3);
}

inline void put(const Image& in, int x, int y, std::uint8_t* out) {
  const std::size_t c = static_cast<std::size_t>(in.channels);
  std::memcpy(out, in.row(y) + static_cast<std::size_t>(x) * c, c);
}

// Pillow's ImagingScaleAffine: NEAREST for a matrix without rotation or shear.
void scale_affine(const Image& in, const double a[6], Image& out) {
  const int x1 = out.width;
  const std::size_t c = static_cast<std::size_t>(in.channels);
  std::vector<int> xintab(static_cast<std::size_t>(x1), 0);
  double xo = a[2] + a[0] * 0.5;
  double yo = a[5] + a[4] * 0.5;
  int xmin = x1;
  int xmax = 0;
  for (int x = 0; x < x1; ++x) {
    const int xin = coord(xo);
    if (xin >= 0 && xin < in.width) {
      xmax = x + 1;
      if (x < xmin) xmin = x;
      xintab[static_cast<std::size_t>(x)] = xin;
    }
    xo += a[0];
  }
  for (int y = 0; y < out.height; ++y) {
    const int yi = coord(yo);
    if (yi >= 0 && yi < in.height) {
      std::uint8_t* o = out.row(y);
      for (int x = xmin; x < xmax; ++x) {
        put(in, xintab[static_cast<std::size_t>(x)], yi, o + static_cast<std::size_t>(x) * c);
      }
    }
    yo += a[4];
  }
}

bool fits_fixed(const double a[6], int x, int y) {
  return std::fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 &&
         std::fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

// Pillow's affine_fixed: NEAREST in 16.16 fixed point, stepping along rows and columns.
void affine_fixed(const Image& in, const double a[6], Image& out) {
  auto fix = [](double v) { return static_cast<std::int64_t>(floor_int(v * 65536.0 + 0.5)); };
  const std::int64_t a0 = fix(a[0]);
  const std::int64_t a1 = fix(a[1]);
  const std::int64_t a3 = fix(a[3]);
  const std::int64_t a4 = fix(a[4]);
  std::int64_t a2 = fix(a[2] + a[0] * 0.5 + a[1] * 0.5);
  std::int64_t a5 = fix(a[5] + a[3] * 0.5 + a[4] * 0.5);
  const std::size_t c = static_cast<std::size_t>(in.channels);
  for (int y = 0; y < out.height; ++y) {
    std::int64_t xx = a2;
    std::int64_t yy = a5;
    std::uint8_t* o = out.row(y);
    for (int x = 0; x < out.width; ++x, o += c) {
      const std::int64_t xin = xx >> 16;
      if (xin >= 0 && xin < in.width) {
        const std::int64_t yin = yy >> 16;
        if (yin >= 0 && yin < in.height) put(in, static_cast<int>(xin), static_cast<int>(yin), o);
      }
      xx += a0;
      yy += a3;
    }
    a2 += a1;
    a5 += a4;
  }
}

// Pillow's floating-point NEAREST, for matrices whose corners leave 16.16 fixed point.
void affine_float(const Image& in, const double a[6], Image& out) {
  double xo = a[2] + a[1] * 0.5 + a[0] * 0.5;
  double yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
  const std::size_t c = static_cast<std::size_t>(in.channels);
  for (int y = 0; y < out.height; ++y) {
    double xx = xo;
    double yy = yo;
    std::uint8_t* o = out.row(y);
    for (int x = 0; x < out.width; ++x, o += c) {
      const int xin = coord(xx);
      if (xin >= 0 && xin < in.width) {
        const int yin = coord(yy);
        if (yin >= 0 && yin < in.height) put(in, xin, yin, o);
      }
      xx += a[0];
      yy += a[3];
    }
    xo += a[1];
    yo += a[4];
  }
}

inline int xclip(const Image& im, int x) { return x < 0 ? 0 : x < im.width ? x : im.width - 1; }
inline int yclip(const Image& im, int y) { return y < 0 ? 0 : y < im.height ? y : im.height - 1; }
inline double sample_at(const Image& im, int x, int y, int band) {
  return im.row(y)[static_cast<std::size_t>(x) * static_cast<std::size_t>(im.channels) +
                   static_cast<std::size_t>(band)];
}

// Pillow's bilinear_filter8 / bilinear_filter32RGB at source point (xin, yin); false outside.
bool bilinear_at(const Image& im, double xin, double yin, std::uint8_t* out) {
  if (xin < 0.0 || xin >= im.width || yin < 0.0 || yin >= im.height) return false;
  xin -= 0.5;
  yin -= 0.5;
  const int x = floor_int(xin);
  const int y = floor_int(yin);
  const double dx = xin - x;
  const double dy = yin - y;
  const int x0 = xclip(im, x);
  const int x1 = xclip(im, x + 1);
  const int y0 = yclip(im, y);
  const bool below = y + 1 >= 0 && y + 1 < im.height;
  for (int b = 0; b < im.channels; ++b) {
    const double p0 = sample_at(im, x0, y0, b);
    double v1 = p0 + (sample_at(im, x1, y0, b) - p0) * dx;
    double v2 = v1;
    if (below) {
      const double q0 = sample_at(im, x0, y + 1, b);
      v2 = q0 + (sample_at(im, x1, y + 1, b) - q0) * dx;
    }
    v1 = v1 + (v2 - v1) * dy;
    out[b] = static_cast<std::uint8_t>(v1);
  }
  return true;
}

// Pillow's BICUBIC macro (a = -1 cubic convolution, as its affine filter has it).
inline double cubic(double v1, double v2, double v3, double v4, double d) {
  const double p1 = v2;
  const double p2 = -v1 + v3;
  const double p3 = 2 * (v1 - v2) + v3 - v4;
  const double p4 = -v1 + v2 - v3 + v4;
  return p1 + d * (p2 + d * (p3 + d * p4));
}

// Pillow's bicubic_filter8 / bicubic_filter32RGB; false outside.
bool bicubic_at(const Image& im, double xin, double yin, std::uint8_t* out) {
  if (xin < 0.0 || xin >= im.width || yin < 0.0 || yin >= im.height) return false;
  xin -= 0.5;
  yin -= 0.5;
  int x = floor_int(xin);
  int y = floor_int(yin);
  const double dx = xin - x;
  const double dy = yin - y;
  --x;
  --y;
  const int xs[4] = {xclip(im, x), xclip(im, x + 1), xclip(im, x + 2), xclip(im, x + 3)};
  for (int b = 0; b < im.channels; ++b) {
    // Pillow's first pass adds the 8-bit values as integers; exact in double as well.
    auto row = [&](int r) {
      return cubic(sample_at(im, xs[0], r, b), sample_at(im, xs[1], r, b),
                   sample_at(im, xs[2], r, b), sample_at(im, xs[3], r, b), dx);
    };
    const double v1 = row(yclip(im, y));
    const double v2 = y + 1 >= 0 && y + 1 < im.height ? row(y + 1) : v1;
    const double v3 = y + 2 >= 0 && y + 2 < im.height ? row(y + 2) : v2;
    const double v4 = y + 3 >= 0 && y + 3 < im.height ? row(y + 3) : v3;
    const double v = cubic(v1, v2, v3, v4, dy);
    out[b] = v <= 0.0 ? 0 : v >= 255.0 ? 255 : static_cast<std::uint8_t>(v);
  }
  return true;
}

// Pillow's ImagingGenericTransform with the affine map: every output pixel's source point.
template <class Filter>
void affine_filtered(const Image& in, const double a[6], Image& out, Filter filter) {
  const std::size_t c = static_cast<std::size_t>(in.channels);
  for (int y = 0; y < out.height; ++y) {
    std::uint8_t* o = out.row(y);
    const double yin = y + 0.5;
    for (int x = 0; x < out.width; ++x, o += c) {
      const double xin = x + 0.5;
      filter(in, a[0] * xin + a[1] * yin + a[2], a[3] * xin + a[4] * yin + a[5], o);
    }
  }
}

// Pillow's Image.transform(size, AFFINE, a, resample, fillcolor=fill).
void transform_affine(const Image& in, const double a[6], int width, int height,
                      Interpolation interpolation, std::array<std::uint8_t, 3> fill, Image& out) {
  fill_image(out, width, height, in.channels, fill);
  switch (interpolation) {
    case Interpolation::kNearest:
      if (a[1] == 0 && a[3] == 0) return scale_affine(in, a, out);
      if (fits_fixed(a, 0, 0) && fits_fixed(a, width, height) && fits_fixed(a, 0, height) &&
          fits_fixed(a, width, 0)) {
        return affine_fixed(in, a, out);
      }
      return affine_float(in, a, out);
    case Interpolation::kBilinear:
      return affine_filtered(in, a, out, bilinear_at);
    case Interpolation::kBicubic:
      return affine_filtered(in, a, out, bicubic_at);
  }
}

// Pillow's Transpose.ROTATE_90 (counter-clockwise), ROTATE_180 and ROTATE_270.
void transpose(const Image& in, int quarter_turns, Image& out) {
  const int w = in.width;
  const int h = in.height;
  const std::size_t c = static_cast<std::size_t>(in.channels);
  if (quarter_turns == 2) {
    out.reset(w, h, in.channels);
  } else {
    out.reset(h, w, in.channels);
  }
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      int ox = 0;
      int oy = 0;
      if (quarter_turns == 1) {
        ox = y;
        oy = w - 1 - x;
      } else if (quarter_turns == 2) {
        ox = w - 1 - x;
        oy = h - 1 - y;
      } else {
        ox = h - 1 - y;
        oy = x;
      }
      put(in, x, y, out.row(oy) + static_cast<std::size_t>(ox) * c);
    }
  }
}

constexpr double kDegToRad = 3.14159265358979323846 / 180.0;  // CPython's math.radians

// What Pillow's Image.rotate does: a copy (quarter_turns 0), a transpose by quarter turns
// (1, 2, 3: counter-clockwise), or the affine transform by m into width x height (-1).
struct Rotation {
  int quarter_turns = -1;
  double m[6] = {};
  int width = 0;
  int height = 0;
};

Rotation plan_rotation(int w, int h, double angle, bool expand,
                       const std::optional<Point>& center) {
  Rotation r;
  r.width = w;
  r.height = h;
  angle = python_mod(angle, 360.0);
  if (!center) {  // Pillow's transposes, whatever the filter
    if (angle == 0) {
      r.quarter_turns = 0;
      return r;
    }
    if (angle == 180) {
      r.quarter_turns = 2;
      return r;
    }
    if ((angle == 90 || angle == 270) && (expand || w == h)) {
      r.quarter_turns = angle == 90 ? 1 : 3;
      r.width = h;
      r.height = w;
      return r;
    }
  }
  const double cx = center ? center->x : w / 2.0;
  const double cy = center ? center->y : h / 2.0;
  const double radians = -(angle * kDegToRad);
  double* m = r.m;
  m[0] = round15(std::cos(radians));
  m[1] = round15(std::sin(radians));
  m[3] = round15(-std::sin(radians));
  m[4] = round15(std::cos(radians));
  auto apply = [m](double x, double y, double& ox, double& oy) {
    ox = m[0] * x + m[1] * y + m[2];
    oy = m[3] * x + m[4] * y + m[5];
  };
  apply(-cx, -cy, m[2], m[5]);
  m[2] += cx;
  m[5] += cy;
  if (expand) {
    double xs[4];
    double ys[4];
    const double corners[4][2] = {{0.0, 0.0}, {1.0 * w, 0.0}, {1.0 * w, 1.0 * h}, {0.0, 1.0 * h}};
    for (int i = 0; i < 4; ++i) apply(corners[i][0], corners[i][1], xs[i], ys[i]);
    r.width = static_cast<int>(std::ceil(*std::max_element(xs, xs + 4)) -
                               std::floor(*std::min_element(xs, xs + 4)));
    r.height = static_cast<int>(std::ceil(*std::max_element(ys, ys + 4)) -
                                std::floor(*std::min_element(ys, ys + 4)));
    apply(-(r.width - w) / 2.0, -(r.height - h) / 2.0, m[2], m[5]);
  }
  return r;
}

}  // namespace
}  // namespace stoker::vision::functional

namespace stoker::vision::detail {

Size rotated_size(Size input, double angle, bool expand, const std::optional<Point>& center) {
  const functional::Rotation r =
      functional::plan_rotation(input.width, input.height, angle, expand, center);
  return Size{r.height, r.width};
}

}  // namespace stoker::vision::detail

namespace stoker::vision::functional {

void vflip(Image& image) {
  if (image.width < 1 || image.height < 1 ||
      image.pixels.size() < image.row_bytes() * static_cast<std::size_t>(image.height)) {
    throw std::invalid_argument(fmt::format(
        "vision::functional::vflip: the image is {} x {} with {} bytes of pixels; it needs a "
        "size of at least 1 x 1 and all its bytes",
        image.width, image.height, image.pixels.size()));
  }
  for (int a = 0, b = image.height - 1; a < b; ++a, --b) {
    std::swap_ranges(image.row(a), image.row(a) + image.row_bytes(), image.row(b));
  }
}

void rotate(const Image& in, double angle, Interpolation interpolation, bool expand,
            std::optional<Point> center, std::array<std::uint8_t, 3> fill, Image& out) {
  check_geometry_image("rotate", in);
  fill = fill_for("rotate", in, fill);
  if (&in == &out) {
    const Image copy = in;
    return rotate(copy, angle, interpolation, expand, center, fill, out);
  }
  const Rotation r = plan_rotation(in.width, in.height, angle, expand, center);
  if (r.quarter_turns == 0) {
    out = in;
  } else if (r.quarter_turns > 0) {
    transpose(in, r.quarter_turns, out);
  } else {
    transform_affine(in, r.m, r.width, r.height, interpolation, fill, out);
  }
}

void affine(const Image& in, double angle, std::pair<int, int> translate, double scale,
            std::pair<double, double> shear, Interpolation interpolation,
            std::array<std::uint8_t, 3> fill, std::optional<Point> center, Image& out) {
  check_geometry_image("affine", in);
  fill = fill_for("affine", in, fill);
  if (!(scale > 0.0)) {
    throw std::invalid_argument(
        fmt::format("vision::functional::affine: scale is {}; it must be > 0", scale));
  }
  if (&in == &out) {
    const Image copy = in;
    return affine(copy, angle, translate, scale, shear, interpolation, fill, center, out);
  }
  // torchvision's _get_inverse_affine_matrix, term by term.
  const double cx = center ? center->x : in.width * 0.5;
  const double cy = center ? center->y : in.height * 0.5;
  const double rot = angle * kDegToRad;
  const double sx = shear.first * kDegToRad;
  const double sy = shear.second * kDegToRad;
  const double tx = translate.first;
  const double ty = translate.second;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  double m[6] = {d / scale, -b / scale, 0.0 / scale, -c / scale, a / scale, 0.0 / scale};
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  transform_affine(in, m, in.width, in.height, interpolation, fill, out);
}

}  // namespace stoker::vision::functional
