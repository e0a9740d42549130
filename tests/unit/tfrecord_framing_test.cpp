// Unit tests for src/datasets/records: CRC32C, TFRecord framing (index, resynchronisation,
// data reads) and the record stream over plain, gzip and zlib bytes.
#include "datasets/records/compression.hpp"
#include "datasets/records/crc32c.hpp"
#include "datasets/records/tfrecord.hpp"
#include "stoker/tfrecord_dataset.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace stoker::detail {
namespace {

std::span<const std::byte> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::string as_string(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

std::vector<std::byte> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xFFU);
  return out;
}

// Records "record 0", "record 1", ... of growing length.
std::vector<std::byte> make_file(std::size_t records,
                                 std::vector<std::uint64_t>* offsets = nullptr) {
  std::vector<std::byte> file;
  for (std::size_t i = 0; i < records; ++i) {
    if (offsets != nullptr) offsets->push_back(file.size());
    append_tfrecord(file, as_bytes("record " + std::to_string(i) + std::string(i, 'x')));
  }
  return file;
}

std::vector<std::string> read_stream(TFRecordStream& stream, std::size_t* errors = nullptr) {
  std::vector<std::string> out;
  for (;;) {
    try {
      const auto record = stream.next();
      if (!record) break;
      out.push_back(as_string(*record));
    } catch (const TFRecordError&) {
      if (errors == nullptr) throw;
      ++*errors;
    }
  }
  return out;
}

TEST_CASE("crc32c matches the check value and is the same in every implementation", "[records]") {
  CHECK(crc32c(as_bytes("123456789")) == 0xE3069283U);
  CHECK(crc32c_table(as_bytes("123456789")) == 0xE3069283U);
  CHECK(crc32c_hardware(as_bytes("123456789")) == 0xE3069283U);
  CHECK(crc32c({}) == 0);
  const std::string_view impl = crc32c_implementation();
  CHECK((impl == "sse4.2" || impl == "armv8-crc" || impl == "table"));
  const auto data = random_bytes(4099, 1);
  for (const std::size_t start : {0U, 1U, 3U, 7U}) {
    for (const std::size_t n : {0U, 1U, 7U, 8U, 9U, 63U, 1000U, 4000U}) {
      const auto part = std::span<const std::byte>(data).subspan(start, n);
      INFO("start " << start << " n " << n);
      CHECK(crc32c_table(part) == crc32c_hardware(part));
    }
  }
  // Continuing from a previous value is the CRC of the concatenation.
  const auto all = std::span<const std::byte>(data);
  CHECK(crc32c(all.subspan(1000), crc32c(all.first(1000))) == crc32c(all));
  // TensorFlow's mask of a CRC (and so of the empty record's header) is fixed.
  CHECK(mask_crc32c(0) == 0xa282ead8U);
}

TEST_CASE("index_tfrecords finds every record of a good file and tfrecord_data reads it",
          "[records]") {
  std::vector<std::uint64_t> offsets;
  const auto file = make_file(50, &offsets);
  const TFRecordIndex index = index_tfrecords(file, true);
  CHECK(index.entries == offsets);
  CHECK(index.bad_regions.empty());
  CHECK(index.good_records() == 50);
  for (std::size_t i = 0; i < 50; ++i) {
    CHECK(as_string(tfrecord_data(file, offsets[i], true, "f", i)) ==
          "record " + std::to_string(i) + std::string(i, 'x'));
  }
  CHECK(index_tfrecords({}, true).entries.empty());
  std::vector<std::byte> empty_record;
  append_tfrecord(empty_record, {});
  CHECK(empty_record.size() == kTFRecordOverhead);
  CHECK(tfrecord_data(empty_record, 0, true, "f", 0).empty());
}

TEST_CASE("a bad data CRC names the file and byte offset, and is not checked with verify off",
          "[records]") {
  std::vector<std::uint64_t> offsets;
  auto file = make_file(5, &offsets);
  file[offsets[3] + kTFRecordHeaderBytes + 2] ^= std::byte{0x40};
  try {
    tfrecord_data(file, offsets[3], true, "/data/train.tfrecord", 3);
    FAIL("no error");
  } catch (const TFRecordError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("TFRecordDataset: /data/train.tfrecord: record 3 at byte " +
                                     std::to_string(offsets[3]) + ": bad data CRC"));
    CHECK_THAT(what, Catch::Contains("on_sample_error = kSkip"));
    CHECK(e.path() == "/data/train.tfrecord");
    CHECK(e.offset() == offsets[3]);
  }
  CHECK(tfrecord_data(file, offsets[3], false, "f", 3).size() == 8 + 3);
  // The index checks headers only, so the bad data CRC leaves it whole.
  CHECK(index_tfrecords(file, true).bad_regions.empty());
}

TEST_CASE("a corrupt header is a bad region and the records after it are still found",
          "[records]") {
  std::vector<std::uint64_t> offsets;
  auto file = make_file(20, &offsets);
  file[offsets[7] + 1] ^= std::byte{0x01};  // the length: its CRC no longer matches
  const TFRecordIndex index = index_tfrecords(file, true);
  REQUIRE(index.entries.size() == 20);
  REQUIRE(index.bad_regions.size() == 1);
  CHECK(index.entries[7] == (TFRecordIndex::kBadEntry | 0));
  CHECK(index.bad_regions[0].offset == offsets[7]);
  CHECK(index.bad_regions[0].resume == offsets[8]);
  CHECK(index.bad_regions[0].check.status == FrameStatus::kBadLengthCrc);
  for (std::size_t i = 8; i < 20; ++i) CHECK(index.entries[i] == offsets[i]);
  CHECK_THAT(describe_frame(index.bad_regions[0].check, 0),
             Catch::Contains("corrupt record header: the length's CRC does not match"));
  // Without CRCs the length is believed: here it still lies within the file, so the walk
  // goes wrong somewhere, but never outside the file.
  const TFRecordIndex unchecked = index_tfrecords(file, false);
  for (const std::uint64_t e : unchecked.entries) {
    if ((e & TFRecordIndex::kBadEntry) == 0) CHECK(e < file.size());
  }
}

TEST_CASE("a truncated file ends in one bad region", "[records]") {
  std::vector<std::uint64_t> offsets;
  auto file = make_file(10, &offsets);
  for (const std::size_t cut : {std::size_t{5}, kTFRecordHeaderBytes + 2, std::size_t{20}}) {
    auto cut_file = file;
    cut_file.resize(offsets[9] + cut);
    const TFRecordIndex index = index_tfrecords(cut_file, true);
    REQUIRE(index.entries.size() == 10);
    REQUIRE(index.bad_regions.size() == 1);
    CHECK(index.bad_regions[0].offset == offsets[9]);
    CHECK(index.bad_regions[0].resume == cut_file.size());
    CHECK(index.bad_regions[0].check.status == FrameStatus::kTruncated);
    CHECK_THAT(describe_frame(index.bad_regions[0].check, cut), Catch::StartsWith("truncated: "));
    CHECK_THROWS_AS(tfrecord_data(cut_file, offsets[9], true, "f", 9), TFRecordError);
  }
}

TEST_CASE("TFRecordStream reads plain, gzip and zlib streams record by record", "[records]") {
  const auto file = make_file(300);
  const std::vector<std::string> expected = [&] {
    std::vector<std::string> v;
    for (std::size_t i = 0; i < 300; ++i)
      v.push_back("record " + std::to_string(i) + std::string(i, 'x'));
    return v;
  }();
  {
    TFRecordStream stream(memory_source(file), "plain", true);
    CHECK(read_stream(stream) == expected);
    CHECK(stream.records() == 300);
    CHECK(stream.offset() == file.size());
  }
  for (const bool zlib : {false, true}) {
    const auto packed = compress_deflate(file, zlib);
    CHECK(sniff_tfrecord_codec(packed) == (zlib ? StreamCodec::kZlib : StreamCodec::kGzip));
    TFRecordStream stream(inflate_source(memory_source(packed), "z"), "z", true);
    CHECK(read_stream(stream) == expected);
  }
  CHECK(sniff_tfrecord_codec(file) == StreamCodec::kNone);
  // Two gzip members back to back read as one stream.
  auto twice = compress_deflate(file);
  const auto second = compress_deflate(file);
  twice.insert(twice.end(), second.begin(), second.end());
  TFRecordStream stream(inflate_source(memory_source(twice), "z"), "z", true);
  CHECK(read_stream(stream).size() == 600);
}

TEST_CASE("TFRecordStream goes on past a bad data CRC and a corrupt header", "[records]") {
  std::vector<std::uint64_t> offsets;
  auto file = make_file(30, &offsets);
  file[offsets[4] + kTFRecordHeaderBytes] ^= std::byte{0x01};  // data of record 4
  file[offsets[10] + 3] ^= std::byte{0x10};                    // header of record 10
  TFRecordStream stream(memory_source(file), "s", true);
  std::size_t errors = 0;
  const auto records = read_stream(stream, &errors);
  CHECK(errors == 2);
  CHECK(stream.bad_records() == 2);
  CHECK(records.size() == 28);
  CHECK(records[4] == "record 5xxxxx");
  CHECK(records[9] == "record 11" + std::string(11, 'x'));
  // The messages say where, and how far the scan skipped.
  TFRecordStream again(memory_source(file), "s.tfrecord", true);
  for (int i = 0; i < 4; ++i) again.next();
  CHECK_THROWS_WITH(again.next(), Catch::Contains("s.tfrecord: record 4 at byte " +
                                                  std::to_string(offsets[4]) + ": bad data CRC"));
  for (int i = 5; i < 10; ++i) again.next();
  CHECK_THROWS_WITH(again.next(),
                    Catch::Contains("at byte " + std::to_string(offsets[10])) &&
                        Catch::Contains("skipped " + std::to_string(offsets[11] - offsets[10]) +
                                        " bytes to the next valid record"));
}

TEST_CASE("TFRecordStream reports a truncated stream once and then ends", "[records]") {
  auto file = make_file(6);
  file.resize(file.size() - 3);
  TFRecordStream stream(memory_source(file), "cut", true);
  std::size_t errors = 0;
  CHECK(read_stream(stream, &errors).size() == 5);
  CHECK(errors == 1);
  CHECK_FALSE(stream.next().has_value());
  // A cut gzip stream is corrupt compressed data: the error names the stream.
  auto packed = compress_deflate(make_file(100));
  packed.resize(packed.size() / 2);
  TFRecordStream gz(inflate_source(memory_source(packed), "cut.gz"), "cut.gz", true);
  CHECK_THROWS_WITH(read_stream(gz), Catch::Contains("cut.gz"));
  CHECK_FALSE(gz.next().has_value());
}

TEST_CASE("decompress_shard round-trips every codec and names the shard when data is bad",
          "[records]") {
  const auto data = random_bytes(100000, 7);
  for (const ShardCodec codec :
       {ShardCodec::kZstd, ShardCodec::kGzip, ShardCodec::kBzip2, ShardCodec::kBrotli}) {
    if (!shard_codec_available(codec)) continue;
    INFO(shard_codec_name(codec));
    const auto packed = compress_shard(codec, data);
    CHECK(decompress_shard(codec, packed, data.size(), "s") == data);
    CHECK_THROWS_WITH(decompress_shard(codec, packed, data.size() - 1, "shard.mds"),
                      Catch::Contains("shard.mds") && Catch::Contains("more than"));
    CHECK_THROWS_WITH(decompress_shard(codec, packed, data.size() + 1, "shard.mds"),
                      Catch::Contains("shard.mds"));
    auto cut = packed;
    cut.resize(cut.size() / 2);
    CHECK_THROWS_WITH(decompress_shard(codec, cut, data.size(), "shard.mds"),
                      Catch::Contains("decompressing shard.mds"));
    auto garbage = random_bytes(1000, 9);
    CHECK_THROWS_AS(decompress_shard(codec, garbage, data.size(), "shard.mds"), Error);
  }
  CHECK(parse_shard_codec("zstd:7") == ShardCodec::kZstd);
  CHECK(parse_shard_codec("gz") == ShardCodec::kGzip);
  CHECK(parse_shard_codec("") == ShardCodec::kNone);
  CHECK_THROWS_WITH(parse_shard_codec("snappy"), Catch::Contains("snappy is not supported"));
}

}  // namespace
}  // namespace stoker::detail
