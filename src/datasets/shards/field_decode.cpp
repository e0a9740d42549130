// Fields by name: the built-in decoders, the FieldDecoders table, and FieldPlan, which turns a
// record's named fields into a Sample.
#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "datasets/shards/shard_format.hpp"
#include "stoker/errors.hpp"
#include "stoker/npy_dataset.hpp"

#include "stoker/vision.hpp"

namespace stoker {
namespace {

using DecoderFn = Tensor (*)(std::span<const std::uint8_t>, std::string_view);

constexpr std::string_view kIntFields[] = {"cls", "cls2", "class", "count", "index", "inx", "id"};
constexpr std::string_view kImageFields[] = {"jpg", "jpeg", "png", "webp"};

bool is_space(std::uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// ASCII decimal with optional sign and surrounding white space.
bool parse_int(std::span<const std::uint8_t> bytes, std::int64_t& out) {
  std::size_t b = 0;
  std::size_t e = bytes.size();
  while (b < e && is_space(bytes[b])) ++b;
  while (e > b && is_space(bytes[e - 1])) --e;
  if (b == e) return false;
  bool negative = false;
  if (bytes[b] == '-' || bytes[b] == '+') {
    negative = bytes[b] == '-';
    ++b;
  }
  if (b == e) return false;
  std::uint64_t v = 0;
  const std::uint64_t limit =
      negative ? std::uint64_t{1} << 63 : static_cast<std::uint64_t>(INT64_MAX);
  for (; b < e; ++b) {
    if (bytes[b] < '0' || bytes[b] > '9') return false;
    const auto digit = static_cast<std::uint64_t>(bytes[b] - '0');
    if (v > (limit - digit) / 10) return false;
    v = v * 10 + digit;
  }
  out = negative ? static_cast<std::int64_t>(0 - v) : static_cast<std::int64_t>(v);
  return true;
}

std::string printable(std::span<const std::uint8_t> bytes) {
  std::string out;
  for (std::size_t i = 0; i < bytes.size() && i < 40; ++i) {
    out += bytes[i] >= 32 && bytes[i] < 127 ? static_cast<char>(bytes[i]) : '?';
  }
  return bytes.size() > 40 ? out + "..." : out;
}

[[noreturn]] void not_an_int(std::span<const std::uint8_t> bytes, std::string_view source) {
  throw Error(fmt::format(
      "{}: '{}' is not an integer; an integer field (.cls) holds its number as ASCII text, "
      "such as \"7\"; give the field another decoder (ShardOptions::decoders) if it is not one",
      source, printable(bytes)));
}

std::string_view last_extension(std::string_view field) {
  const std::size_t dot = field.rfind('.');
  return dot == std::string_view::npos ? std::string_view{} : field.substr(dot + 1);
}

}  // namespace

Tensor decode_raw_field(std::span<const std::uint8_t> bytes, std::string_view) {
  return Tensor::from(bytes);
}

Tensor decode_int_field(std::span<const std::uint8_t> bytes, std::string_view source) {
  std::int64_t v = 0;
  if (!parse_int(bytes, v)) not_an_int(bytes, source);
  return Tensor::scalar<std::int64_t>(v);
}

Tensor decode_npy_field(std::span<const std::uint8_t> bytes, std::string_view source) {
  const std::span<const std::byte> raw = std::as_bytes(bytes);
  const NpyArray a = parse_npy_header(raw, source);
  if (a.data_bytes > raw.size() - std::min(raw.size(), a.data_offset)) {
    throw NpyFormatError(fmt::format(
        "npy: {}: the header describes {} bytes of data but {} follow it; the field was cut "
        "short or is not a .npy file",
        source, a.data_bytes, raw.size() - std::min(raw.size(), a.data_offset)));
  }
  if (a.shape.size() > Shape::kMaxDims) {
    throw NpyFormatError(fmt::format("npy: {}: {} dimensions; a field may have at most {}", source,
                                     a.shape.size(), Shape::kMaxDims));
  }
  Tensor t = Tensor::empty(a.dtype, Shape(std::span<const std::int64_t>(a.shape)));
  const std::byte* from = raw.data() + a.data_offset;
  if (!a.big_endian) {
    if (a.data_bytes != 0) std::memcpy(t.raw_data(), from, a.data_bytes);
    return t;
  }
  const std::size_t width = dtype_size(a.dtype);
  std::byte* out = t.raw_data();
  for (std::size_t e = 0; e < a.data_bytes; e += width) {
    for (std::size_t b = 0; b < width; ++b) out[e + b] = from[e + width - 1 - b];
  }
  return t;
}

FieldDecoders FieldDecoders::defaults() {
  FieldDecoders d;
  for (const std::string_view name : kIntFields) d.set(std::string(name), &decode_int_field);
  d.set("npy", &decode_npy_field);
  d.images(image_field(vision::Pipeline{}));
  return d;
}

FieldDecoders& FieldDecoders::set(std::string name, FieldDecoder decoder) {
  if (name.empty()) throw std::invalid_argument("FieldDecoders::set: the field name is empty");
  for (auto& [existing, fn] : entries_) {
    if (existing == name) {
      fn = std::move(decoder);
      return *this;
    }
  }
  entries_.emplace_back(std::move(name), std::move(decoder));
  return *this;
}

FieldDecoders& FieldDecoders::images(FieldDecoder decoder) {
  for (const std::string_view name : kImageFields) set(std::string(name), decoder);
  return *this;
}

const FieldDecoder* FieldDecoders::find(std::string_view field) const noexcept {
  const std::string_view extension = last_extension(field);
  const FieldDecoder* by_extension = nullptr;
  for (const auto& [name, fn] : entries_) {
    if (name == field) return fn ? &fn : nullptr;
    if (!extension.empty() && name == extension) by_extension = &fn;
  }
  return by_extension != nullptr && *by_extension ? by_extension : nullptr;
}

namespace detail {

bool is_int_field_name(std::string_view name) noexcept {
  const std::string_view extension = last_extension(name);
  for (const std::string_view n : kIntFields) {
    if (n == name || n == extension) return true;
  }
  return false;
}

std::span<std::byte> RawRecord::own(std::size_t n) {
  storage.resize(n);
  data = storage;
  return storage;
}

void RawRecord::clear() noexcept {
  shard = 0;
  ordinal = 0;
  offset = 0;
  key.clear();
  error.clear();
  fields.clear();
  storage.clear();
  data = {};
  mapping.reset();
}

std::string RecordRef::describe() const {
  if (key.empty())
    return fmt::format("{}: {}: record {} at byte {}", format, shard, ordinal, offset);
  return fmt::format("{}: {}: record {} ('{}') at byte {}", format, shard, ordinal, key, offset);
}

FieldPlan::FieldPlan(const ShardOptions& options) : decoders_(options.decoders) {
  for (const FieldSpec& spec : options.fields) {
    Selected s;
    std::string_view rest = spec.name;
    while (!rest.empty()) {
      const std::size_t semi = rest.find(';');
      const std::string_view one = rest.substr(0, semi);
      if (!one.empty()) s.alternatives.emplace_back(one);
      if (semi == std::string_view::npos) break;
      rest.remove_prefix(semi + 1);
    }
    if (s.alternatives.empty()) {
      throw std::invalid_argument(
          "ShardOptions::fields: a FieldSpec has no field name; give one such as \"jpg\" or "
          "\"jpg;png\"");
    }
    s.output = spec.as.empty() ? s.alternatives.front() : spec.as;
    for (const Selected& other : selected_) {
      if (other.output == s.output) {
        throw std::invalid_argument(fmt::format(
            "ShardOptions::fields: two fields become the Sample field '{}'; give one of them "
            "another FieldSpec::as",
            s.output));
      }
    }
    s.decoder = spec.decoder;
    selected_.push_back(std::move(s));
  }
}

bool FieldPlan::wants(std::string_view name) const noexcept {
  if (selected_.empty()) return true;
  for (const Selected& s : selected_) {
    for (const std::string& alt : s.alternatives) {
      if (alt == name) return true;
    }
  }
  return false;
}

Tensor FieldPlan::decode(const RawField& field, std::span<const std::byte> bytes,
                         const FieldDecoder* decoder, const RecordRef& where) const {
  if (field.value.defined()) return field.value;
  if (field.offset > bytes.size() || field.size > bytes.size() - field.offset) {
    throw Error(fmt::format("{}: field '{}' lies outside the record's {} bytes", where.describe(),
                            field.name, bytes.size()));
  }
  const auto* begin = reinterpret_cast<const std::uint8_t*>(bytes.data() + field.offset);
  const std::span<const std::uint8_t> value(begin, field.size);
  if (decoder == nullptr) decoder = decoders_.find(field.name);
  if (decoder == nullptr) return Tensor::from(value);
  // The built-in integer decoder needs no message unless it fails: skip formatting one.
  if (const DecoderFn* fn = decoder->target<DecoderFn>();
      fn != nullptr && *fn == &decode_int_field) {
    std::int64_t v = 0;
    if (parse_int(value, v)) return Tensor::scalar<std::int64_t>(v);
  }
  const std::string source = fmt::format("{}, field '{}'", where.describe(), field.name);
  try {
    return (*decoder)(value, source);
  } catch (const Error&) {
    throw;  // stoker's decoders name the source themselves
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
}

Sample FieldPlan::assemble(const RawRecord& record, const RecordRef& where) const {
  Sample sample;
  const std::span<const std::byte> bytes = record.bytes();
  if (selected_.empty()) {
    for (const RawField& field : record.fields) {
      sample.set(field.name, decode(field, bytes, nullptr, where));
    }
    return sample;
  }
  for (const Selected& s : selected_) {
    const RawField* match = nullptr;
    for (const std::string& alt : s.alternatives) {
      for (const RawField& field : record.fields) {
        if (field.name == alt) {
          match = &field;
          break;
        }
      }
      if (match != nullptr) break;
    }
    if (match == nullptr) {
      std::string have;
      for (const RawField& field : record.fields) {
        have += (have.empty() ? "" : ", ") + field.name;
      }
      throw Error(fmt::format(
          "{}: no field '{}' (it has: {}); choose fields every record has "
          "(ShardOptions::fields), or skip such records with OnSampleError::kSkip",
          where.describe(), fmt::join(s.alternatives, ";"), have.empty() ? "none" : have));
    }
    sample.set(s.output, decode(*match, bytes, s.decoder ? &s.decoder : nullptr, where));
  }
  return sample;
}

Sample ShardFormat::decode(const RawRecord& record, const FieldPlan& plan) const {
  return plan.assemble(record, ref(record));
}

void ShardFormat::throw_shrunk(const RawRecord& record) const {
  record.mapping->throw_shrunk(ref(record).describe(), record.offset);
}

}  // namespace detail
}  // namespace stoker
