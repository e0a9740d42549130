// The image decoders behind stoker::vision::decode (private to libstoker). Each reader decodes
// in two steps, so a Pipeline can plan its crop and DCT scale from the header before any pixel
// is decoded: open() reads the header, read() the pixels. A reader is reused from image to
// image (one per thread), keeping the codec's state and buffers allocated.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "stoker/vision/image.hpp"

namespace stoker::vision::detail {

// "vision::decode: cannot decode <source>: <reason>; ..." as a DecodeError.
[[noreturn]] void throw_undecodable(std::string_view source, std::string_view reason);
// Checks width x height against kMaxPixels; throws DecodeError naming source.
void check_dimensions(std::string_view source, std::int64_t width, std::int64_t height);
// The region of a width x height image that `roi` asks for, scaled by 1/denom, as scaled
// pixel bounds [x0, x1) x [y0, y1) (the whole image without a roi). Throws DecodeError for
// a region outside the image.
struct Span2 {
  int x0, y0, x1, y1;
};
Span2 scaled_region(std::string_view source, const DecodeOptions& options, int width, int height,
                    int scaled_width, int scaled_height, int denom);
// RGB pixels (3 per pixel, n pixels) to Pillow's "L": (19595 R + 38470 G + 7471 B + 2^15) >> 16.
void rgb_to_luma(const std::uint8_t* rgb, std::uint8_t* grey, std::size_t n) noexcept;

class JpegReader {
 public:
  JpegReader();
  ~JpegReader();
  JpegReader(const JpegReader&) = delete;
  JpegReader& operator=(const JpegReader&) = delete;
  ImageInfo open(std::span<const std::uint8_t> bytes, std::string_view source);
  void read(const DecodeOptions& options, Image& out);

  struct State;  // the codec's state (in the decoder's .cpp)

 private:
  std::unique_ptr<State> state_;
};

class PngReader {
 public:
  PngReader();
  ~PngReader();
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;
  ImageInfo open(std::span<const std::uint8_t> bytes, std::string_view source);
  void read(const DecodeOptions& options, Image& out);

  struct State;  // the codec's state (in the decoder's .cpp)

 private:
  std::unique_ptr<State> state_;
};

class WebpReader {
 public:
  WebpReader();
  ~WebpReader();
  WebpReader(const WebpReader&) = delete;
  WebpReader& operator=(const WebpReader&) = delete;
  ImageInfo open(std::span<const std::uint8_t> bytes, std::string_view source);
  void read(const DecodeOptions& options, Image& out);

  struct State;  // the codec's state (in the decoder's .cpp)

 private:
  std::unique_ptr<State> state_;
};

// Any format, by its magic number: open() then read(), as the readers above.
class Reader {
 public:
  Reader();
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  ImageInfo open(std::span<const std::uint8_t> bytes, std::string_view source);
  void read(const DecodeOptions& options, Image& out);
  // This thread's reader (decode() and Pipeline use it).
  static Reader& for_this_thread();

 private:
  ImageFormat format_ = ImageFormat::kUnknown;
  std::unique_ptr<JpegReader> jpeg_;
  std::unique_ptr<PngReader> png_;
  std::unique_ptr<WebpReader> webp_;
};

}  // namespace stoker::vision::detail
