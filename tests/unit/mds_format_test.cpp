// Unit tests for src/datasets/records/mds_index and mds_shard: index.json, encodings, the
// shard's offsets, samples cut into columns, column values decoded, and the hashes.
#include "datasets/records/mds_index.hpp"
#include "datasets/records/mds_shard.hpp"
#include "stoker/mds_dataset.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace stoker::detail {
namespace {

std::span<const std::byte> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}
std::string u32(std::uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

// The example index of MosaicML Streaming's MDS README (one shard).
const std::string kReadmeIndex = R"({"shards": [{
  "column_encodings": ["int", "str"], "column_names": ["number", "words"],
  "column_sizes": [8, null], "compression": "zstd:7", "format": "mds",
  "hashes": ["sha1", "xxh3_64"],
  "raw_data": {"basename": "shard.00000.mds", "bytes": 1048544,
               "hashes": {"sha1": "8D0634d3836110b00ae435bbbabd1739f3bbeeac", "xxh3_64": "2c54988514bca807"}},
  "samples": 16621, "size_limit": 1048576, "version": 2,
  "zip_data": {"basename": "shard.00000.mds.zstd", "bytes": 228795,
               "hashes": {"sha1": "2fb5ece19aabc91c2d6d6c126d614ab291abe24a", "xxh3_64": "fe6e78d7c73d9e79"}}
}], "version": 2})";

TEST_CASE("parse_mds_index reads the README's index", "[records]") {
  const MdsIndex index = parse_mds_index(kReadmeIndex, "index.json");
  REQUIRE(index.shards.size() == 1);
  const MdsShardInfo& s = index.shards[0];
  REQUIRE(s.columns.size() == 2);
  CHECK(s.columns[0].name == "number");
  CHECK(s.columns[0].encoding.kind == MdsKind::kInt);
  CHECK(s.columns[0].size == 8U);
  CHECK(s.columns[1].encoding.kind == MdsKind::kStr);
  CHECK_FALSE(s.columns[1].size.has_value());
  CHECK(s.codec == ShardCodec::kZstd);
  CHECK(s.raw.basename == "shard.00000.mds");
  CHECK(s.raw.bytes == 1048544);
  REQUIRE(s.raw.hashes.size() == 2);
  CHECK(s.raw.hashes[0].second == "8d0634d3836110b00ae435bbbabd1739f3bbeeac");  // lower-cased
  REQUIRE(s.zip.has_value());
  CHECK(s.zip->basename == "shard.00000.mds.zstd");
  CHECK(s.samples == 16621);
  CHECK(index.total_samples() == 16621);
}

TEST_CASE("parse_mds_index names the key that is wrong", "[records]") {
  const auto rejects = [](std::string text, const std::string& what) {
    INFO(what);
    CHECK_THROWS_MATCHES(parse_mds_index(text, "/d/index.json"), MdsError,
                         Catch::Matchers::Predicate<MdsError>(
                             [&](const MdsError& e) {
                               return std::string(e.what()).find(what) != std::string::npos &&
                                      e.path() == "/d/index.json";
                             },
                             what));
  };
  const auto with = [](const std::string& from, const std::string& to) {
    std::string s = kReadmeIndex;
    const auto at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  rejects("{", "not valid JSON");
  rejects("[]", "top level is not an object");
  rejects(R"({"version": 1, "shards": []})", "version 1 is not 2");
  rejects(R"({"version": 2})", "no \"shards\" array");
  rejects(with(R"("format": "mds")", R"("format": "json")"), "format \"json\" is not \"mds\"");
  rejects(with(R"("column_sizes": [8, null])", R"("column_sizes": [8])"), "column_sizes");
  rejects(with(R"("column_sizes": [8, null])", R"("column_sizes": [4, null])"),
          "column \"number\" (int) has column_size 4 where its encoding has 8");
  rejects(with(R"(["int", "str"])", R"(["int", "complex128"])"),
          "MDS encoding \"complex128\" is not an MDS encoding stoker knows");
  rejects(with(R"("compression": "zstd:7")", R"("compression": "snappy")"), "snappy");
  rejects(with(R"("shard.00000.mds", "bytes")", R"("../x.mds", "bytes")"),
          "not a relative path inside the directory");
  rejects(with(R"("samples": 16621)", R"("samples": -1)"), "\"samples\" is not a non-negative");
  rejects(with(R"("samples": 16621)", R"("samples": 900000)"), "too small for the 900000 samples");
  rejects(with(R"(["number", "words"])", R"(["w", "w"])"), "column \"w\" appears twice");
  rejects(with(R"("bytes": 1048544)", R"("bytes": 99999999999)"), "below 4 GiB");
}

TEST_CASE("parse_mds_encoding knows MDS's encodings", "[records]") {
  CHECK(parse_mds_encoding("uint16").dtype == DType::kUInt16);
  CHECK(parse_mds_encoding("float16").size == 2U);
  CHECK(parse_mds_encoding("ndarray").kind == MdsKind::kNdarray);
  CHECK_FALSE(parse_mds_encoding("ndarray").dtype.has_value());
  CHECK(parse_mds_encoding("ndarray:int32").dtype == DType::kInt32);
  CHECK_FALSE(parse_mds_encoding("ndarray:int32").size.has_value());
  const MdsEncoding fixed = parse_mds_encoding("ndarray:float32:3,4");
  CHECK(fixed.shape == std::vector<std::int64_t>{3, 4});
  CHECK(fixed.size == 48U);
  CHECK(parse_mds_encoding("pkl").kind == MdsKind::kPickle);
  CHECK(parse_mds_encoding("pil").kind == MdsKind::kPil);
  CHECK_THROWS_WITH(parse_mds_encoding("ndarray:int33"), Catch::Contains("unknown dtype"));
  CHECK_THROWS_WITH(parse_mds_encoding("ndarray:int8:3,0"), Catch::Contains("bad shape"));
  CHECK_THROWS_WITH(parse_mds_encoding("ndarray:int8:1,1,1,1,1,1,1,1,1"),
                    Catch::Contains("more than 8 dimensions"));
  CHECK_THROWS_WITH(parse_mds_encoding("list[jpeg]"), Catch::Contains("not read by stoker"));
}

MdsShardInfo two_columns() {
  MdsShardInfo info;
  info.columns.push_back({"id", parse_mds_encoding("int"), 8U});
  info.columns.push_back({"text", parse_mds_encoding("str"), std::nullopt});
  info.columns.push_back({"blob", parse_mds_encoding("bytes"), std::nullopt});
  return info;
}

TEST_CASE("split_mds_sample cuts a sample into its columns and checks the sizes", "[records]") {
  const MdsShardInfo info = two_columns();
  std::int64_t id = -42;
  const std::string sample =
      u32(5) + u32(3) + std::string(reinterpret_cast<const char*>(&id), 8) + "hello" + "xyz";
  std::vector<MdsCell> cells;
  split_mds_sample(bytes_of(sample), info.columns, cells, "s: sample 0", "s");
  REQUIRE(cells.size() == 3);
  CHECK(cells[0].offset == 8);
  CHECK(cells[0].size == 8);
  CHECK(sample.substr(cells[1].offset, cells[1].size) == "hello");
  CHECK(sample.substr(cells[2].offset, cells[2].size) == "xyz");
  const Tensor t = decode_mds_value(info.columns[0].encoding,
                                    bytes_of(sample).subspan(cells[0].offset, 8), "w", "p");
  CHECK(t.item<std::int64_t>() == -42);
  CHECK_THROWS_WITH(
      split_mds_sample(bytes_of(sample + "!"), info.columns, cells, "MDS: s: sample 3", "s"),
      Catch::Contains("MDS: s: sample 3: the columns take 24 bytes of the sample's 25"));
  CHECK_THROWS_WITH(split_mds_sample(bytes_of(u32(5)), info.columns, cells, "w", "s"),
                    Catch::Contains("ends inside its column sizes"));
  CHECK_THROWS_WITH(split_mds_sample(bytes_of(u32(500) + u32(3) + std::string(16, 'a')),
                                     info.columns, cells, "w", "s"),
                    Catch::Contains("column \"text\" of 500 bytes runs past"));
}

TEST_CASE("decode_mds_value decodes each typed encoding", "[records]") {
  const auto decode = [](const std::string& encoding, const std::string& bytes) {
    return decode_mds_value(parse_mds_encoding(encoding), bytes_of(bytes), "w", "p");
  };
  CHECK(decode("str_int", " -17\n").item<std::int64_t>() == -17);
  CHECK(decode("str_float", "2.5e3").item<double>() == 2500.0);
  CHECK(decode("str_decimal", "1.10").item<double>() == 1.1);
  CHECK(decode("uint8", "\xfe").item<std::uint8_t>() == 0xfe);
  CHECK(decode("int16", u32(0xfffe).substr(0, 2)).item<std::int16_t>() == -2);
  float f = 1.25F;
  CHECK(decode("float32", std::string(reinterpret_cast<const char*>(&f), 4)).item<float>() ==
        1.25F);
  CHECK(decode("json", "{\"a\": 1}").shape() == Shape{8});
  // ndarray: dynamic dtype (int16 = 17) and shape (2 dims of u8: byte (2 << 2) | 0).
  std::string dynamic = std::string("\x11") + "\x08" + "\x02\x03";
  for (std::int16_t v = 0; v < 6; ++v) dynamic.append(reinterpret_cast<const char*>(&v), 2);
  const Tensor a = decode("ndarray", dynamic);
  CHECK(a.dtype() == DType::kInt16);
  CHECK(a.shape() == Shape{2, 3});
  CHECK(a.data<std::int16_t>()[5] == 5);
  // Fixed dtype, shape with u16 dims: byte (1 << 2) | 1.
  std::string fixed_dtype = std::string("\x05") + u32(300).substr(0, 2) + std::string(300, 'a');
  CHECK(decode("ndarray:uint8", fixed_dtype).shape() == Shape{300});
  CHECK(decode("ndarray:uint8:2,2", "abcd").shape() == Shape{2, 2});
  CHECK_THROWS_WITH(decode("ndarray:uint8", fixed_dtype + "!"),
                    Catch::Contains("ndarray of 300 x uint8 values has 301 bytes"));
  CHECK_THROWS_WITH(decode("ndarray", "\x07"), Catch::Contains("dtype code 7"));
  CHECK_THROWS_WITH(decode("ndarray", std::string("\x08\xff")), Catch::Contains("63 dimensions"));
  // pil: 2 x 1 RGB.
  const Tensor img = decode("pil", u32(2) + u32(1) + u32(3) + "RGB" + "abcdef");
  CHECK(img.shape() == Shape{1, 2, 3});
  CHECK_THROWS_WITH(decode("pil", u32(2) + u32(1) + u32(1) + "P" + "ab"),
                    Catch::Contains("mode \"P\""));
  CHECK_THROWS_WITH(decode("str_int", "12x"), Catch::Contains("not an integer"));
  CHECK_THROWS_WITH(decode("pkl", "\x80\x04"), Catch::Contains("stoker refuses pickle"));
}

TEST_CASE("check_mds_shard and mds_sample_range check the offsets", "[records]") {
  MdsShardInfo info = two_columns();
  info.samples = 2;
  const std::string config = "{}";
  const std::string s0 = u32(1) + u32(1) + std::string(8, '\0') + "a" + "b";
  const std::string s1 = u32(0) + u32(0) + std::string(8, '\1');
  const std::uint32_t start = 4 + 12 + static_cast<std::uint32_t>(config.size());
  std::string shard = u32(2) + u32(start) + u32(start + static_cast<std::uint32_t>(s0.size())) +
                      u32(start + static_cast<std::uint32_t>(s0.size() + s1.size())) + config + s0 +
                      s1;
  info.raw.bytes = shard.size();
  check_mds_shard(bytes_of(shard), info, "MdsDataset: s.mds", "s.mds");
  const MdsSampleRange r =
      mds_sample_range(bytes_of(shard).subspan(8, 8), 1, info, "MdsDataset: s.mds", "s.mds");
  CHECK(r.begin == start + s0.size());
  CHECK(r.end == shard.size());
  auto bad = shard;
  bad[8] = '\xff';  // offsets[1] jumps past the end
  CHECK_THROWS_WITH(check_mds_shard(bytes_of(bad), info, "MdsDataset: s.mds", "s.mds"),
                    Catch::Contains("MdsDataset: s.mds: offset") && Catch::Contains("of sample 1"));
  CHECK_THROWS_WITH(
      mds_sample_range(bytes_of(bad).subspan(4, 8), 0, info, "MdsDataset: s.mds", "s.mds"),
      Catch::Contains("sample 0: offsets"));
  info.samples = 3;
  CHECK_THROWS_WITH(check_mds_shard(bytes_of(shard), info, "MdsDataset: s.mds", "s.mds"),
                    Catch::Contains("holds 2 samples, index.json says 3"));
  info.samples = 2;
  CHECK_THROWS_WITH(check_mds_shard(bytes_of(shard + "x"), info, "MdsDataset: s.mds", "s.mds"),
                    Catch::Contains("index.json says"));
}

TEST_CASE("mds_hash gives Python's hexdigest and pick_mds_hash the fastest listed", "[records]") {
  const std::string abc = "abc";
  if (mds_hash_available("sha1")) {
    CHECK(mds_hash("sha1", bytes_of(abc)) == "a9993e364706816aba3e25717850c26c9cd0d89d");
    CHECK(mds_hash("md5", bytes_of(abc)) == "900150983cd24fb0d6963f7d28e17f72");
    CHECK(mds_hash("sha256", bytes_of(abc)) ==
          "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  }
  if (mds_hash_available("xxh64")) {
    CHECK(mds_hash("xxh64", {}) == "ef46db3751d8e999");
    CHECK(mds_hash("xxh32", {}) == "02cc5d05");
    CHECK(mds_hash("xxh3_64", {}) == "2d06800538d394c2");
    CHECK(mds_hash("xxh128", {}) == "99aa06d3014798d86001c324468d497f");
  }
  CHECK_FALSE(mds_hash("whirlpool", bytes_of(abc)).has_value());
  MdsFileInfo file;
  file.hashes = {{"sha1", "x"}, {"xxh64", "y"}, {"unknown", "z"}};
  const auto* picked = pick_mds_hash(file);
  if (mds_hash_available("xxh64")) {
    REQUIRE(picked != nullptr);
    CHECK(picked->first == "xxh64");
  }
  file.hashes = {{"unknown", "z"}};
  CHECK(pick_mds_hash(file) == nullptr);
}

}  // namespace
}  // namespace stoker::detail
