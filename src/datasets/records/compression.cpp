#include "datasets/records/compression.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <zlib.h>
#include <zstd.h>
#if defined(STOKER_HAS_BZIP2)
#include <bzlib.h>
#endif
#if defined(STOKER_HAS_BROTLI)
#include <brotli/decode.h>
#include <brotli/encode.h>
#endif

#include "datasets/records/crc32c.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {
namespace {

constexpr std::size_t kChunk = std::size_t{1} << 18;  // 256 KiB reads
constexpr std::size_t kTFRecordSniffBytes = 12;       // a TFRecord header

// Bytes already read from `rest` (to sniff them), then the rest.
class PrefixSource final : public StreamSource {
 public:
  PrefixSource(std::vector<std::byte> prefix, std::unique_ptr<StreamSource> rest)
      : prefix_(std::move(prefix)), rest_(std::move(rest)) {}
  std::size_t read(std::span<std::byte> dst) override {
    if (used_ < prefix_.size()) {
      const std::size_t take = std::min(dst.size(), prefix_.size() - used_);
      std::memcpy(dst.data(), prefix_.data() + used_, take);
      used_ += take;
      return take;
    }
    return rest_->read(dst);
  }

 private:
  std::vector<std::byte> prefix_;
  std::size_t used_ = 0;
  std::unique_ptr<StreamSource> rest_;
};

class InflateSource final : public StreamSource {
 public:
  InflateSource(std::unique_ptr<StreamSource> raw, std::string name)
      : raw_(std::move(raw)), name_(std::move(name)), in_(kChunk) {
    std::memset(&z_, 0, sizeof(z_));
    // 15 + 32: the largest window, and a gzip or zlib header detected from the stream.
    if (inflateInit2(&z_, 15 + 32) != Z_OK) throw std::bad_alloc();
  }
  ~InflateSource() override { inflateEnd(&z_); }
  InflateSource(const InflateSource&) = delete;
  InflateSource& operator=(const InflateSource&) = delete;

  // Small reads (a tar's 512-byte headers, a TFRecord's 12-byte frame) are served from a
  // buffer filled by one large inflate() call: zlib's fast loop needs room for 258 bytes of
  // output, and each call costs its setup, so inflating 512 bytes at a time ran a .tar.gz
  // stream about 20% slower than libarchive's buffered decoder did.
  std::size_t read(std::span<std::byte> out) override {
    if (out.empty()) return 0;
    if (begin_ == end_) {
      if (out.size() >= out_.size()) return inflate_into(out.data(), out.size());
      begin_ = 0;
      end_ = inflate_into(out_.data(), out_.size());
      if (end_ == 0) return 0;
    }
    const std::size_t take = std::min(out.size(), end_ - begin_);
    std::memcpy(out.data(), out_.data() + begin_, take);
    begin_ += take;
    return take;
  }

 private:
  std::size_t inflate_into(std::byte* const dst, const std::size_t n) {
    if (finished_ || n == 0) return 0;
    z_.next_out = reinterpret_cast<Bytef*>(dst);
    z_.avail_out = static_cast<uInt>(std::min<std::size_t>(n, 1U << 30));
    while (z_.avail_out == static_cast<uInt>(std::min<std::size_t>(n, 1U << 30))) {
      if (z_.avail_in == 0 && !raw_done_) {
        const std::size_t got = raw_->read(in_);
        if (got == 0) {
          raw_done_ = true;
        } else {
          z_.next_in = reinterpret_cast<Bytef*>(in_.data());
          z_.avail_in = static_cast<uInt>(got);
          consumed_ += got;
        }
      }
      if (z_.avail_in == 0 && raw_done_) {
        if (in_member_) fail("the compressed stream ends in the middle (truncated file)");
        finished_ = true;
        break;
      }
      in_member_ = true;
      const int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        in_member_ = false;
        inflateReset(&z_);  // gzip files may hold several members back to back
        continue;
      }
      if (rc == Z_BUF_ERROR) continue;  // needs more input
      if (rc != Z_OK) fail(z_.msg != nullptr ? z_.msg : "inflate failed");
    }
    return static_cast<std::size_t>(reinterpret_cast<std::byte*>(z_.next_out) - dst);
  }

  [[noreturn]] void fail(std::string_view what) {
    finished_ = true;
    throw Error(fmt::format(
        "decompressing {}: corrupt gzip/zlib data near compressed byte {} ({}); the file is "
        "damaged or not compressed as its name says: re-create or re-copy it",
        name_, consumed_ - z_.avail_in, what));
  }

  std::unique_ptr<StreamSource> raw_;
  std::string name_;
  std::vector<std::byte> in_;
  std::vector<std::byte> out_ = std::vector<std::byte>(kChunk);
  std::size_t begin_ = 0;  // out_[begin_, end_): inflated, not yet read
  std::size_t end_ = 0;
  z_stream z_;
  std::uint64_t consumed_ = 0;
  bool raw_done_ = false;
  bool in_member_ = false;
  bool finished_ = false;
};

[[noreturn]] void throw_decompress(std::string_view codec, std::string_view source,
                                   std::string_view what) {
  throw Error(
      fmt::format("decompressing {} ({}): {}; the shard is damaged: re-create or re-copy "
                  "it",
                  source, codec, what));
}

void check_size(std::string_view codec, std::string_view source, std::size_t got,
                std::size_t expected) {
  if (got != expected) {
    throw_decompress(codec, source,
                     fmt::format("it decompresses to {} bytes, the index says {}", got, expected));
  }
}

// The codecs below decompress into `expected` + 1 bytes: a spare byte filled means the data is
// larger than the index says.
[[noreturn]] void throw_too_large(std::string_view codec, std::string_view source,
                                  std::size_t expected) {
  throw_decompress(
      codec, source,
      fmt::format("it decompresses to more than the {} bytes the index says", expected));
}

std::vector<std::byte> unzstd(std::span<const std::byte> data, std::size_t expected,
                              std::string_view source) {
  std::vector<std::byte> out(expected + 1);
  std::unique_ptr<ZSTD_DStream, decltype(&ZSTD_freeDStream)> z(ZSTD_createDStream(),
                                                               &ZSTD_freeDStream);
  if (z == nullptr) throw std::bad_alloc();
  ZSTD_inBuffer in{data.data(), data.size(), 0};
  ZSTD_outBuffer o{out.data(), out.size(), 0};
  // Frames back to back decompress to their concatenation.
  for (;;) {
    const std::size_t rc = ZSTD_decompressStream(z.get(), &o, &in);
    if (ZSTD_isError(rc) != 0) throw_decompress("zstd", source, ZSTD_getErrorName(rc));
    if (o.pos > expected) throw_too_large("zstd", source, expected);
    if (in.pos == in.size) {
      if (rc != 0) throw_decompress("zstd", source, "the data ends inside a frame (truncated)");
      break;
    }
  }
  check_size("zstd", source, o.pos, expected);
  out.resize(expected);
  return out;
}

std::vector<std::byte> gunzip(std::span<const std::byte> data, std::size_t expected,
                              std::string_view source) {
  std::vector<std::byte> out(expected + 1);
  InflateSource inflater(memory_source(data), std::string(source));
  std::size_t got = 0;
  while (got < out.size()) {
    const std::size_t n = inflater.read(std::span<std::byte>(out).subspan(got));
    if (n == 0) break;
    got += n;
  }
  if (got > expected) throw_too_large("gz", source, expected);
  check_size("gz", source, got, expected);
  out.resize(expected);
  return out;
}

#if defined(STOKER_HAS_BZIP2)
std::vector<std::byte> bunzip2(std::span<const std::byte> data, std::size_t expected,
                               std::string_view source) {
  std::vector<std::byte> out(expected + 1);
  bz_stream z;
  std::memset(&z, 0, sizeof(z));
  if (BZ2_bzDecompressInit(&z, 0, 0) != BZ_OK) throw std::bad_alloc();
  std::size_t in_pos = 0;
  std::size_t out_pos = 0;
  for (;;) {
    const std::size_t in_take = std::min<std::size_t>(data.size() - in_pos, 1U << 30);
    const std::size_t out_take = std::min<std::size_t>(out.size() - out_pos, 1U << 30);
    z.next_in = const_cast<char*>(reinterpret_cast<const char*>(data.data() + in_pos));
    z.avail_in = static_cast<unsigned>(in_take);
    z.next_out = reinterpret_cast<char*>(out.data() + out_pos);
    z.avail_out = static_cast<unsigned>(out_take);
    const int rc = BZ2_bzDecompress(&z);
    in_pos += in_take - z.avail_in;
    out_pos += out_take - z.avail_out;
    const bool progress = z.avail_in != in_take || z.avail_out != out_take;
    if (rc == BZ_STREAM_END && in_pos < data.size()) {
      BZ2_bzDecompressEnd(&z);  // another stream follows (pbzip2 writes several)
      std::memset(&z, 0, sizeof(z));
      if (BZ2_bzDecompressInit(&z, 0, 0) != BZ_OK) throw std::bad_alloc();
      continue;
    }
    if (rc == BZ_STREAM_END || rc != BZ_OK || out_pos > expected || !progress) {
      BZ2_bzDecompressEnd(&z);
      if (rc != BZ_OK && rc != BZ_STREAM_END) {
        throw_decompress("bz2", source, fmt::format("libbz2 error {}", rc));
      }
      if (out_pos > expected) throw_too_large("bz2", source, expected);
      if (rc != BZ_STREAM_END) throw_decompress("bz2", source, "the stream is truncated");
      break;
    }
  }
  check_size("bz2", source, out_pos, expected);
  out.resize(expected);
  return out;
}
#endif

#if defined(STOKER_HAS_BROTLI)
std::vector<std::byte> unbrotli(std::span<const std::byte> data, std::size_t expected,
                                std::string_view source) {
  std::vector<std::byte> out(expected + 1);
  BrotliDecoderState* s = BrotliDecoderCreateInstance(nullptr, nullptr, nullptr);
  if (s == nullptr) throw std::bad_alloc();
  std::size_t avail_in = data.size();
  const auto* next_in = reinterpret_cast<const std::uint8_t*>(data.data());
  std::size_t avail_out = out.size();
  auto* next_out = reinterpret_cast<std::uint8_t*>(out.data());
  const BrotliDecoderResult r =
      BrotliDecoderDecompressStream(s, &avail_in, &next_in, &avail_out, &next_out, nullptr);
  const std::string error = BrotliDecoderErrorString(BrotliDecoderGetErrorCode(s));
  BrotliDecoderDestroyInstance(s);
  const std::size_t got = out.size() - avail_out;
  if (r == BROTLI_DECODER_RESULT_ERROR) throw_decompress("br", source, error);
  if (got > expected || r == BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT) {
    throw_too_large("br", source, expected);
  }
  if (r != BROTLI_DECODER_RESULT_SUCCESS) throw_decompress("br", source, "the stream is truncated");
  check_size("br", source, got, expected);
  out.resize(expected);
  return out;
}
#endif

}  // namespace

std::unique_ptr<StreamSource> inflate_source(std::unique_ptr<StreamSource> raw, std::string name) {
  return std::make_unique<InflateSource>(std::move(raw), std::move(name));
}

StreamCodec sniff_tfrecord_codec(std::span<const std::byte> head) noexcept {
  if (head.size() >= 12) {
    std::uint32_t stored;
    std::memcpy(&stored, head.data() + 8, 4);
    if constexpr (std::endian::native == std::endian::big) stored = __builtin_bswap32(stored);
    if (stored == mask_crc32c(crc32c(head.first(8)))) return StreamCodec::kNone;
  }
  if (head.size() >= 2) {
    const auto b0 = static_cast<unsigned>(head[0]);
    const auto b1 = static_cast<unsigned>(head[1]);
    if (b0 == 0x1F && b1 == 0x8B) return StreamCodec::kGzip;
    if ((b0 & 0x0FU) == 8 && (b0 >> 4) <= 7 && ((b0 << 8) | b1) % 31 == 0) {
      return StreamCodec::kZlib;
    }
  }
  return StreamCodec::kNone;
}

std::unique_ptr<StreamSource> tfrecord_source(std::unique_ptr<StreamSource> raw, std::string name,
                                              StreamCodec* codec) {
  std::vector<std::byte> head(kTFRecordSniffBytes);
  std::size_t got = 0;
  while (got < head.size()) {
    const std::size_t n = raw->read(std::span<std::byte>(head).subspan(got));
    if (n == 0) break;
    got += n;
  }
  head.resize(got);
  const StreamCodec found = sniff_tfrecord_codec(head);
  if (codec != nullptr) *codec = found;
  auto source = std::make_unique<PrefixSource>(std::move(head), std::move(raw));
  if (found == StreamCodec::kNone) return source;
  return inflate_source(std::move(source), std::move(name));
}

ShardCodec parse_shard_codec(std::string_view compression) {
  const std::string_view name = compression.substr(0, compression.find(':'));
  if (name.empty() && compression.empty()) return ShardCodec::kNone;
  if (name == "zstd") return ShardCodec::kZstd;
  if (name == "gz") return ShardCodec::kGzip;
  if (name == "bz2") return ShardCodec::kBzip2;
  if (name == "br") return ShardCodec::kBrotli;
  throw std::invalid_argument(fmt::format(
      "MDS compression \"{}\" is not one stoker reads (it reads zstd, gz, bz2 and br; snappy "
      "is not supported): decompress the shards, or rewrite them with one of those",
      compression));
}

std::string_view shard_codec_name(ShardCodec codec) noexcept {
  switch (codec) {
    case ShardCodec::kNone:
      return "none";
    case ShardCodec::kZstd:
      return "zstd";
    case ShardCodec::kGzip:
      return "gz";
    case ShardCodec::kBzip2:
      return "bz2";
    case ShardCodec::kBrotli:
      return "br";
  }
  return "unknown";
}

bool shard_codec_available(ShardCodec codec) noexcept {
  switch (codec) {
    case ShardCodec::kBzip2:
#if defined(STOKER_HAS_BZIP2)
      return true;
#else
      return false;
#endif
    case ShardCodec::kBrotli:
#if defined(STOKER_HAS_BROTLI)
      return true;
#else
      return false;
#endif
    default:
      return true;
  }
}

std::vector<std::byte> decompress_shard(ShardCodec codec, std::span<const std::byte> data,
                                        std::size_t expected_bytes, std::string_view source) {
  switch (codec) {
    case ShardCodec::kNone:
      check_size("none", source, data.size(), expected_bytes);
      return {data.begin(), data.end()};
    case ShardCodec::kZstd:
      return unzstd(data, expected_bytes, source);
    case ShardCodec::kGzip:
      return gunzip(data, expected_bytes, source);
    case ShardCodec::kBzip2:
#if defined(STOKER_HAS_BZIP2)
      return bunzip2(data, expected_bytes, source);
#else
      throw Error(
          fmt::format("decompressing {}: this stoker was built without libbz2; install "
                      "libbz2-dev and rebuild, or decompress the shard",
                      source));
#endif
    case ShardCodec::kBrotli:
#if defined(STOKER_HAS_BROTLI)
      return unbrotli(data, expected_bytes, source);
#else
      throw Error(
          fmt::format("decompressing {}: this stoker was built without libbrotli; "
                      "install libbrotli-dev and rebuild, or decompress the shard",
                      source));
#endif
  }
  throw Error(fmt::format("decompressing {}: unknown codec", source));
}

std::vector<std::byte> compress_zstd(std::span<const std::byte> data, int level) {
  std::vector<std::byte> out(ZSTD_compressBound(data.size()));
  const std::size_t n = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), level);
  if (ZSTD_isError(n) != 0) throw Error(fmt::format("zstd: {}", ZSTD_getErrorName(n)));
  out.resize(n);
  return out;
}

std::vector<std::byte> compress_deflate(std::span<const std::byte> data, bool zlib_format,
                                        int level) {
  z_stream z;
  std::memset(&z, 0, sizeof(z));
  if (deflateInit2(&z, level, Z_DEFLATED, zlib_format ? 15 : 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    throw std::bad_alloc();
  }
  std::vector<std::byte> out(deflateBound(&z, static_cast<uLong>(data.size())) + 64);
  z.next_in = const_cast<Bytef*>(reinterpret_cast<const Bytef*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw Error("deflate: output buffer too small");
  out.resize(z.total_out);
  return out;
}

std::vector<std::byte> compress_shard(ShardCodec codec, std::span<const std::byte> data) {
  switch (codec) {
    case ShardCodec::kNone:
      return {data.begin(), data.end()};
    case ShardCodec::kZstd:
      return compress_zstd(data);
    case ShardCodec::kGzip:
      return compress_deflate(data);
    case ShardCodec::kBzip2: {
#if defined(STOKER_HAS_BZIP2)
      std::vector<std::byte> out(data.size() + data.size() / 100 + 600);
      auto n = static_cast<unsigned>(out.size());
      const int rc =
          BZ2_bzBuffToBuffCompress(reinterpret_cast<char*>(out.data()), &n,
                                   const_cast<char*>(reinterpret_cast<const char*>(data.data())),
                                   static_cast<unsigned>(data.size()), 9, 0, 0);
      if (rc != BZ_OK) throw Error(fmt::format("bz2: compression failed ({})", rc));
      out.resize(n);
      return out;
#else
      break;
#endif
    }
    case ShardCodec::kBrotli: {
#if defined(STOKER_HAS_BROTLI)
      std::vector<std::byte> out(BrotliEncoderMaxCompressedSize(data.size()) + 16);
      std::size_t n = out.size();
      if (BrotliEncoderCompress(BROTLI_DEFAULT_QUALITY, BROTLI_DEFAULT_WINDOW, BROTLI_MODE_GENERIC,
                                data.size(), reinterpret_cast<const std::uint8_t*>(data.data()), &n,
                                reinterpret_cast<std::uint8_t*>(out.data())) != BROTLI_TRUE) {
        throw Error("br: compression failed");
      }
      out.resize(n);
      return out;
#else
      break;
#endif
    }
  }
  throw Error(fmt::format("compressing with {}: not in this build", shard_codec_name(codec)));
}

}  // namespace stoker::detail
