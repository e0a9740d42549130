// JPEG decoding through libjpeg-turbo's libjpeg API (jpeglib.h), set up as Pillow sets it up
// (ISLOW integer IDCT, fancy upsampling, no draft mode), so the pixels are those of
// Image.open(f).convert("RGB"). The libjpeg API rather than TurboJPEG because only it offers
// what a crop needs: jpeg_crop_scanline (decode only the MCU columns of a region) and
// jpeg_skip_scanlines (skip the rows above it without the IDCT).
//
// Errors: libjpeg reports a fatal error through error_exit, which must not return; ours
// longjmps back to the function that armed the jump (run_*), which holds no C++ object with a
// destructor across it, aborts the decompression and reports failure; the caller then throws
// DecodeError. A premature end of the file is a warning in libjpeg (it pads with grey), and an
// error here, as in Pillow.
//
// Truncation, whatever the region: a region decode stops after the region's last row, so the
// end of the file is read only when the file can be cut short there. A file whose last two
// bytes are the end-of-image marker (FF D9) is whole: entropy-coded data cannot contain FF D9,
// and a file cut inside its headers fails in jpeg_read_header. Any other file (cut short, or
// with bytes after its marker, which Pillow accepts) is read to its end-of-image marker below
// the region too: the rows below are entropy-decoded without their IDCT (jpeg_skip_scanlines),
// and a file that ends first fails exactly as a full decode does.
#include <csetjmp>
#include <cstdio>
#include <vector>

// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>

#include <fmt/format.h>

#include "vision/decoders.hpp"

namespace stoker::vision::detail {
namespace {

struct ErrorManager {
  jpeg_error_mgr mgr;  // first: libjpeg sees a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  std::size_t file_size;  // for the truncation message
};

[[noreturn]] void on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void on_message(j_common_ptr cinfo, int level) {
  // level -1 is a warning; a truncated file is the one Pillow fails on.
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
    std::snprintf(err->message, sizeof err->message,
                  "it is truncated: its %zu bytes end before the image does (JPEG's end-of-image "
                  "marker FF D9 is missing), as when a copy or download stopped early",
                  err->file_size);
    std::longjmp(err->jump, 1);
  }
}

// Pillow's CMYK -> RGB for libjpeg's (Adobe-inverted) CMYK rows: with k the stored byte,
// R = k - k * (255 - c) / 255 (rounded as Pillow's MULDIV255), likewise G and B.
void cmyk_row_to_rgb(const std::uint8_t* cmyk, std::uint8_t* rgb, int width) noexcept {
  for (int i = 0; i < width; ++i, cmyk += 4, rgb += 3) {
    const unsigned k = cmyk[3];
    for (int c = 0; c < 3; ++c) {
      const unsigned t = (255u - cmyk[c]) * k + 128u;
      const unsigned scaled = ((t >> 8) + t) >> 8;
      rgb[c] = static_cast<std::uint8_t>(k - scaled);
    }
  }
}

// Ends a run_* function with `why` as the error.
[[noreturn]] void fail(ErrorManager& err, const char* why) {
  std::snprintf(err.message, sizeof err.message, "%s", why);
  std::longjmp(err.jump, 1);
}

}  // namespace

struct JpegReader::State {
  jpeg_decompress_struct cinfo{};
  ErrorManager err{};
  std::string source;
  bool cmyk = false;
  bool ends_with_eoi = false;     // the last two bytes are FF D9 (see the header comment)
  std::vector<std::uint8_t> row;  // one CMYK row, or a row below the region

  State() {
    cinfo.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = on_error;
    err.mgr.emit_message = on_message;
    jpeg_create_decompress(&cinfo);  // cannot fail but for memory, which error_exit reports
  }
  ~State() { jpeg_destroy_decompress(&cinfo); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
};

namespace {

// The run_* functions arm the jump; none holds an object with a destructor.
bool run_open(jpeg_decompress_struct& cinfo, ErrorManager& err, const std::uint8_t* data,
              std::size_t size) {
  if (setjmp(err.jump) != 0) {
    jpeg_abort_decompress(&cinfo);
    return false;
  }
  jpeg_abort_decompress(&cinfo);  // a previous image opened but not read (read_info)
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  return true;
}

bool run_start(jpeg_decompress_struct& cinfo, ErrorManager& err, J_COLOR_SPACE out_space,
               unsigned denom) {
  if (setjmp(err.jump) != 0) {
    jpeg_abort_decompress(&cinfo);
    return false;
  }
  cinfo.out_color_space = out_space;
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.do_fancy_upsampling = TRUE;
  cinfo.do_block_smoothing = TRUE;  // libjpeg's default, which Pillow keeps
  cinfo.scale_num = 1;
  cinfo.scale_denom = denom;
  jpeg_calc_output_dimensions(&cinfo);
  return true;
}

bool run_crop(jpeg_decompress_struct& cinfo, ErrorManager& err, JDIMENSION* x, JDIMENSION* width,
              JDIMENSION skip) {
  if (setjmp(err.jump) != 0) {
    jpeg_abort_decompress(&cinfo);
    return false;
  }
  jpeg_start_decompress(&cinfo);
  if (*x != 0 || *width != cinfo.output_width) jpeg_crop_scanline(&cinfo, x, width);
  if (skip > 0 && jpeg_skip_scanlines(&cinfo, skip) != skip)
    fail(err, "fewer rows than its header says");
  return true;
}

// Reads `count` rows into rows[0..count) (or, for CMYK, through `row` converted to RGB). With
// to_end, then reads on to the end-of-image marker: the rows below the region are skipped
// (entropy-decoded, which reads their data) but the last, read into `spare`, since skipping
// to the very end reads nothing.
bool run_rows(jpeg_decompress_struct& cinfo, ErrorManager& err, std::uint8_t* out,
              std::size_t stride, JDIMENSION count, std::uint8_t* cmyk_row, bool to_end,
              std::uint8_t* spare) {
  if (setjmp(err.jump) != 0) {
    jpeg_abort_decompress(&cinfo);
    return false;
  }
  JDIMENSION done = 0;
  while (done < count) {
    if (cmyk_row != nullptr) {
      JSAMPROW row = cmyk_row;
      if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) fail(err, "fewer rows than its header says");
      cmyk_row_to_rgb(cmyk_row, out + done * stride, static_cast<int>(cinfo.output_width));
      ++done;
      continue;
    }
    JSAMPROW rows[16];
    const JDIMENSION n = std::min<JDIMENSION>(16, count - done);
    for (JDIMENSION i = 0; i < n; ++i) rows[i] = out + (done + i) * stride;
    const JDIMENSION got = jpeg_read_scanlines(&cinfo, rows, n);
    if (got == 0) fail(err, "fewer rows than its header says");
    done += got;
  }
  if (cinfo.output_scanline < cinfo.output_height && !to_end) {
    jpeg_abort_decompress(&cinfo);  // the rows below the region are not needed
    return true;
  }
  const JDIMENSION below = cinfo.output_height - cinfo.output_scanline;
  if (below > 1 && jpeg_skip_scanlines(&cinfo, below - 1) != below - 1) {
    fail(err, "fewer rows than its header says");
  }
  if (below > 0) {
    JSAMPROW row = spare;
    if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) fail(err, "fewer rows than its header says");
  }
  jpeg_finish_decompress(&cinfo);  // reads on to the end-of-image marker
  return true;
}

}  // namespace

JpegReader::JpegReader() : state_(std::make_unique<State>()) {}
JpegReader::~JpegReader() = default;

ImageInfo JpegReader::open(std::span<const std::uint8_t> bytes, std::string_view source) {
  State& s = *state_;
  s.source.assign(source);
  s.err.file_size = bytes.size();
  s.ends_with_eoi =
      bytes.size() >= 2 && bytes[bytes.size() - 2] == 0xff && bytes[bytes.size() - 1] == 0xd9;
  if (!run_open(s.cinfo, s.err, bytes.data(), bytes.size())) {
    throw_undecodable(source, s.err.message);
  }
  check_dimensions(source, s.cinfo.image_width, s.cinfo.image_height);
  ImageInfo info;
  info.format = ImageFormat::kJpeg;
  info.width = static_cast<int>(s.cinfo.image_width);
  info.height = static_cast<int>(s.cinfo.image_height);
  info.channels = s.cinfo.num_components == 4 ? 4 : s.cinfo.num_components == 1 ? 1 : 3;
  s.cmyk = s.cinfo.jpeg_color_space == JCS_CMYK || s.cinfo.jpeg_color_space == JCS_YCCK;
  return info;
}

void JpegReader::read(const DecodeOptions& options, Image& out) {
  State& s = *state_;
  J_COLOR_SPACE space = JCS_RGB;
  int channels = 3;
  if (s.cmyk) {
    space = JCS_CMYK;  // converted to RGB row by row, as Pillow converts
  } else if (options.color == ColorMode::kRGBA) {
    space = JCS_EXT_RGBA;
    channels = 4;
  } else if (options.color == ColorMode::kGray && s.cinfo.jpeg_color_space == JCS_GRAYSCALE) {
    space = JCS_GRAYSCALE;
    channels = 1;
  }
  const auto denom = static_cast<unsigned>(options.scale_denom);
  if (!run_start(s.cinfo, s.err, space, denom)) throw_undecodable(s.source, s.err.message);
  const int width = static_cast<int>(s.cinfo.image_width);
  const int height = static_cast<int>(s.cinfo.image_height);
  const Span2 r =
      scaled_region(s.source, options, width, height, static_cast<int>(s.cinfo.output_width),
                    static_cast<int>(s.cinfo.output_height), options.scale_denom);
  auto x = static_cast<JDIMENSION>(r.x0);
  auto w = static_cast<JDIMENSION>(r.x1 - r.x0);
  if (!run_crop(s.cinfo, s.err, &x, &w, static_cast<JDIMENSION>(r.y0))) {
    throw_undecodable(s.source, s.err.message);
  }
  const int rows = r.y1 - r.y0;
  out.reset(static_cast<int>(w), rows, channels);
  out.full_width = width;
  out.full_height = height;
  out.scale_denom = options.scale_denom;
  out.x = static_cast<int>(x);
  out.y = r.y0;
  s.row.resize(static_cast<std::size_t>(w) * 4);  // CMYK or RGBA: the widest row
  std::uint8_t* cmyk_row = s.cmyk ? s.row.data() : nullptr;
  const std::size_t stride = static_cast<std::size_t>(w) * 3;
  const std::size_t row_bytes = s.cmyk ? stride : out.row_bytes();
  if (!run_rows(s.cinfo, s.err, out.pixels.data(), row_bytes, static_cast<JDIMENSION>(rows),
                cmyk_row, !s.ends_with_eoi, s.row.data())) {
    throw_undecodable(s.source, s.err.message);
  }
  if (s.cmyk && options.color != ColorMode::kRGB) {
    // From the RGB rows: grey as Pillow's convert("L"), or RGBA with opaque alpha.
    const std::size_t n = static_cast<std::size_t>(w) * static_cast<std::size_t>(rows);
    if (options.color == ColorMode::kGray) {
      rgb_to_luma(out.pixels.data(), out.pixels.data(), n);
      out.channels = 1;
    } else {
      out.pixels.resize(std::max(out.pixels.size(), n * 4));
      for (std::size_t i = n; i-- > 0;) {
        out.pixels[i * 4 + 3] = 255;
        for (std::size_t c = 3; c-- > 0;) out.pixels[i * 4 + c] = out.pixels[i * 3 + c];
      }
      out.channels = 4;
    }
  } else if (options.color == ColorMode::kGray && channels == 3) {
    const std::size_t n = static_cast<std::size_t>(w) * static_cast<std::size_t>(rows);
    rgb_to_luma(out.pixels.data(), out.pixels.data(), n);
    out.channels = 1;
  }
}

}  // namespace stoker::vision::detail
