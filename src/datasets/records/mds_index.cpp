#include "datasets/records/mds_index.hpp"

#include <charconv>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "stoker/mds_dataset.hpp"

namespace stoker::detail {
namespace {

using nlohmann::json;

constexpr std::uint64_t kMaxShardBytes = std::uint64_t{1} << 32;  // offsets are u32

struct ScalarName {
  std::string_view name;
  DType dtype;
};
constexpr ScalarName kScalars[] = {
    {"uint8", DType::kUInt8},     {"uint16", DType::kUInt16},   {"uint32", DType::kUInt32},
    {"uint64", DType::kUInt64},   {"int8", DType::kInt8},       {"int16", DType::kInt16},
    {"int32", DType::kInt32},     {"int64", DType::kInt64},     {"float16", DType::kFloat16},
    {"float32", DType::kFloat32}, {"float64", DType::kFloat64},
};

std::optional<DType> scalar_dtype(std::string_view name) noexcept {
  for (const ScalarName& s : kScalars) {
    if (s.name == name) return s.dtype;
  }
  return std::nullopt;
}

[[noreturn]] void bad_encoding(std::string_view text, std::string_view why) {
  throw std::invalid_argument(fmt::format(
      "MDS encoding \"{}\" {}; stoker reads bytes, str, int, uint8..uint64, int8..int64, "
      "float16/32/64, str_int, str_float, str_decimal, ndarray[:dtype[:shape]], jpeg, png, pil "
      "and json: rewrite the column with one of those",
      text, why));
}

// "d0,d1,..." with every dimension >= 1.
std::vector<std::int64_t> parse_shape(std::string_view encoding, std::string_view text) {
  std::vector<std::int64_t> shape;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view part = text.substr(pos, comma - pos);
    std::int64_t dim = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), dim);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size() || dim < 1) {
      bad_encoding(encoding, fmt::format("has a bad shape \"{}\"", text));
    }
    shape.push_back(dim);
    if (shape.size() > Shape::kMaxDims) {
      bad_encoding(encoding, fmt::format("has more than {} dimensions", Shape::kMaxDims));
    }
    pos = comma + 1;
  }
  return shape;
}

}  // namespace

MdsEncoding parse_mds_encoding(std::string_view text) {
  MdsEncoding e;
  e.text = std::string(text);
  const auto fixed = [&](MdsKind kind, std::size_t size) {
    e.kind = kind;
    e.size = size;
    return e;
  };
  const auto variable = [&](MdsKind kind) {
    e.kind = kind;
    return e;
  };
  if (text == "bytes") return variable(MdsKind::kBytes);
  if (text == "str") return variable(MdsKind::kStr);
  if (text == "int") return fixed(MdsKind::kInt, 8);
  if (text == "str_int") return variable(MdsKind::kStrInt);
  if (text == "str_float") return variable(MdsKind::kStrFloat);
  if (text == "str_decimal") return variable(MdsKind::kStrDecimal);
  if (text == "jpeg") return variable(MdsKind::kJpeg);
  if (text == "png") return variable(MdsKind::kPng);
  if (text == "json") return variable(MdsKind::kJson);
  if (text == "pil") return variable(MdsKind::kPil);
  if (text == "pkl") return variable(MdsKind::kPickle);
  if (const auto dtype = scalar_dtype(text)) {
    e.dtype = dtype;
    return fixed(MdsKind::kScalar, dtype_size(*dtype));
  }
  if (text == "ndarray" || text.starts_with("ndarray:")) {
    e.kind = MdsKind::kNdarray;
    if (text.size() == 7) return e;
    const std::string_view args = text.substr(8);
    const std::size_t colon = args.find(':');
    const std::string_view dtype_text = args.substr(0, colon);
    e.dtype = scalar_dtype(dtype_text);
    if (!e.dtype) bad_encoding(text, fmt::format("has an unknown dtype \"{}\"", dtype_text));
    if (colon == std::string_view::npos) return e;
    e.shape = parse_shape(text, args.substr(colon + 1));
    std::size_t numel = 1;
    for (const std::int64_t d : e.shape) {
      if (static_cast<std::uint64_t>(d) > kMaxShardBytes / numel) {
        bad_encoding(text, "has a shape larger than a shard can hold");
      }
      numel *= static_cast<std::size_t>(d);
    }
    e.size = numel * dtype_size(*e.dtype);
    return e;
  }
  if (text == "jpeg_array" || text == "jpegarray" || text.starts_with("list[")) {
    bad_encoding(text, "(a list of images) is not read by stoker");
  }
  bad_encoding(text, "is not an MDS encoding stoker knows");
}

std::uint64_t MdsIndex::total_samples() const noexcept {
  std::uint64_t n = 0;
  for (const MdsShardInfo& s : shards) n += s.samples;
  return n;
}

namespace {

// Reads one shard entry of the index, with messages naming the index, the shard and the key.
class ShardReader {
 public:
  ShardReader(const json& obj, std::string_view source, std::size_t shard)
      : obj_(obj), source_(source), shard_(shard) {}

  [[noreturn]] void fail(std::string_view what) const {
    throw MdsError(
        fmt::format("MdsDataset: {}: shard {}: {}; the index is damaged or was not written "
                    "by MDSWriter: re-create it",
                    source_, shard_, what),
        std::string(source_));
  }

  const json& get(const char* key) const {
    const auto it = obj_.find(key);
    if (it == obj_.end()) fail(fmt::format("no \"{}\"", key));
    return *it;
  }
  std::uint64_t unsigned_value(const json& v, std::string_view key) const {
    if (!v.is_number_unsigned()) fail(fmt::format("\"{}\" is not a non-negative integer", key));
    return v.get<std::uint64_t>();
  }
  const std::string& string_value(const json& v, std::string_view key) const {
    if (!v.is_string()) fail(fmt::format("\"{}\" is not a string", key));
    return v.get_ref<const std::string&>();
  }

  MdsFileInfo file(const json& v, std::string_view key) const {
    if (!v.is_object()) fail(fmt::format("\"{}\" is not an object", key));
    ShardReader in(v, source_, shard_);
    MdsFileInfo info;
    info.basename = string_value(in.get("basename"), "basename");
    if (info.basename.empty() || info.basename.front() == '/' ||
        info.basename.find("..") != std::string::npos ||
        info.basename.find('\0') != std::string::npos) {
      fail(fmt::format("\"{}\" basename \"{}\" is not a relative path inside the directory", key,
                       info.basename));
    }
    info.bytes = unsigned_value(in.get("bytes"), "bytes");
    if (info.bytes >= kMaxShardBytes) {
      fail(fmt::format("\"{}\" says {} bytes; MDS shards are below 4 GiB", key, info.bytes));
    }
    if (const auto it = v.find("hashes"); it != v.end() && !it->is_null()) {
      if (!it->is_object()) fail(fmt::format("\"{}\" hashes is not an object", key));
      for (const auto& [algo, digest] : it->items()) {
        if (!digest.is_string()) fail(fmt::format("hash \"{}\" is not a string", algo));
        std::string hex = digest.get<std::string>();
        for (char& c : hex) c = static_cast<char>(c >= 'A' && c <= 'F' ? c - 'A' + 'a' : c);
        info.hashes.emplace_back(algo, std::move(hex));
      }
    }
    return info;
  }

  MdsShardInfo shard() const {
    if (!obj_.is_object()) fail("the entry is not an object");
    MdsShardInfo info;
    const json& format = get("format");
    if (!format.is_string() || format.get_ref<const std::string&>() != "mds") {
      fail(fmt::format("format {} is not \"mds\" (stoker reads MDS shards only)", format.dump()));
    }
    if (const auto it = obj_.find("version"); it != obj_.end() && *it != 2) {
      fail(fmt::format("shard version {} is not 2", it->dump()));
    }
    const json& names = get("column_names");
    const json& encodings = get("column_encodings");
    const json& sizes = get("column_sizes");
    if (!names.is_array() || !encodings.is_array() || !sizes.is_array() ||
        names.size() != encodings.size() || names.size() != sizes.size() || names.empty()) {
      fail(
          "column_names, column_encodings and column_sizes are not arrays of one non-zero "
          "length");
    }
    for (std::size_t c = 0; c < names.size(); ++c) {
      MdsColumn column;
      column.name = string_value(names[c], "column_names");
      for (const MdsColumn& other : info.columns) {
        if (other.name == column.name)
          fail(fmt::format("column \"{}\" appears twice", column.name));
      }
      try {
        column.encoding = parse_mds_encoding(string_value(encodings[c], "column_encodings"));
      } catch (const std::invalid_argument& e) {
        fail(fmt::format("column \"{}\": {}", column.name, e.what()));
      }
      if (!sizes[c].is_null()) {
        const std::uint64_t size = unsigned_value(sizes[c], "column_sizes");
        if (size >= kMaxShardBytes) fail(fmt::format("column \"{}\" size {}", column.name, size));
        column.size = static_cast<std::uint32_t>(size);
      }
      const auto fixed = column.encoding.size;
      if (fixed.has_value() != column.size.has_value() || (fixed && *fixed != *column.size)) {
        fail(fmt::format("column \"{}\" ({}) has column_size {} where its encoding has {}",
                         column.name, column.encoding.text,
                         column.size ? std::to_string(*column.size) : "null",
                         fixed ? std::to_string(*fixed) : "a variable size"));
      }
      info.columns.push_back(std::move(column));
    }
    if (const auto it = obj_.find("compression"); it != obj_.end() && !it->is_null()) {
      info.compression = string_value(*it, "compression");
      try {
        info.codec = parse_shard_codec(info.compression);
      } catch (const std::invalid_argument& e) {
        fail(e.what());
      }
    }
    info.raw = file(get("raw_data"), "raw_data");
    if (const auto it = obj_.find("zip_data"); it != obj_.end() && !it->is_null()) {
      info.zip = file(*it, "zip_data");
    }
    if (info.zip && info.codec == ShardCodec::kNone) fail("zip_data is given but no compression");
    info.samples = unsigned_value(get("samples"), "samples");
    if (info.samples >= kMaxShardBytes / 4) fail(fmt::format("{} samples", info.samples));
    // The smallest raw shard: the count, the offsets, and no sample data.
    if (info.raw.bytes < 4 * (info.samples + 2)) {
      fail(fmt::format("raw_data is {} bytes, too small for the {} samples' offsets",
                       info.raw.bytes, info.samples));
    }
    return info;
  }

 private:
  const json& obj_;
  std::string_view source_;
  std::size_t shard_;
};

}  // namespace

MdsIndex parse_mds_index(std::string_view text, std::string_view source) {
  const auto fail = [&](std::string_view what) {
    throw MdsError(fmt::format("MdsDataset: {}: {}; check that this is a MosaicML Streaming MDS "
                               "index.json (version 2), or re-create it",
                               source, what),
                   std::string(source));
  };
  const json root = json::parse(text.begin(), text.end(), nullptr, false);
  if (root.is_discarded()) fail("not valid JSON");
  if (!root.is_object()) fail("the top level is not an object");
  const auto version = root.find("version");
  if (version == root.end() || *version != 2) {
    fail(fmt::format("version {} is not 2", version == root.end() ? "(missing)" : version->dump()));
  }
  const auto shards = root.find("shards");
  if (shards == root.end() || !shards->is_array()) fail("no \"shards\" array");
  MdsIndex index;
  index.shards.reserve(shards->size());
  for (std::size_t i = 0; i < shards->size(); ++i) {
    index.shards.push_back(ShardReader((*shards)[i], source, i).shard());
  }
  return index;
}

}  // namespace stoker::detail
