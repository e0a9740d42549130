// PNG decoding through libpng, converted to RGB, grey or RGBA the way Pillow converts what its
// PNG plugin reads: palette images through the palette (transparency dropped for RGB),
// grey 1/2/4-bit scaled to 0..255, 16-bit samples by their high byte, except 16-bit grey,
// which Pillow reads as a 32-bit integer image and clips to 255 when converting.
//
// Errors: libpng reports errors through our error function, which longjmps to the run_*
// function that armed the jump (png_jmpbuf); those hold no C++ object with a destructor
// across it. The caller then throws DecodeError with libpng's message.
//
// Truncation, whatever the region: a region decode reads the rows down to the region's last,
// so a file cut below it would decode. A file whose chunks are all whole up to an IEND chunk
// (their lengths followed from the signature on, without reading their data: a few dozen
// steps) was not cut short; any other (cut short, or without IEND, which Pillow accepts when
// every row decodes) has all its rows decoded, and fails when they are not all there, as
// Pillow's load does.
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "vision/decoders.hpp"

namespace stoker::vision::detail {
namespace {

struct Input {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
  std::size_t at = 0;
  char message[256] = {};
};

// Whether the chunks after the 8-byte signature are whole (each length, type and CRC inside
// the bytes) up to an IEND chunk.
bool chunks_whole(std::span<const std::uint8_t> bytes) {
  std::size_t at = 8;
  while (bytes.size() - at >= 12) {
    const std::uint64_t length = (std::uint64_t{bytes[at]} << 24) |
                                 (std::uint64_t{bytes[at + 1]} << 16) |
                                 (std::uint64_t{bytes[at + 2]} << 8) | bytes[at + 3];
    if (length > bytes.size() - at - 12) return false;
    if (std::memcmp(bytes.data() + at + 4, "IEND", 4) == 0) return true;
    at += 12 + static_cast<std::size_t>(length);
  }
  return false;
}

void on_error(png_structp png, png_const_charp message) {
  auto* in = static_cast<Input*>(png_get_error_ptr(png));
  std::snprintf(in->message, sizeof in->message, "%s", message);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}  // Pillow decodes through warnings too

void on_read(png_structp png, png_bytep out, png_size_t n) {
  auto* in = static_cast<Input*>(png_get_io_ptr(png));
  if (n > in->size - in->at) {
    std::snprintf(in->message, sizeof in->message,
                  "it is truncated: its %zu bytes end before the image does (PNG's rows are not "
                  "all there), as when a copy or download stopped early",
                  in->size);
    png_longjmp(png, 1);
  }
  std::memcpy(out, in->data + in->at, n);
  in->at += n;
}

}  // namespace

struct PngReader::State {
  Input input;
  std::string source;
  png_structp png = nullptr;
  png_infop info = nullptr;
  png_uint_32 width = 0;
  png_uint_32 height = 0;
  int depth = 0;
  int color_type = 0;
  int interlace = 0;
  int passes = 1;
  bool whole = false;              // every chunk whole up to IEND (see the header comment)
  std::vector<std::uint8_t> rows;  // one decoded row, or the whole image when interlaced

  void close() {
    if (png != nullptr) png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
    png = nullptr;
    info = nullptr;
  }
  ~State() { close(); }
};

namespace {

bool run_open(PngReader::State& s) {
  if (setjmp(png_jmpbuf(s.png)) != 0) return false;
  png_set_read_fn(s.png, &s.input, on_read);
  png_set_user_limits(s.png, 0x7fffffff, 0x7fffffff);  // kMaxPixels is checked after
  png_read_info(s.png, s.info);
  png_get_IHDR(s.png, s.info, &s.width, &s.height, &s.depth, &s.color_type, &s.interlace, nullptr,
               nullptr);
  return true;
}

// Sets the expansions (palette -> RGB(A), grey < 8 bits -> 8) and returns the samples per
// pixel of the rows libpng then delivers, through *channels and *depth.
bool run_setup(PngReader::State& s, int* channels, int* depth, std::size_t* row_bytes) {
  if (setjmp(png_jmpbuf(s.png)) != 0) return false;
  if (s.color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(s.png);
  if (s.color_type == PNG_COLOR_TYPE_GRAY && s.depth < 8) png_set_expand_gray_1_2_4_to_8(s.png);
  if (s.interlace != PNG_INTERLACE_NONE) s.passes = png_set_interlace_handling(s.png);
  png_read_update_info(s.png, s.info);
  *channels = png_get_channels(s.png, s.info);
  *depth = png_get_bit_depth(s.png, s.info);
  *row_bytes = png_get_rowbytes(s.png, s.info);
  return true;
}

// Non-interlaced: the next row into buffer. Interlaced (whole): every pass over every row of
// the image in buffer.
bool run_rows(PngReader::State& s, std::uint8_t* buffer, std::size_t row_bytes, bool whole) {
  if (setjmp(png_jmpbuf(s.png)) != 0) return false;
  if (!whole) {
    png_read_row(s.png, buffer, nullptr);
    return true;
  }
  for (int pass = 0; pass < s.passes; ++pass) {
    for (png_uint_32 r = 0; r < s.height; ++r) png_read_row(s.png, buffer + r * row_bytes, nullptr);
  }
  return true;
}

// One source row (channels x depth) to the output row's pixels [x0, x1).
void convert_row(const std::uint8_t* in, int in_channels, int depth, bool grey16_clips, int x0,
                 int x1, ColorMode color, std::uint8_t* out) {
  const int step = in_channels * (depth / 8);
  for (int x = x0; x < x1; ++x) {
    const std::uint8_t* p = in + static_cast<std::ptrdiff_t>(x) * step;
    std::uint8_t v[4] = {0, 0, 0, 255};
    for (int c = 0; c < in_channels; ++c) {
      if (depth == 8) {
        v[c] = p[c];
      } else if (grey16_clips && c == 0) {
        v[c] = static_cast<std::uint8_t>(std::min(255, (p[0] << 8) | p[1]));
      } else {
        v[c] = p[2 * c];  // the high byte
      }
    }
    const bool grey = in_channels <= 2;
    const std::uint8_t alpha = in_channels == 2 ? v[1] : in_channels == 4 ? v[3] : 255;
    switch (color) {
      case ColorMode::kRGB:
        out[0] = v[0];
        out[1] = grey ? v[0] : v[1];
        out[2] = grey ? v[0] : v[2];
        out += 3;
        break;
      case ColorMode::kRGBA:
        out[0] = v[0];
        out[1] = grey ? v[0] : v[1];
        out[2] = grey ? v[0] : v[2];
        out[3] = alpha;
        out += 4;
        break;
      case ColorMode::kGray:
        if (grey) {
          out[0] = v[0];
        } else {
          rgb_to_luma(v, out, 1);
        }
        out += 1;
        break;
    }
  }
}

}  // namespace

PngReader::PngReader() : state_(std::make_unique<State>()) {}
PngReader::~PngReader() = default;

ImageInfo PngReader::open(std::span<const std::uint8_t> bytes, std::string_view source) {
  State& s = *state_;
  s.close();
  s.passes = 1;
  s.source.assign(source);
  s.input = Input{bytes.data(), bytes.size(), 0, {}};
  s.whole = bytes.size() >= 8 && chunks_whole(bytes);
  s.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s.input, on_error, on_warning);
  if (s.png != nullptr) s.info = png_create_info_struct(s.png);
  if (s.png == nullptr || s.info == nullptr) {
    s.close();
    throw_undecodable(source, "libpng could not start (out of memory)");
  }
  if (!run_open(s)) {
    const std::string why = s.input.message;
    s.close();
    throw_undecodable(source, why);
  }
  check_dimensions(source, s.width, s.height);
  ImageInfo info;
  info.format = ImageFormat::kPng;
  info.width = static_cast<int>(s.width);
  info.height = static_cast<int>(s.height);
  switch (s.color_type) {
    case PNG_COLOR_TYPE_GRAY:
      info.channels = 1;
      break;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      info.channels = 2;
      break;
    case PNG_COLOR_TYPE_RGB_ALPHA:
      info.channels = 4;
      break;
    case PNG_COLOR_TYPE_PALETTE:
      info.channels = png_get_valid(s.png, s.info, PNG_INFO_tRNS) != 0 ? 4 : 3;
      break;
    default:
      info.channels = 3;
  }
  return info;
}

void PngReader::read(const DecodeOptions& options, Image& out) {
  State& s = *state_;
  if (s.png == nullptr) throw std::logic_error("vision: PngReader::read without open()");
  int in_channels = 0;
  int depth = 0;
  std::size_t row_bytes = 0;
  if (!run_setup(s, &in_channels, &depth, &row_bytes)) {
    const std::string why = s.input.message;
    s.close();
    throw_undecodable(s.source, why);
  }
  // Palette images become RGB without their transparency unless alpha is asked for.
  const int width = static_cast<int>(s.width);
  const int height = static_cast<int>(s.height);
  const Span2 r = scaled_region(s.source, options, width, height, width, height, 1);
  const int out_channels = options.color == ColorMode::kRGB    ? 3
                           : options.color == ColorMode::kGray ? 1
                                                               : 4;
  out.reset(r.x1 - r.x0, r.y1 - r.y0, out_channels);
  out.x = r.x0;
  out.y = r.y0;
  const bool grey16_clips = s.color_type == PNG_COLOR_TYPE_GRAY && s.depth == 16;
  const bool interlaced = s.interlace != PNG_INTERLACE_NONE;
  s.rows.resize(interlaced ? row_bytes * s.height : row_bytes);
  if (interlaced) {
    if (!run_rows(s, s.rows.data(), row_bytes, true)) {
      const std::string why = s.input.message;
      s.close();
      throw_undecodable(s.source, why);
    }
    for (int y = r.y0; y < r.y1; ++y) {
      convert_row(s.rows.data() + static_cast<std::size_t>(y) * row_bytes, in_channels, depth,
                  grey16_clips, r.x0, r.x1, options.color, out.row(y - r.y0));
    }
  } else {
    const int last = s.whole ? r.y1 : height;  // rows below the region: read, unused
    for (int y = 0; y < last; ++y) {
      if (!run_rows(s, s.rows.data(), row_bytes, false)) {
        const std::string why = s.input.message;
        s.close();
        throw_undecodable(s.source, why);
      }
      if (y >= r.y0 && y < r.y1) {
        convert_row(s.rows.data(), in_channels, depth, grey16_clips, r.x0, r.x1, options.color,
                    out.row(y - r.y0));
      }
    }
  }
  s.close();
}

}  // namespace stoker::vision::detail
