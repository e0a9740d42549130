// Decompression for the record readers: gzip or zlib inflated on the fly over any StreamSource
// (TFRecord's GZIP and ZLIB files, which need not be named .gz), and whole-buffer
// decompression of the codecs MDS shards use (zstd, gz, bz2, br). Every error names the source
// and what to do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/shards/byte_source.hpp"

namespace stoker::detail {

// zlib's inflate over `raw`: gzip (also several concatenated members) or a zlib stream,
// told apart by their headers. `name` is used in messages; read() throws stoker::Error naming
// it for corrupt or truncated compressed data.
std::unique_ptr<StreamSource> inflate_source(std::unique_ptr<StreamSource> raw, std::string name);

// How a TFRecord file is compressed, from its first bytes: gzip's magic 1f 8b, a zlib header
// (CMF/FLG with deflate and a valid check), or plain. A plain file whose first frame has a good
// length CRC is plain whatever its first bytes are.
enum class StreamCodec : std::uint8_t { kNone, kGzip, kZlib };
StreamCodec sniff_tfrecord_codec(std::span<const std::byte> head) noexcept;
// `raw` as TFRecord bytes: its first bytes are read and sniffed, and a gzip or zlib stream is
// inflated. `codec`, when given, receives what was found. Throws as raw's read().
std::unique_ptr<StreamSource> tfrecord_source(std::unique_ptr<StreamSource> raw, std::string name,
                                              StreamCodec* codec = nullptr);

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
