// The tar index: what build_tar_index records, its serialisation (round trip, and refusal of
// damaged or out-of-bounds payloads), and the index cache file beside a shard (stale when the
// shard changes, memory when the directory is read-only).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "datasets/shards/byte_source.hpp"
#include "datasets/shards/index_cache.hpp"
#include "datasets/shards/tar_index.hpp"
#include "support/tar_builder.hpp"

using namespace stoker::detail;
using stoker::test::TarBuilder;

namespace {

TarIndex index_of(const std::vector<std::byte>& bytes) {
  auto source = memory_source(bytes);
  return build_tar_index(*source);
}

TarBuilder three_samples() {
  TarBuilder t;
  t.file("k/0.jpg", "J0").file("k/0.cls", "0");
  t.file("k/1.jpg", "J11").file("k/1.cls", "1");
  t.file("k/2.jpg", "J222").file("k/2.cls", "2").end();
  return t;
}

std::string temp_dir(const std::string& name) {
  const std::string dir = "/tmp/stoker-tar-index-" + name + "-" + std::to_string(::getpid());
  REQUIRE(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()) == 0);
  return dir;
}

void write_file(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("build_tar_index: records, members and their offsets, field names once", "[tar][index]") {
  const TarBuilder t = three_samples();
  const TarIndex ix = index_of(t.bytes);
  REQUIRE(ix.records.size() == 3);
  REQUIRE(ix.members.size() == 6);
  REQUIRE(ix.fields == std::vector<std::string>{"jpg", "cls"});
  REQUIRE(ix.records[1].offset == 2048);
  REQUIRE(ix.records[1].first_member == 2);
  REQUIRE(ix.records[1].members == 2);
  const TarIndex::Member& jpg = ix.members[2];
  REQUIRE(jpg.data_offset == 2560);
  REQUIRE(jpg.size == 3);
  REQUIRE(ix.span_begin(ix.records[1]) == 2560);
  REQUIRE(ix.span_end(ix.records[1]) == 3072 + 512 + 1);
  REQUIRE(ix.damages.empty());
}

TEST_CASE("tar index payloads round-trip and malformed ones are refused", "[tar][index]") {
  TarBuilder t = three_samples();
  t.corrupt(1024);  // k/0.cls's header... no: the second sample's first header
  const TarIndex ix = index_of(t.bytes);
  REQUIRE(ix.damages.size() == 1);
  const std::vector<std::byte> payload = serialize_tar_index(ix);
  const auto back = parse_tar_index(payload, t.size());
  REQUIRE(back);
  REQUIRE(back->records.size() == ix.records.size());
  REQUIRE(back->members.size() == ix.members.size());
  REQUIRE(back->damages[0].detail == ix.damages[0].detail);
  REQUIRE(back->damages[0].problem == ix.damages[0].problem);
  for (std::size_t i = 0; i < ix.records.size(); ++i) {
    REQUIRE(back->records[i].offset == ix.records[i].offset);
    REQUIRE(back->records[i].damage == ix.records[i].damage);
  }
  // A shard smaller than the offsets say, every truncation, and a trailing byte are refused.
  REQUIRE_FALSE(parse_tar_index(payload, 100));
  for (std::size_t n = 0; n < payload.size(); n += 7) {
    REQUIRE_FALSE(parse_tar_index(std::span<const std::byte>(payload).first(n), t.size()));
  }
  std::vector<std::byte> longer = payload;
  longer.push_back(std::byte{0});
  REQUIRE_FALSE(parse_tar_index(longer, t.size()));
}

TEST_CASE("the index cache file: valid, stale after a change, memory when read-only",
          "[tar][index]") {
  const std::string dir = temp_dir("cache");
  const std::string shard = dir + "/a.tar";
  const TarBuilder t = three_samples();
  write_file(shard, t.bytes);
  const ShardStat stat = stat_shard(shard, "test");
  REQUIRE(stat.size == t.size());
  const std::vector<std::byte> payload = serialize_tar_index(index_of(t.bytes));
  const std::string idx = index_path(shard, "");
  REQUIRE(idx == shard + ".idx");
  REQUIRE(index_path(shard, "/cache/") == "/cache/a.tar.idx");
  REQUIRE(save_index(idx, kTarIndexMagic, kTarIndexVersion, stat, payload));
  const auto loaded = load_index(idx, kTarIndexMagic, kTarIndexVersion, stat);
  REQUIRE(loaded);
  REQUIRE(*loaded == payload);
  REQUIRE_FALSE(load_index(idx, "otherfmt", kTarIndexVersion, stat));
  REQUIRE_FALSE(load_index(idx, kTarIndexMagic, kTarIndexVersion + 1, stat));
  ShardStat changed = stat;
  changed.mtime_ns += 1;
  REQUIRE_FALSE(load_index(idx, kTarIndexMagic, kTarIndexVersion, changed));
  changed = stat;
  changed.size += 512;
  REQUIRE_FALSE(load_index(idx, kTarIndexMagic, kTarIndexVersion, changed));
  // A flipped payload byte fails the checksum.
  std::vector<std::byte> framed = frame_index(kTarIndexMagic, kTarIndexVersion, stat, payload);
  framed.back() ^= std::byte{1};
  REQUIRE_FALSE(unframe_index(framed, kTarIndexMagic, kTarIndexVersion, stat));
  // A directory that cannot be written: save says so (the caller keeps the index in memory).
  REQUIRE_FALSE(save_index("/proc/stoker-cannot-write/a.tar.idx", kTarIndexMagic, kTarIndexVersion,
                           stat, payload));
  REQUIRE_THROWS_WITH(
      stat_shard(dir + "/missing.tar", "WebDatasetShards"),
      Catch::Contains("WebDatasetShards: cannot open shard " + dir + "/missing.tar"));
  (void)std::system(("rm -rf " + dir).c_str());
}
