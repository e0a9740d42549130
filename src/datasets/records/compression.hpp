// Byte sources for the record readers: a file or pipe read sequentially, gzip or zlib inflated
// on the fly (TFRecord's GZIP and ZLIB files), and whole-buffer decompression of the codecs MDS
// shards use (zstd, gz, bz2, br). Every error names the source and what to do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace stoker::detail {

// A sequential stream of bytes. Single owner, one process.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Up to `n` bytes into `dst`; 0 only at the end. Blocks (a pipe waits for its writer).
  // Throws stoker::Error naming the source for a read error or corrupt compressed data.
  virtual std::size_t read(std::byte* dst, std::size_t n) = 0;
};

// A file, FIFO or character device read with read(2); "-" is standard input. Throws
// stoker::Error naming `path` when it cannot be opened.
std::unique_ptr<ByteSource> open_file_source(const std::string& path);
// The bytes of `data` (a mapping or buffer the caller keeps alive).
std::unique_ptr<ByteSource> memory_source(std::span<const std::byte> data);
// zlib's inflate over `raw`: gzip (also several concatenated members) or a zlib stream,
// told apart by their headers. `name` is used in messages.
std::unique_ptr<ByteSource> inflate_source(std::unique_ptr<ByteSource> raw, std::string name);

// How a TFRecord file is compressed, from its first bytes: gzip's magic 1f 8b, a zlib header
// (CMF/FLG with deflate and a valid check), or plain. A plain file whose first frame has a good
// length CRC is plain whatever its first bytes are.
enum class StreamCodec : std::uint8_t { kNone, kGzip, kZlib };
StreamCodec sniff_tfrecord_codec(std::span<const std::byte> head) noexcept;

// The codecs of MDS shards ("zstd", "gz", "bz2", "br" before an optional ":level").
enum class ShardCodec : std::uint8_t { kNone, kZstd, kGzip, kBzip2, kBrotli };
// Throws std::invalid_argument for a name stoker does not read, listing those it does.
ShardCodec parse_shard_codec(std::string_view compression);
std::string_view shard_codec_name(ShardCodec codec) noexcept;
// Whether this build can decompress `codec` (bz2 and br are optional).
bool shard_codec_available(ShardCodec codec) noexcept;

// Decompresses all of `data`, which must decompress to exactly `expected_bytes`. Throws
// stoker::Error naming `source` for corrupt data, a different size, or a codec this build
// lacks (saying what to install).
std::vector<std::byte> decompress_shard(ShardCodec codec, std::span<const std::byte> data,
                                        std::size_t expected_bytes, std::string_view source);

// Compression, for tests and tools: zstd at `level`, gzip at `level` (zlib's format when
// `zlib_format`), and any shard codec this build has (throws stoker::Error for one it lacks).
std::vector<std::byte> compress_zstd(std::span<const std::byte> data, int level = 3);
std::vector<std::byte> compress_deflate(std::span<const std::byte> data, bool zlib_format = false,
                                        int level = 6);
std::vector<std::byte> compress_shard(ShardCodec codec, std::span<const std::byte> data);

}  // namespace stoker::detail
