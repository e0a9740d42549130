// Unit tests for src/datasets/records/example_proto: the tf.train.Example wire-format reader.
#include "datasets/records/example_proto.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace stoker::detail {
namespace {

// Wire-format building blocks, to write what serialize_example does not (unpacked lists,
// unknown fields, repeats).
void varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80U) {
    out.push_back(static_cast<char>((v & 0x7FU) | 0x80U));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
std::string field(std::uint32_t number, const std::string& payload) {
  std::string out;
  varint(out, (std::uint64_t{number} << 3) | 2);
  varint(out, payload.size());
  return out + payload;
}
std::string entry(const std::string& name, const std::string& feature) {
  return field(1, field(1, name) + field(2, feature));
}
std::string example_of(const std::string& entries) { return field(1, entries); }

std::span<const std::byte> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::vector<std::int64_t> ints(const ParsedExample& ex, std::string_view name) {
  const ExampleFeature* f = ex.find(name);
  REQUIRE(f != nullptr);
  REQUIRE(f->kind == FeatureKind::kInt64);
  std::vector<std::int64_t> out(f->values);
  ex.copy_int64(*f, out.data());
  return out;
}
std::vector<float> floats(const ParsedExample& ex, std::string_view name) {
  const ExampleFeature* f = ex.find(name);
  REQUIRE(f != nullptr);
  REQUIRE(f->kind == FeatureKind::kFloat);
  std::vector<float> out(f->values);
  ex.copy_float(*f, out.data());
  return out;
}
std::vector<std::string> strings(const ParsedExample& ex, std::string_view name) {
  const ExampleFeature* f = ex.find(name);
  REQUIRE(f != nullptr);
  REQUIRE(f->kind == FeatureKind::kBytes);
  std::vector<std::span<const std::byte>> views;
  ex.bytes_values(*f, views);
  std::vector<std::string> out;
  for (const auto v : views) out.emplace_back(reinterpret_cast<const char*>(v.data()), v.size());
  return out;
}

TEST_CASE("parse reads back every kind of feature serialize_example writes", "[records]") {
  const std::vector<ExampleValue> values = {
      {"image/encoded", FeatureKind::kBytes, {std::string("\xff\xd8\x00jpeg", 7)}, {}, {}},
      {"label", FeatureKind::kInt64, {}, {}, {7}},
      {"bbox", FeatureKind::kFloat, {}, {0.25F, -1.5F, 3e10F}, {}},
      {"ids", FeatureKind::kInt64, {}, {}, {-1, 0, 1, INT64_MIN, INT64_MAX, 300}},
      {"tags", FeatureKind::kBytes, {"a", "", "ccc"}, {}, {}},
      {"none", FeatureKind::kNone, {}, {}, {}},
      {"empty_floats", FeatureKind::kFloat, {}, {}, {}},
  };
  const auto record = serialize_example(values);
  ParsedExample ex;
  ex.parse(record);
  REQUIRE(ex.features().size() == values.size());
  for (std::size_t i = 0; i < values.size(); ++i) CHECK(ex.features()[i].name == values[i].name);
  CHECK(strings(ex, "image/encoded") == values[0].bytes);
  CHECK(ints(ex, "label") == values[1].ints);
  CHECK(floats(ex, "bbox") == values[2].floats);
  CHECK(ints(ex, "ids") == values[3].ints);
  CHECK(strings(ex, "tags") == values[4].bytes);
  CHECK(ex.find("none")->kind == FeatureKind::kNone);
  CHECK(ex.find("empty_floats")->values == 0);
  CHECK(ex.find("tags")->value_bytes == 4);
  CHECK(ex.find("missing") == nullptr);
  // An empty record is an Example without features.
  ex.parse({});
  CHECK(ex.features().empty());
}

TEST_CASE("parse takes unpacked lists, merges repeats, skips unknown fields", "[records]") {
  std::string unpacked_ints;  // Int64List{value: 5, value: -2} unpacked
  varint(unpacked_ints, (1 << 3) | 0);
  varint(unpacked_ints, 5);
  varint(unpacked_ints, (1 << 3) | 0);
  varint(unpacked_ints, static_cast<std::uint64_t>(std::int64_t{-2}));
  std::string unpacked_floats;  // FloatList{value: 1.0} as fixed32
  varint(unpacked_floats, (1 << 3) | 5);
  unpacked_floats.append("\x00\x00\x80\x3f", 4);
  std::string unknown;  // field 9 of each wire type
  varint(unknown, (9 << 3) | 0);
  varint(unknown, 123);
  varint(unknown, (9 << 3) | 1);
  unknown.append(8, 'x');
  varint(unknown, (9 << 3) | 5);
  unknown.append(4, 'y');
  unknown += field(9, "zzz");
  const std::string record = example_of(
      entry("i", field(3, unpacked_ints + unknown) + field(3, unpacked_ints)) +  // merged
      entry("f", field(2, unpacked_floats)) +
      entry("switch", field(3, unpacked_ints) + field(1, field(1, "won"))) +  // oneof: last wins
      entry("dup", field(1, field(1, "first"))) + unknown +
      entry("dup", field(1, field(1, "second"))));
  const std::string bytes = record + unknown;
  ParsedExample ex;
  ex.parse(bytes_of(bytes));
  CHECK(ints(ex, "i") == std::vector<std::int64_t>{5, -2, 5, -2});
  CHECK(floats(ex, "f") == std::vector<float>{1.0F});
  CHECK(strings(ex, "switch") == std::vector<std::string>{"won"});
  CHECK(strings(ex, "dup") == std::vector<std::string>{"second"});
  REQUIRE(ex.features().size() == 4);
  CHECK(ex.features()[3].name == "dup");  // the first appearance keeps its place
}

TEST_CASE("many features are found by name, duplicates included", "[records]") {
  std::vector<ExampleValue> values;
  for (int i = 0; i < 100; ++i)
    values.push_back({"f" + std::to_string(i), FeatureKind::kInt64, {}, {}, {i}});
  values.push_back({"f50", FeatureKind::kInt64, {}, {}, {-50}});
  ParsedExample ex;
  const auto record = serialize_example(values);
  ex.parse(record);
  CHECK(ex.features().size() == 100);
  CHECK(ints(ex, "f99") == std::vector<std::int64_t>{99});
  CHECK(ints(ex, "f50") == std::vector<std::int64_t>{-50});
}

TEST_CASE("parse rejects malformed bytes with the byte offset", "[records]") {
  ParsedExample ex;
  const auto rejects = [&](const std::string& bytes, const std::string& what) {
    INFO(what);
    CHECK_THROWS_MATCHES(ex.parse(bytes_of(bytes)), ExampleFormatError,
                         Catch::Matchers::Predicate<ExampleFormatError>(
                             [&](const ExampleFormatError& e) {
                               return std::string(e.what()).find(what) != std::string::npos &&
                                      std::string(e.what()).find("at byte") != std::string::npos;
                             },
                             what));
  };
  rejects("\x0a", "varint runs past the end");
  rejects("\x0a\x05\x0a", "a length of");
  rejects(std::string("\x08") + std::string(11, '\xff'), "longer than 10 bytes");
  rejects("\x0b", "group");
  rejects("\x0f", "wire type 7");
  rejects(std::string("\x00", 1), "field number 0");
  // A packed float list whose length is not a multiple of 4.
  rejects(example_of(entry("x", field(2, field(1, "abc")))), "packed float list of 3 bytes");
  // A packed int64 list ending inside a varint.
  rejects(example_of(entry("x", field(3, field(1, "\x80")))), "varint runs past the end");
}

TEST_CASE("parse never reads outside random and mutated records", "[records]") {
  std::mt19937 rng(42);
  const auto good = serialize_example({{"a", FeatureKind::kBytes, {"hello", "x"}, {}, {}},
                                       {"b", FeatureKind::kInt64, {}, {}, {1, 2, 3}},
                                       {"c", FeatureKind::kFloat, {}, {1.5F}, {}}});
  ParsedExample ex;
  std::size_t parsed = 0;
  std::size_t rejected = 0;
  for (int round = 0; round < 3000; ++round) {
    auto bytes = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) bytes[rng() % bytes.size()] = static_cast<std::byte>(rng());
    bytes.resize(rng() % (bytes.size() + 1));
    try {
      ex.parse(bytes);
      ++parsed;
      std::vector<std::span<const std::byte>> views;
      for (const ExampleFeature& f : ex.features()) {
        if (f.kind == FeatureKind::kBytes) ex.bytes_values(f, views);
        for (const auto v : views) {
          CHECK(v.data() >= bytes.data());
          CHECK(v.data() + v.size() <= bytes.data() + bytes.size());
        }
        views.clear();
      }
    } catch (const ExampleFormatError&) {
      ++rejected;
    }
  }
  CHECK(parsed + rejected == 3000);
  CHECK(rejected > 0);
}

}  // namespace
}  // namespace stoker::detail
