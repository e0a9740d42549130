#include "stoker/npy_dataset.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "data/format.hpp"
#include "os/mapped_file.hpp"
#include "os/posix.hpp"

namespace stoker {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicBytes = 6;
constexpr std::size_t kAlign = 64;

// A cursor over the header's dictionary text, with the file's name for messages.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  [[noreturn]] void fail(std::string_view what) const {
    throw NpyFormatError(fmt::format(
        "npy: {}: malformed header ({} at character {} of \"{}\"); the file is not a valid "
        ".npy file, or was cut short",
        source_, what, pos_, printable()));
  }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool peek(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(fmt::format("expected '{}'", c));
    ++pos_;
  }
  std::string string_literal() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      fail("expected a quoted string");
    }
    const char quote = text_[pos_++];
    const std::size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return value;
  }
  bool boolean() {
    skip_space();
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    fail("expected True or False");
  }
  std::vector<std::int64_t> tuple() {
    expect('(');
    std::vector<std::int64_t> values;
    while (!peek(')')) {
      skip_space();
      std::uint64_t value = 0;
      std::size_t digits = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        const auto digit = static_cast<std::uint64_t>(text_[pos_] - '0');
        if (value >
            (static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) - digit) / 10) {
          fail("a dimension too large");
        }
        value = value * 10 + digit;
        ++pos_;
        ++digits;
      }
      if (digits == 0) fail("expected a non-negative integer dimension");
      if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2's long suffix
      values.push_back(static_cast<std::int64_t>(value));
      if (peek(',')) {
        ++pos_;
      } else if (!peek(')')) {
        fail("expected ',' or ')' in the shape");
      }
    }
    ++pos_;
    return values;
  }
  bool at_end() {
    skip_space();
    return pos_ == text_.size();
  }

 private:
  std::string printable() const {
    std::string out;
    for (const char c : text_.substr(0, 120)) {
      out += (c >= 32 && c < 127) ? c : '?';
    }
    return text_.size() > 120 ? out + "..." : out;
  }
  std::string_view text_;
  std::string_view source_;
  std::size_t pos_ = 0;
};

struct DescrInfo {
  DType dtype;
  bool big_endian;
};

DescrInfo parse_descr(const std::string& descr, std::string_view source) {
  auto unsupported = [&](std::string_view why) {
    return NpyFormatError(
        fmt::format("npy: {}: dtype '{}' is {}; stoker reads numeric and bool "
                    "arrays (convert with arr.astype(...) before saving)",
                    source, descr, why));
  };
  std::size_t pos = 0;
  bool big_endian = false;
  if (!descr.empty() &&
      (descr[0] == '<' || descr[0] == '>' || descr[0] == '|' || descr[0] == '=')) {
    big_endian = descr[0] == '>';
    pos = 1;
  }
  if (pos >= descr.size()) throw unsupported("empty");
  const char kind = descr[pos];
  const std::string size_text = descr.substr(pos + 1);
  if (kind == 'O') throw unsupported("an object dtype (Python objects cannot be memory-mapped)");
  if (kind == 'U' || kind == 'S' || kind == 'a') throw unsupported("a string dtype");
  if (kind == 'V') throw unsupported("a structured or void dtype");
  if (kind == 'c') throw unsupported("complex");
  if (kind == 'M' || kind == 'm') throw unsupported("a datetime dtype");
  const std::pair<std::string_view, DType> known[] = {
      {"b1", DType::kBool},    {"i1", DType::kInt8},    {"i2", DType::kInt16},
      {"i4", DType::kInt32},   {"i8", DType::kInt64},   {"u1", DType::kUInt8},
      {"u2", DType::kUInt16},  {"u4", DType::kUInt32},  {"u8", DType::kUInt64},
      {"f2", DType::kFloat16}, {"f4", DType::kFloat32}, {"f8", DType::kFloat64},
  };
  const std::string code = std::string(1, kind) + size_text;
  for (const auto& [name, dtype] : known) {
    if (code == name) return {dtype, big_endian && dtype_size(dtype) > 1};
  }
  throw unsupported("not one stoker knows");
}

std::uint32_t read_le(std::span<const std::byte> bytes, std::size_t at, std::size_t width) {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < width; ++i) {
    value |= static_cast<std::uint32_t>(std::to_integer<std::uint8_t>(bytes[at + i])) << (8 * i);
  }
  return value;
}

std::string descr_of(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return "|b1";
    case DType::kInt8:
      return "|i1";
    case DType::kUInt8:
      return "|u1";
    case DType::kInt16:
      return "<i2";
    case DType::kUInt16:
      return "<u2";
    case DType::kInt32:
      return "<i4";
    case DType::kUInt32:
      return "<u4";
    case DType::kInt64:
      return "<i8";
    case DType::kUInt64:
      return "<u8";
    case DType::kFloat16:
      return "<f2";
    case DType::kFloat32:
      return "<f4";
    case DType::kFloat64:
      return "<f8";
    case DType::kBFloat16:
      break;
  }
  throw std::invalid_argument(fmt::format(
      "make_npy_header: NumPy has no {} dtype; store it as uint16 and convert on reading",
      dtype_name(dtype)));
}

}  // namespace

NpyArray parse_npy_header(std::span<const std::byte> bytes, std::string_view source) {
  if (bytes.size() < 10) {
    throw NpyFormatError(fmt::format(
        "npy: {}: {} bytes is too short for a .npy file (its preamble alone is 10 bytes)", source,
        bytes.size()));
  }
  if (std::memcmp(bytes.data(), kMagic, kMagicBytes) != 0) {
    throw NpyFormatError(fmt::format(
        "npy: {}: not a .npy file (it does not start with \\x93NUMPY); for .npz archives, "
        "unzip them first",
        source));
  }
  NpyArray array;
  array.major_version = std::to_integer<int>(bytes[6]);
  array.minor_version = std::to_integer<int>(bytes[7]);
  if (array.major_version < 1 || array.major_version > 3) {
    throw NpyFormatError(fmt::format(
        "npy: {}: format version {}.{} is not supported (stoker reads 1.0, 2.0 and 3.0)", source,
        array.major_version, array.minor_version));
  }
  const std::size_t length_width = array.major_version == 1 ? 2 : 4;
  const std::size_t header_start = 8 + length_width;
  if (bytes.size() < header_start) {
    throw NpyFormatError(fmt::format("npy: {}: the preamble is cut short", source));
  }
  const std::size_t header_length = read_le(bytes, 8, length_width);
  if (header_length > bytes.size() - header_start) {
    throw NpyFormatError(fmt::format(
        "npy: {}: the header says it is {} bytes long but only {} follow; the file was cut short",
        source, header_length, bytes.size() - header_start));
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + header_start),
                              header_length);
  HeaderParser parser(text, source);
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<std::int64_t>> shape;
  parser.expect('{');
  while (!parser.peek('}')) {
    const std::string key = parser.string_literal();
    parser.expect(':');
    if (key == "descr") {
      if (parser.peek('[')) {
        throw NpyFormatError(fmt::format(
            "npy: {}: a structured dtype (a list of fields) is not supported; save each field "
            "as its own .npy file and give NpyDataset one file per field",
            source));
      }
      descr = parser.string_literal();
    } else if (key == "fortran_order") {
      fortran_order = parser.boolean();
    } else if (key == "shape") {
      shape = parser.tuple();
    } else {
      parser.fail(fmt::format("unexpected key '{}'", key));
    }
    if (parser.peek(',')) {
      parser.expect(',');
    } else if (!parser.peek('}')) {
      parser.fail("expected ',' or '}'");
    }
  }
  parser.expect('}');
  if (!parser.at_end()) parser.fail("text after the dictionary");
  if (!descr || !fortran_order || !shape) {
    parser.fail("the header must have 'descr', 'fortran_order' and 'shape'");
  }
  if (*fortran_order) {
    throw NpyFormatError(fmt::format(
        "npy: {}: the array is in Fortran (column-major) order; stoker reads C order. Save it "
        "with np.save(path, np.ascontiguousarray(arr))",
        source));
  }
  const DescrInfo info = parse_descr(*descr, source);
  array.dtype = info.dtype;
  array.big_endian = info.big_endian;
  array.shape = std::move(*shape);
  array.data_offset = header_start + header_length;
  std::size_t total = dtype_size(array.dtype);
  for (const std::int64_t d : array.shape) {
    if (__builtin_mul_overflow(total, static_cast<std::size_t>(d), &total)) {
      throw NpyFormatError(fmt::format("npy: {}: the shape's size overflows", source));
    }
  }
  array.data_bytes = total;
  return array;
}

std::vector<std::byte> make_npy_header(DType dtype, std::span<const std::int64_t> shape) {
  std::string dims;
  for (const std::int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("make_npy_header: a dimension is negative");
    dims += std::to_string(d) + ", ";
  }
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // "(5,)" keeps its comma; "(2, 3)" not
  if (shape.size() == 1) dims.resize(dims.size() - 1);
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}",
                                 descr_of(dtype), dims);
  int version = 1;
  std::size_t preamble = 10;
  std::size_t total = (preamble + dict.size() + 1 + kAlign - 1) / kAlign * kAlign;
  if (total - preamble > 0xffff) {
    version = 2;
    preamble = 12;
    total = (preamble + dict.size() + 1 + kAlign - 1) / kAlign * kAlign;
  }
  dict.append(total - preamble - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::vector<std::byte> out(total);
  std::memcpy(out.data(), kMagic, kMagicBytes);
  out[6] = static_cast<std::byte>(version);
  out[7] = std::byte{0};
  const std::size_t length = dict.size();
  for (std::size_t i = 0; i < preamble - 8; ++i) {
    out[8 + i] = static_cast<std::byte>((length >> (8 * i)) & 0xff);
  }
  std::memcpy(out.data() + preamble, dict.data(), dict.size());
  return out;
}

NpyDataset::NpyDataset(std::vector<std::pair<std::string, std::string>> field_files) {
  if (field_files.empty()) throw std::invalid_argument("NpyDataset: no files given");
  for (auto& [name, path] : field_files) {
    FieldFile field;
    field.name = name;
    field.path = path;
    std::shared_ptr<const detail::MappedFile> mapping =
        detail::MappedFile::open(path, "NpyDataset");
    const std::size_t file_size = mapping->size();
    field.array = parse_npy_header(mapping->bytes(), path);
    mapping->check("NpyDataset", 0);
    const NpyArray& a = field.array;
    if (a.data_bytes > file_size - std::min(file_size, a.data_offset)) {
      throw NpyFormatError(fmt::format(
          "npy: {}: truncated: the header describes {} {} ({}) from byte {}, but the file is "
          "only {} long",
          path, fmt::join(a.shape, " x "), dtype_name(a.dtype), detail::format_bytes(a.data_bytes),
          a.data_offset, detail::format_bytes(file_size)));
    }
    if (a.shape.empty()) {
      throw std::invalid_argument(fmt::format(
          "NpyDataset: {} holds a 0-d array; its first dimension must index the samples", path));
    }
    if (a.shape.size() > Shape::kMaxDims) {
      throw std::invalid_argument(
          fmt::format("NpyDataset: {} has {} dimensions; a sample may have at most {}", path,
                      a.shape.size(), Shape::kMaxDims - 1));
    }
    field.sample_shape = Shape(std::span<const std::int64_t>(a.shape).subspan(1));
    field.sample_bytes = field.sample_shape.numel() * dtype_size(a.dtype);
    field.mapping = std::move(mapping);
    fields_.push_back(std::move(field));
  }
  size_ = static_cast<std::size_t>(fields_[0].array.shape[0]);
  for (const FieldFile& field : fields_) {
    if (static_cast<std::size_t>(field.array.shape[0]) != size_) {
      throw std::invalid_argument(fmt::format(
          "NpyDataset: {} ('{}') has {} rows but {} ('{}') has {}; every file must have one row "
          "per sample",
          field.path, field.name, field.array.shape[0], fields_[0].path, fields_[0].name, size_));
    }
  }
}

Sample NpyDataset::get(std::size_t i) const {
  if (i >= size_) {
    throw std::out_of_range(
        fmt::format("NpyDataset::get: index {} of a dataset of {} samples", i, size_));
  }
  Sample s;
  for (const FieldFile& field : fields_) {
    const std::size_t at = field.array.data_offset + i * field.sample_bytes;
    const std::byte* row = field.mapping->data() + at;
    if (!field.array.big_endian) {
      // A file cut since it was opened: an error now rather than a view of zeros.
      if (!field.mapping->intact()) throw_shrunk(field, i, at);
      // Read-only memory: the view must not be written to.
      s.set(field.name, Tensor::view(field.array.dtype, field.sample_shape,
                                     const_cast<std::byte*>(row), field.mapping));
      continue;
    }
    Tensor swapped = Tensor::empty(field.array.dtype, field.sample_shape);
    const std::size_t width = dtype_size(field.array.dtype);
    std::byte* out = swapped.raw_data();
    for (std::size_t e = 0; e < field.sample_bytes; e += width) {
      for (std::size_t b = 0; b < width; ++b) out[e + b] = row[e + width - 1 - b];
    }
    if (!field.mapping->intact()) throw_shrunk(field, i, at);
    s.set(field.name, std::move(swapped));
  }
  return s;
}

void NpyDataset::throw_shrunk(const FieldFile& field, std::size_t i, std::size_t at) const {
  field.mapping->throw_shrunk(fmt::format("NpyDataset::get: field '{}' row {} (bytes {} to {})",
                                          field.name, i, at, at + field.sample_bytes),
                              at);
}

const NpyArray& NpyDataset::array(std::string_view field) const {
  for (const FieldFile& f : fields_) {
    if (f.name == field) return f.array;
  }
  throw std::out_of_range(fmt::format("NpyDataset::array: no field named '{}'", field));
}

}  // namespace stoker
