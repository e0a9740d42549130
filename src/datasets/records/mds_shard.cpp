#include "datasets/records/mds_shard.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <limits>

#include <fmt/format.h>
#if defined(STOKER_HAS_OPENSSL)
#include <openssl/evp.h>
#endif
#if defined(STOKER_HAS_XXHASH)
#include <xxhash.h>
#endif

#include "stoker/mds_dataset.hpp"

namespace stoker::detail {
namespace {

std::uint64_t load_le(const std::byte* p, std::size_t n) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i)
    v |= std::uint64_t{static_cast<std::uint8_t>(p[i])} << (8 * i);
  return v;
}

[[noreturn]] void fail(const MdsWhere& where, std::string_view path, std::string_view what,
                       std::string_view advice = "the shard is damaged: re-create or re-copy it") {
  throw MdsError(fmt::format("{}: {}; {}", where.str(), what, advice), std::string(path));
}

// Copies little-endian values into an owning tensor (byte-swapped on a big-endian host).
Tensor copy_values(DType dtype, const Shape& shape, std::span<const std::byte> bytes) {
  Tensor t = Tensor::empty(dtype, shape);
  if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  if constexpr (std::endian::native == std::endian::big) {
    const std::size_t w = dtype_size(dtype);
    for (std::size_t i = 0; w > 1 && i + w <= bytes.size(); i += w) {
      std::reverse(t.raw_data() + i, t.raw_data() + i + w);
    }
  }
  return t;
}

std::string_view as_text(std::span<const std::byte> bytes) noexcept {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::string printable(std::string_view s) {
  std::string out;
  for (const char c : s.substr(0, 40)) out += (c >= 32 && c < 127) ? c : '?';
  return s.size() > 40 ? out + "..." : out;
}

Tensor decode_int_text(std::span<const std::byte> bytes, const MdsWhere& where,
                       std::string_view path) {
  std::string_view text = trim(as_text(bytes));
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    fail(where, path,
         fmt::format("str_int value \"{}\" is not an integer that fits int64",
                     printable(as_text(bytes))));
  }
  return Tensor::scalar<std::int64_t>(v);
}

Tensor decode_float_text(std::span<const std::byte> bytes, std::string_view encoding,
                         const MdsWhere& where, std::string_view path) {
  std::string_view text = trim(as_text(bytes));
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || (ec != std::errc() && ec != std::errc::result_out_of_range) ||
      end != text.data() + text.size()) {
    fail(where, path,
         fmt::format("{} value \"{}\" is not a number", encoding, printable(as_text(bytes))));
  }
  return Tensor::scalar<double>(v);
}

// NDArray's dtype codes: (bits << ...) as MDS numbers them.
std::optional<DType> ndarray_dtype(std::uint8_t code) noexcept {
  switch (code) {
    case 8:
      return DType::kUInt8;
    case 9:
      return DType::kInt8;
    case 16:
      return DType::kUInt16;
    case 17:
      return DType::kInt16;
    case 18:
      return DType::kFloat16;
    case 32:
      return DType::kUInt32;
    case 33:
      return DType::kInt32;
    case 34:
      return DType::kFloat32;
    case 64:
      return DType::kUInt64;
    case 65:
      return DType::kInt64;
    case 66:
      return DType::kFloat64;
    default:
      return std::nullopt;
  }
}

// [dtype: 1 byte, unless the encoding fixes it] [ndim << 2 | shape width code: 1 byte, and
// ndim dimensions of 1, 2, 4 or 8 bytes, unless the encoding fixes the shape] [values].
Tensor decode_ndarray(const MdsEncoding& e, std::span<const std::byte> bytes, const MdsWhere& where,
                      std::string_view path) {
  std::size_t pos = 0;
  const auto need = [&](std::size_t n, std::string_view what) {
    if (n > bytes.size() - pos) {
      fail(where, path,
           fmt::format("ndarray value of {} bytes is too short for its {}", bytes.size(), what));
    }
  };
  DType dtype = DType::kUInt8;
  if (e.dtype) {
    dtype = *e.dtype;
  } else {
    need(1, "dtype byte");
    const auto code = static_cast<std::uint8_t>(bytes[pos++]);
    const auto d = ndarray_dtype(code);
    if (!d) fail(where, path, fmt::format("ndarray dtype code {} is not one MDS defines", code));
    dtype = *d;
  }
  std::int64_t dims[Shape::kMaxDims];
  std::size_t ndim = 0;
  if (!e.shape.empty()) {
    ndim = e.shape.size();
    std::copy(e.shape.begin(), e.shape.end(), dims);
  } else {
    need(1, "shape byte");
    const auto byte = static_cast<std::uint8_t>(bytes[pos++]);
    ndim = byte >> 2;
    const std::size_t width = std::size_t{1} << (byte & 3U);
    if (ndim > Shape::kMaxDims) {
      fail(where, path,
           fmt::format("ndarray of {} dimensions; stoker tensors have at most {}", ndim,
                       Shape::kMaxDims),
           "reshape the column to fewer dimensions");
    }
    need(ndim * width, "shape");
    for (std::size_t d = 0; d < ndim; ++d) {
      const std::uint64_t dim = load_le(bytes.data() + pos, width);
      pos += width;
      if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        fail(where, path, fmt::format("ndarray dimension {} is too large", dim));
      }
      dims[d] = static_cast<std::int64_t>(dim);
    }
  }
  std::size_t numel = 1;
  for (std::size_t d = 0; d < ndim; ++d) {
    const auto dim = static_cast<std::uint64_t>(dims[d]);
    if (dim != 0 && numel > (bytes.size() - pos) / dim) {
      fail(where, path,
           fmt::format("ndarray shape holds more values than its {} bytes", bytes.size()));
    }
    numel *= static_cast<std::size_t>(dim);
  }
  const std::size_t left = bytes.size() - pos;
  if (numel * dtype_size(dtype) != left) {
    fail(where, path,
         fmt::format("ndarray of {} x {} values has {} bytes of data, not {}", numel,
                     dtype_name(dtype), left, numel * dtype_size(dtype)));
  }
  return copy_values(dtype, Shape(std::span<const std::int64_t>(dims, ndim)), bytes.subspan(pos));
}

// PIL: [width u32] [height u32] [mode length u32] [mode] [pixels, row-major, channels last].
Tensor decode_pil(std::span<const std::byte> bytes, const MdsWhere& where, std::string_view path) {
  if (bytes.size() < 12) fail(where, path, fmt::format("pil value of {} bytes", bytes.size()));
  const std::uint64_t width = load_le(bytes.data(), 4);
  const std::uint64_t height = load_le(bytes.data() + 4, 4);
  const std::uint64_t mode_bytes = load_le(bytes.data() + 8, 4);
  if (mode_bytes > bytes.size() - 12) fail(where, path, "pil mode runs past the value");
  const std::string_view mode = as_text(bytes.subspan(12, static_cast<std::size_t>(mode_bytes)));
  std::uint64_t channels = 0;
  if (mode == "L") channels = 1;
  if (mode == "LA") channels = 2;
  if (mode == "RGB") channels = 3;
  if (mode == "RGBA") channels = 4;
  if (channels == 0) {
    fail(where, path, fmt::format("pil image of mode \"{}\"", printable(mode)),
         "stoker reads modes L, LA, RGB and RGBA: convert the images, or store them as png");
  }
  const auto pixels = bytes.subspan(12 + static_cast<std::size_t>(mode_bytes));
  if (width * height * channels != pixels.size()) {  // each factor < 2^32: no overflow past 2^96
    fail(where, path,
         fmt::format("pil image {}x{} {} needs {} bytes, the value has {}", width, height, mode,
                     width * height * channels, pixels.size()));
  }
  return copy_values(DType::kUInt8,
                     Shape{static_cast<std::int64_t>(height), static_cast<std::int64_t>(width),
                           static_cast<std::int64_t>(channels)},
                     pixels);
}

}  // namespace

void check_mds_shard(std::span<const std::byte> shard, const MdsShardInfo& info,
                     const MdsWhere& where, std::string_view path) {
  const auto bad = [&](std::string_view what) { fail(where, path, what); };
  if (shard.size() != info.raw.bytes) {
    bad(fmt::format("the shard is {} bytes, index.json says {}", shard.size(), info.raw.bytes));
  }
  if (shard.size() < 4) bad("the shard is shorter than its sample count");
  const std::uint64_t n = load_le(shard.data(), 4);
  if (n != info.samples)
    bad(fmt::format("the shard holds {} samples, index.json says {}", n, info.samples));
  const std::uint64_t header = 4 * (n + 2);
  if (header > shard.size())
    bad(fmt::format("{} bytes are too few for {} offsets", shard.size(), n + 1));
  std::uint64_t previous = header;
  for (std::uint64_t k = 0; k <= n; ++k) {
    const std::uint64_t offset = load_le(shard.data() + 4 + 4 * k, 4);
    if (offset < previous || offset > shard.size()) {
      bad(fmt::format("offset {} of sample {} is outside [{}, {}]", offset, k, previous,
                      shard.size()));
    }
    previous = offset;
  }
  if (previous != shard.size()) {
    bad(fmt::format("the last sample ends at byte {} of {} (trailing bytes)", previous,
                    shard.size()));
  }
}

MdsSampleRange mds_sample_range(std::span<const std::byte> offset_pair, std::uint64_t k,
                                const MdsShardInfo& info, const MdsWhere& where,
                                std::string_view path) {
  if (offset_pair.size() < 8) fail(where, path, "the offset table is truncated");
  const MdsSampleRange r{load_le(offset_pair.data(), 4), load_le(offset_pair.data() + 4, 4)};
  const std::uint64_t header = 4 * (info.samples + 2);
  if (r.begin < header || r.end < r.begin || r.end > info.raw.bytes) {
    fail(where, path,
         fmt::format("sample {}: offsets [{}, {}) are outside the shard's samples [{}, {})", k,
                     r.begin, r.end, header, info.raw.bytes));
  }
  return r;
}

void split_mds_sample(std::span<const std::byte> sample, const std::vector<MdsColumn>& columns,
                      std::vector<MdsCell>& out, const MdsWhere& where, std::string_view path) {
  out.resize(columns.size());
  std::size_t pos = 0;
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (columns[c].size) {
      out[c].size = *columns[c].size;
      continue;
    }
    if (sample.size() - pos < 4) {
      fail(where, path,
           fmt::format("the sample of {} bytes ends inside its column sizes", sample.size()));
    }
    out[c].size = static_cast<std::size_t>(load_le(sample.data() + pos, 4));
    pos += 4;
  }
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (out[c].size > sample.size() - pos) {
      fail(where, path,
           fmt::format("column \"{}\" of {} bytes runs past the sample's end ({} bytes)",
                       columns[c].name, out[c].size, sample.size()));
    }
    out[c].offset = pos;
    pos += out[c].size;
  }
  if (pos != sample.size()) {
    fail(where, path,
         fmt::format("the columns take {} bytes of the sample's {}", pos, sample.size()));
  }
}

Tensor decode_mds_value(const MdsEncoding& encoding, std::span<const std::byte> bytes,
                        const MdsWhere& where, std::string_view path) {
  switch (encoding.kind) {
    case MdsKind::kBytes:
    case MdsKind::kStr:
    case MdsKind::kJson:
    case MdsKind::kJpeg:
    case MdsKind::kPng:
      return copy_values(DType::kUInt8, Shape{static_cast<std::int64_t>(bytes.size())}, bytes);
    case MdsKind::kInt:
    case MdsKind::kScalar: {
      const DType dtype = encoding.dtype.value_or(DType::kInt64);
      if (bytes.size() != dtype_size(dtype)) {
        fail(where, path, fmt::format("{} value of {} bytes", encoding.text, bytes.size()));
      }
      return copy_values(dtype, Shape{}, bytes);
    }
    case MdsKind::kStrInt:
      return decode_int_text(bytes, where, path);
    case MdsKind::kStrFloat:
    case MdsKind::kStrDecimal:
      return decode_float_text(bytes, encoding.text, where, path);
    case MdsKind::kNdarray:
      return decode_ndarray(encoding, bytes, where, path);
    case MdsKind::kPil:
      return decode_pil(bytes, where, path);
    case MdsKind::kPickle:
      break;
  }
  fail(where, path, "a pkl (Python pickle) value",
       "stoker refuses pickle: unpickling runs arbitrary code and has no C++ reader; rewrite "
       "the column with a typed encoding (ndarray, json, bytes, int...)");
}

namespace {

struct HashAlgorithm {
  std::string_view name;     // as hashlib / xxhash name it
  std::string_view openssl;  // EVP name; empty for the xxhashes
};
// Fastest first: what pick_mds_hash prefers.
constexpr HashAlgorithm kHashes[] = {
    {"xxh3_64", ""},
    {"xxh3_128", ""},
    {"xxh128", ""},
    {"xxh64", ""},
    {"xxh32", ""},
    {"blake2b", "BLAKE2B-512"},
    {"blake2s", "BLAKE2S-256"},
    {"sha1", "SHA1"},
    {"md5", "MD5"},
    {"sha512", "SHA512"},
    {"sha384", "SHA384"},
    {"sha256", "SHA256"},
    {"sha224", "SHA224"},
    {"sha512_224", "SHA512-224"},
    {"sha512_256", "SHA512-256"},
    {"sha3_224", "SHA3-224"},
    {"sha3_256", "SHA3-256"},
    {"sha3_384", "SHA3-384"},
    {"sha3_512", "SHA3-512"},
};

const HashAlgorithm* find_hash(std::string_view name) noexcept {
  for (const HashAlgorithm& h : kHashes) {
    if (h.name == name) return &h;
  }
  return nullptr;
}

}  // namespace

bool mds_hash_available(std::string_view algorithm) noexcept {
  const HashAlgorithm* h = find_hash(algorithm);
  if (h == nullptr) return false;
#if defined(STOKER_HAS_XXHASH)
  if (h->openssl.empty()) return true;
#endif
#if defined(STOKER_HAS_OPENSSL)
  if (!h->openssl.empty()) return EVP_get_digestbyname(std::string(h->openssl).c_str()) != nullptr;
#endif
  return false;
}

std::optional<std::string> mds_hash(std::string_view algorithm, std::span<const std::byte> data) {
  if (!mds_hash_available(algorithm)) return std::nullopt;
  const HashAlgorithm* h = find_hash(algorithm);
#if defined(STOKER_HAS_XXHASH)
  if (h->name == "xxh32") return fmt::format("{:08x}", XXH32(data.data(), data.size(), 0));
  if (h->name == "xxh64") return fmt::format("{:016x}", XXH64(data.data(), data.size(), 0));
  if (h->name == "xxh3_64") return fmt::format("{:016x}", XXH3_64bits(data.data(), data.size()));
  if (h->name == "xxh128" || h->name == "xxh3_128") {
    const XXH128_hash_t v = XXH3_128bits(data.data(), data.size());
    return fmt::format("{:016x}{:016x}", v.high64, v.low64);
  }
#endif
#if defined(STOKER_HAS_OPENSSL)
  const EVP_MD* md = EVP_get_digestbyname(std::string(h->openssl).c_str());
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (md == nullptr || EVP_Digest(data.data(), data.size(), digest, &length, md, nullptr) != 1) {
    return std::nullopt;
  }
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
#else
  (void)h;
  return std::nullopt;
#endif
}

const std::pair<std::string, std::string>* pick_mds_hash(const MdsFileInfo& file) noexcept {
  for (const HashAlgorithm& h : kHashes) {
    for (const auto& entry : file.hashes) {
      if (entry.first == h.name && mds_hash_available(h.name)) return &entry;
    }
  }
  return nullptr;
}

}  // namespace stoker::detail
