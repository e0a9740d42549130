// Fields by name: the built-in decoders, the FieldDecoders lookup, and FieldPlan's selection,
// renaming and messages.
#include <cstring>

#include <catch2/catch.hpp>

#include "datasets/shards/shard_format.hpp"
#include "stoker/errors.hpp"
#include "stoker/npy_dataset.hpp"
#include "stoker/shards.hpp"

using namespace stoker;
using namespace stoker::detail;

namespace {

std::span<const std::uint8_t> text(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// A record whose fields are the given (name, bytes) pairs, one after another.
RawRecord record(std::initializer_list<std::pair<std::string, std::string>> fields) {
  RawRecord r;
  std::string all;
  for (const auto& [name, bytes] : fields) {
    r.fields.push_back(RawField{name, all.size(), bytes.size(), {}});
    all += bytes;
  }
  const std::span<std::byte> out = r.own(all.size());
  std::memcpy(out.data(), all.data(), all.size());
  r.ordinal = 3;
  r.offset = 1536;
  r.key = "img3";
  return r;
}

const RecordRef kWhere{"WebDatasetShards", "a.tar", 3, 1536, "img3"};

}  // namespace

TEST_CASE("decode_int_field reads ASCII integers and names the record otherwise",
          "[shards][fields]") {
  REQUIRE(decode_int_field(text("7"), "s").item<std::int64_t>() == 7);
  REQUIRE(decode_int_field(text(" -42\n"), "s").item<std::int64_t>() == -42);
  REQUIRE(decode_int_field(text("+9223372036854775807"), "s").item<std::int64_t>() == INT64_MAX);
  REQUIRE(decode_int_field(text("-9223372036854775808"), "s").item<std::int64_t>() == INT64_MIN);
  REQUIRE_THROWS_WITH(decode_int_field(text("9223372036854775808"), "a.tar: record 3"),
                      Catch::Contains("a.tar: record 3: '9223372036854775808' is not an integer"));
  REQUIRE_THROWS_AS(decode_int_field(text("3.5"), "s"), Error);
  REQUIRE_THROWS_AS(decode_int_field(text(""), "s"), Error);
  REQUIRE_THROWS_AS(decode_int_field(text("-"), "s"), Error);
}

TEST_CASE("decode_npy_field and decode_raw_field", "[shards][fields]") {
  const std::vector<std::int64_t> shape{2, 3};
  std::vector<std::byte> npy = make_npy_header(DType::kFloat32, shape);
  const float values[6] = {1, 2, 3, 4, 5, 6.5f};
  const auto* v = reinterpret_cast<const std::byte*>(values);
  npy.insert(npy.end(), v, v + sizeof(values));
  const std::span<const std::uint8_t> bytes(reinterpret_cast<const std::uint8_t*>(npy.data()),
                                            npy.size());
  const Tensor t = decode_npy_field(bytes, "x.npy");
  REQUIRE(t.dtype() == DType::kFloat32);
  REQUIRE(t.shape() == Shape{2, 3});
  REQUIRE(t.data<float>()[5] == 6.5f);
  REQUIRE_THROWS_WITH(decode_npy_field(bytes.first(bytes.size() - 4), "x.npy"),
                      Catch::Contains("x.npy: the header describes 24 bytes of data but 20"));
  REQUIRE_THROWS_AS(decode_npy_field(text("not npy"), "x.npy"), NpyFormatError);
  const Tensor raw = decode_raw_field(text("abc"), "x");
  REQUIRE(raw.dtype() == DType::kUInt8);
  REQUIRE(raw.shape() == Shape{3});
  REQUIRE(raw.data<std::uint8_t>()[2] == 'c');
}

TEST_CASE("FieldDecoders: exact names first, then the last extension", "[shards][fields]") {
  FieldDecoders d = FieldDecoders::defaults();
  REQUIRE(d.find("cls") != nullptr);
  REQUIRE(d.find("label.cls") != nullptr);  // by extension
  REQUIRE(d.find("npy") != nullptr);
  REQUIRE(d.find("json") == nullptr);  // raw bytes
  REQUIRE(d.find("txt") == nullptr);
  d.set("seg.png", [](std::span<const std::uint8_t>, std::string_view) {
    return Tensor::scalar<std::int32_t>(1);
  });
  d.set("png", [](std::span<const std::uint8_t>, std::string_view) {
    return Tensor::scalar<std::int32_t>(2);
  });
  REQUIRE((*d.find("seg.png"))(text(""), "").item<std::int32_t>() == 1);
  REQUIRE((*d.find("other.png"))(text(""), "").item<std::int32_t>() == 2);
  REQUIRE(FieldDecoders().find("cls") == nullptr);
  REQUIRE_THROWS_AS(d.set("", FieldDecoder{}), std::invalid_argument);
}

TEST_CASE("FieldPlan: every field by default, in record order", "[shards][fields]") {
  const FieldPlan plan{ShardOptions{}};
  // "bin", not "jpg": image fields are decoded by default, and these bytes are no image.
  const RawRecord r = record({{"bin", "JPEGBYTES"}, {"cls", "5"}, {"json", "{}"}});
  const Sample s = plan.assemble(r, kWhere);
  REQUIRE(s.size() == 3);
  REQUIRE(s.fields()[0].name == "bin");
  REQUIRE(s["cls"].item<std::int64_t>() == 5);
  REQUIRE(s["json"].numel() == 2);
  REQUIRE(plan.wants("anything"));
}

TEST_CASE("FieldPlan: chosen fields, alternatives, renaming, own decoders", "[shards][fields]") {
  ShardOptions options;
  options.fields = {
      FieldSpec{"raw;bin", "image", {}}, FieldSpec{"cls", "", {}},
      FieldSpec{"txt", "length", [](std::span<const std::uint8_t> b, std::string_view) {
                  return Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(b.size()));
                }}};
  const FieldPlan plan(options);
  REQUIRE(plan.wants("bin"));
  REQUIRE(plan.wants("raw"));
  REQUIRE_FALSE(plan.wants("json"));
  const RawRecord r = record({{"bin", "J"}, {"json", "{}"}, {"cls", "2"}, {"txt", "hello"}});
  const Sample s = plan.assemble(r, kWhere);
  REQUIRE(s.size() == 3);
  REQUIRE(s.fields()[0].name == "image");
  REQUIRE(s["image"].numel() == 1);
  REQUIRE(s["cls"].item<std::int64_t>() == 2);
  REQUIRE(s["length"].item<std::int64_t>() == 5);
  const RawRecord missing = record({{"bin", "J"}, {"txt", "x"}});
  REQUIRE_THROWS_WITH(
      plan.assemble(missing, kWhere),
      Catch::Contains("WebDatasetShards: a.tar: record 3 ('img3') at byte 1536: no field 'cls' "
                      "(it has: bin, txt)"));
}

TEST_CASE("FieldPlan: a decoder's error names the record and field", "[shards][fields]") {
  ShardOptions options;
  options.decoders.set("bin", [](std::span<const std::uint8_t>, std::string_view) -> Tensor {
    throw std::runtime_error("cannot decode this");
  });
  const FieldPlan plan(options);
  REQUIRE_THROWS_WITH(plan.assemble(record({{"bin", "x"}}), kWhere),
                      Catch::Equals("WebDatasetShards: a.tar: record 3 ('img3') at byte 1536, "
                                    "field 'bin': cannot decode this"));
  REQUIRE_THROWS_WITH(plan.assemble(record({{"cls", "x"}}), kWhere),
                      Catch::Contains("at byte 1536, field 'cls': 'x' is not an integer"));
  ShardOptions twice;
  twice.fields = {FieldSpec{"jpg", "x", {}}, FieldSpec{"png", "x", {}}};
  REQUIRE_THROWS_WITH(FieldPlan(twice), Catch::Contains("two fields become the Sample field 'x'"));
  ShardOptions empty;
  empty.fields = {FieldSpec{";", "", {}}};
  REQUIRE_THROWS_AS(FieldPlan(empty), std::invalid_argument);
}
