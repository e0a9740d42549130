#include "datasets/records/example_proto.hpp"

#include <bit>
#include <cstring>

#include <fmt/format.h>

namespace stoker::detail {
namespace {

// Protobuf wire types.
constexpr std::uint32_t kVarint = 0;
constexpr std::uint32_t kFixed64 = 1;
constexpr std::uint32_t kLengthDelimited = 2;
constexpr std::uint32_t kStartGroup = 3;
constexpr std::uint32_t kEndGroup = 4;
constexpr std::uint32_t kFixed32 = 5;

constexpr std::size_t kMaxVarintBytes = 10;
constexpr std::size_t kDedupScanLimit = 16;  // past this many features, find names by hash

// A cursor over one message's bytes; `base` is where they start in the record, for messages.
class Wire {
 public:
  Wire(std::span<const std::byte> bytes, std::size_t base) noexcept
      : begin_(bytes.data()), p_(bytes.data()), end_(bytes.data() + bytes.size()), base_(base) {}

  bool done() const noexcept { return p_ == end_; }
  std::size_t offset() const noexcept { return base_ + static_cast<std::size_t>(p_ - begin_); }

  [[noreturn]] void fail(std::string_view what) const {
    throw ExampleFormatError(
        fmt::format("not a valid tf.train.Example: {} at byte {} of the record", what, offset()));
  }

  std::uint64_t varint() {
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < kMaxVarintBytes; ++i) {
      if (p_ == end_) fail("a varint runs past the end of its message");
      const auto b = static_cast<std::uint8_t>(*p_++);
      value |= static_cast<std::uint64_t>(b & 0x7FU) << (7 * i);  // bits past 64 are dropped
      if ((b & 0x80U) == 0) return value;
    }
    fail("a varint longer than 10 bytes");
  }

  struct Tag {
    std::uint64_t field;
    std::uint32_t type;
  };
  Tag tag() {
    const std::uint64_t v = varint();
    const Tag t{v >> 3, static_cast<std::uint32_t>(v & 7U)};
    if (t.field == 0) fail("field number 0");
    return t;
  }

  std::span<const std::byte> bytes(std::size_t n) {
    if (n > static_cast<std::size_t>(end_ - p_)) {
      fail(fmt::format("a field of {} bytes where {} are left", n, end_ - p_));
    }
    const std::span<const std::byte> out(p_, n);
    p_ += n;
    return out;
  }
  // A length-delimited field's payload, and where it starts in the record.
  std::span<const std::byte> length_delimited(std::size_t& at) {
    const std::uint64_t n = varint();
    at = offset();
    if (n > static_cast<std::uint64_t>(end_ - p_)) {
      fail(fmt::format("a length of {} bytes where {} are left", n, end_ - p_));
    }
    return bytes(static_cast<std::size_t>(n));
  }
  std::span<const std::byte> length_delimited() {
    std::size_t at = 0;
    return length_delimited(at);
  }

  void skip(std::uint32_t type) {
    switch (type) {
      case kVarint:
        varint();
        return;
      case kFixed64:
        bytes(8);
        return;
      case kLengthDelimited:
        length_delimited();
        return;
      case kFixed32:
        bytes(4);
        return;
      case kStartGroup:
      case kEndGroup:
        fail("a group (a deprecated wire type Example does not use)");
      default:
        fail(fmt::format("wire type {}, which protobuf does not define", type));
    }
  }

 private:
  const std::byte* begin_;
  const std::byte* p_;
  const std::byte* end_;
  std::size_t base_;
};

float load_float(const std::byte* p) noexcept {
  std::uint32_t bits;
  std::memcpy(&bits, p, 4);
  if constexpr (std::endian::native == std::endian::big) bits = __builtin_bswap32(bits);
  return std::bit_cast<float>(bits);
}

FeatureKind kind_of_field(std::uint64_t field) noexcept {
  switch (field) {
    case 1:
      return FeatureKind::kBytes;
    case 2:
      return FeatureKind::kFloat;
    case 3:
      return FeatureKind::kInt64;
    default:
      return FeatureKind::kNone;
  }
}

// Validates one BytesList / FloatList / Int64List message and counts its values.
void count_list(FeatureKind kind, std::span<const std::byte> list, std::size_t base,
                ExampleFeature& feature) {
  Wire w(list, base);
  while (!w.done()) {
    const Wire::Tag t = w.tag();
    if (t.field != 1) {
      w.skip(t.type);
      continue;
    }
    if (kind == FeatureKind::kBytes && t.type == kLengthDelimited) {
      feature.value_bytes += w.length_delimited().size();
      ++feature.values;
    } else if (kind == FeatureKind::kFloat && t.type == kLengthDelimited) {
      const auto packed = w.length_delimited();
      if (packed.size() % 4 != 0)
        w.fail(fmt::format("a packed float list of {} bytes", packed.size()));
      feature.values += packed.size() / 4;
    } else if (kind == FeatureKind::kFloat && t.type == kFixed32) {
      w.bytes(4);
      ++feature.values;
    } else if (kind == FeatureKind::kInt64 && t.type == kLengthDelimited) {
      std::size_t at = 0;
      const auto packed = w.length_delimited(at);
      Wire values(packed, at);
      while (!values.done()) {
        values.varint();
        ++feature.values;
      }
    } else if (kind == FeatureKind::kInt64 && t.type == kVarint) {
      w.varint();
      ++feature.values;
    } else {
      w.skip(t.type);  // a mismatched wire type is an unknown field to protobuf too
    }
  }
}

}  // namespace

std::string_view feature_kind_name(FeatureKind kind) noexcept {
  switch (kind) {
    case FeatureKind::kNone:
      return "empty feature";
    case FeatureKind::kBytes:
      return "bytes_list";
    case FeatureKind::kFloat:
      return "float_list";
    case FeatureKind::kInt64:
      return "int64_list";
  }
  return "unknown";
}

void ParsedExample::parse(std::span<const std::byte> record) {
  features_.clear();
  segments_.clear();
  by_name_.clear();
  Wire example(record, 0);
  while (!example.done()) {
    const Wire::Tag t = example.tag();
    if (t.field != 1 || t.type != kLengthDelimited) {
      example.skip(t.type);
      continue;
    }
    std::size_t features_at = 0;
    Wire features(example.length_delimited(features_at), features_at);
    while (!features.done()) {
      const Wire::Tag ft = features.tag();
      if (ft.field != 1 || ft.type != kLengthDelimited) {
        features.skip(ft.type);
        continue;
      }
      std::size_t entry_at = 0;
      Wire entry(features.length_delimited(entry_at), entry_at);
      ExampleFeature feature;
      feature.first_segment = static_cast<std::uint32_t>(segments_.size());
      while (!entry.done()) {
        const Wire::Tag et = entry.tag();
        if (et.field == 1 && et.type == kLengthDelimited) {
          const auto key = entry.length_delimited();
          feature.name = {reinterpret_cast<const char*>(key.data()), key.size()};
          continue;
        }
        if (et.field != 2 || et.type != kLengthDelimited) {
          entry.skip(et.type);
          continue;
        }
        // A Feature; a second one in the same entry merges into the first, as protobuf does.
        std::size_t value_at = 0;
        Wire value(entry.length_delimited(value_at), value_at);
        while (!value.done()) {
          const Wire::Tag vt = value.tag();
          const FeatureKind kind = kind_of_field(vt.field);
          if (kind == FeatureKind::kNone || vt.type != kLengthDelimited) {
            value.skip(vt.type);
            continue;
          }
          if (kind != feature.kind) {  // another member of the oneof replaces the first
            segments_.resize(feature.first_segment);
            feature.kind = kind;
            feature.segment_count = 0;
            feature.values = 0;
            feature.value_bytes = 0;
          }
          std::size_t list_at = 0;
          const auto list = value.length_delimited(list_at);
          count_list(kind, list, list_at, feature);
          segments_.push_back(list);
          ++feature.segment_count;
        }
      }
      if (ExampleFeature* existing = const_cast<ExampleFeature*>(find(feature.name))) {
        *existing = feature;
        continue;
      }
      features_.push_back(feature);
      if (features_.size() == kDedupScanLimit + 1) {
        for (std::size_t i = 0; i < features_.size(); ++i) by_name_.emplace(features_[i].name, i);
      } else if (features_.size() > kDedupScanLimit + 1) {
        by_name_.emplace(feature.name, features_.size() - 1);
      }
    }
  }
}

const ExampleFeature* ParsedExample::find(std::string_view name) const noexcept {
  if (features_.size() > kDedupScanLimit) {
    const auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &features_[it->second];
  }
  for (const ExampleFeature& f : features_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// The copies walk lists parse() has validated, so they cannot fail.
void ParsedExample::copy_int64(const ExampleFeature& feature, std::int64_t* out) const noexcept {
  for (std::uint32_t s = 0; s < feature.segment_count; ++s) {
    Wire w(segments_[feature.first_segment + s], 0);
    while (!w.done()) {
      const Wire::Tag t = w.tag();
      if (t.field == 1 && t.type == kLengthDelimited) {
        Wire values(w.length_delimited(), 0);
        while (!values.done()) *out++ = static_cast<std::int64_t>(values.varint());
      } else if (t.field == 1 && t.type == kVarint) {
        *out++ = static_cast<std::int64_t>(w.varint());
      } else {
        w.skip(t.type);
      }
    }
  }
}

void ParsedExample::copy_float(const ExampleFeature& feature, float* out) const noexcept {
  for (std::uint32_t s = 0; s < feature.segment_count; ++s) {
    Wire w(segments_[feature.first_segment + s], 0);
    while (!w.done()) {
      const Wire::Tag t = w.tag();
      if (t.field == 1 && t.type == kLengthDelimited) {
        const auto packed = w.length_delimited();
        for (std::size_t i = 0; i + 4 <= packed.size(); i += 4) *out++ = load_float(&packed[i]);
      } else if (t.field == 1 && t.type == kFixed32) {
        *out++ = load_float(w.bytes(4).data());
      } else {
        w.skip(t.type);
      }
    }
  }
}

void ParsedExample::bytes_values(const ExampleFeature& feature,
                                 std::vector<std::span<const std::byte>>& out) const {
  for (std::uint32_t s = 0; s < feature.segment_count; ++s) {
    Wire w(segments_[feature.first_segment + s], 0);
    while (!w.done()) {
      const Wire::Tag t = w.tag();
      if (t.field == 1 && t.type == kLengthDelimited) {
        out.push_back(w.length_delimited());
      } else {
        w.skip(t.type);
      }
    }
  }
}

namespace {

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80U) {
    out.push_back(static_cast<char>((v & 0x7FU) | 0x80U));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_field(std::string& out, std::uint32_t field, std::string_view payload) {
  put_varint(out, (std::uint64_t{field} << 3) | kLengthDelimited);
  put_varint(out, payload.size());
  out.append(payload);
}

}  // namespace

std::vector<std::byte> serialize_example(const std::vector<ExampleValue>& features) {
  std::string map;
  for (const ExampleValue& f : features) {
    std::string list;
    std::uint32_t member = 0;
    if (f.kind == FeatureKind::kBytes) {
      member = 1;
      for (const std::string& b : f.bytes) put_field(list, 1, b);
    } else if (f.kind == FeatureKind::kFloat) {
      member = 2;
      std::string packed;
      for (const float v : f.floats) {
        std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
        if constexpr (std::endian::native == std::endian::big) bits = __builtin_bswap32(bits);
        packed.append(reinterpret_cast<const char*>(&bits), 4);
      }
      if (!f.floats.empty()) put_field(list, 1, packed);
    } else if (f.kind == FeatureKind::kInt64) {
      member = 3;
      std::string packed;
      for (const std::int64_t v : f.ints) put_varint(packed, static_cast<std::uint64_t>(v));
      if (!f.ints.empty()) put_field(list, 1, packed);
    }
    std::string feature;
    if (member != 0) put_field(feature, member, list);
    std::string entry;
    put_field(entry, 1, f.name);
    put_field(entry, 2, feature);
    put_field(map, 1, entry);
  }
  std::string example;
  put_field(example, 1, map);
  const auto* p = reinterpret_cast<const std::byte*>(example.data());
  return {p, p + example.size()};
}

}  // namespace stoker::detail
