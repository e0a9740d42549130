// MosaicML Streaming's MDS index (index.json, version 2), the pure part: the JSON text to a
// checked description of each shard (columns with their encodings and fixed sizes, the raw and
// compressed files with their sizes and hashes, the sample count), and the column encodings.
// Nothing here opens a file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "datasets/records/compression.hpp"
#include "stoker/tensor.hpp"

namespace stoker::detail {

enum class MdsKind : std::uint8_t {
  kBytes,       // uint8 [n], as stored
  kStr,         // UTF-8 text: uint8 [n]
  kInt,         // "int": int64, 8 bytes
  kScalar,      // "uint8" ... "float64": one value of `dtype`
  kStrInt,      // decimal text -> int64
  kStrFloat,    // text -> float64
  kStrDecimal,  // decimal text -> float64 (Python's Decimal has more precision than that)
  kNdarray,     // "ndarray[:dtype[:d0,d1,...]]"
  kJpeg,        // encoded image bytes, decoded by name ("jpeg") through the field decoders
  kPng,
  kJson,    // JSON text: uint8 [n]
  kPil,     // PIL's raw pixels: uint8 [H, W, C] for modes L, LA, RGB, RGBA
  kPickle,  // "pkl": refused (unpickling runs code, and has no C++ reader)
};

struct MdsEncoding {
  std::string text;  // as the index spells it
  MdsKind kind = MdsKind::kBytes;
  std::optional<DType> dtype;       // kScalar; kNdarray when the encoding fixes it
  std::vector<std::int64_t> shape;  // kNdarray when the encoding fixes it (else empty)
  std::optional<std::size_t> size;  // bytes per value when fixed
};

// Throws std::invalid_argument for an encoding stoker does not read, naming it and listing
// those it does. "pkl" parses (as kPickle): whether to refuse is the dataset's decision.
MdsEncoding parse_mds_encoding(std::string_view text);

struct MdsColumn {
  std::string name;
  MdsEncoding encoding;
  std::optional<std::uint32_t> size;  // column_sizes: fixed bytes, or variable (a u32 each)
};

struct MdsFileInfo {
  std::string basename;  // relative to the index's directory
  std::uint64_t bytes = 0;
  std::vector<std::pair<std::string, std::string>> hashes;  // algorithm, lower-case hex digest
};

struct MdsShardInfo {
  std::vector<MdsColumn> columns;
  std::string compression;  // "" or "zstd:7", ...
  ShardCodec codec = ShardCodec::kNone;
  MdsFileInfo raw;
  std::optional<MdsFileInfo> zip;
  std::uint64_t samples = 0;
};

struct MdsIndex {
  std::vector<MdsShardInfo> shards;
  std::uint64_t total_samples() const noexcept;
};

// Parses index.json's text; `source` (its path) names it in messages. Checks: version 2, each
// shard's format "mds" and version 2, columns (names, encodings and sizes of equal count, a
// fixed size that matches its encoding's), sample count below 2^32, file sizes below 2^32
// (the shard's offsets are u32), basenames relative and without "..". Throws MdsError naming
// `source`, the shard and the key that is wrong; never reads past `text`.
MdsIndex parse_mds_index(std::string_view text, std::string_view source);

}  // namespace stoker::detail
