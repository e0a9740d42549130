// The tar parser of WebDataset shards (src/datasets/shards/tar_reader.hpp), on archives built
// block by block: header fields, pax records, GNU long names, member names as samples, and
// what a damaged or truncated stream gives.
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "datasets/shards/byte_source.hpp"
#include "datasets/shards/tar_reader.hpp"
#include "stoker/random.hpp"
#include "support/tar_builder.hpp"

using namespace stoker;
using namespace stoker::detail;
using stoker::test::TarBuilder;

namespace {

std::span<const std::byte, kTarBlock> first_block(const TarBuilder& t, std::size_t at = 0) {
  return std::span<const std::byte, kTarBlock>(t.bytes.data() + at, kTarBlock);
}

struct Scanned {
  std::vector<TarMember> members;
  std::vector<TarDamage> damages;
  std::vector<std::string> order;  // "m:<path>" / "d:<problem>"
};

Scanned scan(const std::vector<std::byte>& bytes) {
  auto source = memory_source(bytes);
  TarScanner scanner(*source, 0);
  Scanned out;
  for (;;) {
    TarMember m;
    TarDamage d;
    const TarScanner::Step step = scanner.next(m, d);
    if (step == TarScanner::Step::kEnd) break;
    if (step == TarScanner::Step::kMember) {
      out.order.push_back("m:" + m.path);
      out.members.push_back(m);
    } else {
      out.order.push_back("d:" + std::string(tar_problem_name(d.problem)));
      out.damages.push_back(d);
    }
  }
  return out;
}

std::vector<TarSample> samples(const std::vector<std::byte>& bytes, bool read = true) {
  auto source = memory_source(bytes);
  TarSampleReader reader(
      *source, 0, [](const void*, std::string_view) { return true; }, nullptr);
  std::vector<TarSample> out;
  TarSample s;
  while (reader.next(s, read)) out.push_back(s);
  return out;
}

std::string field_text(const TarSample& s, std::size_t i) {
  const TarSample::Member& m = s.members.at(i);
  REQUIRE(m.stored);
  return std::string(reinterpret_cast<const char*>(s.storage.data() + m.stored_at), m.size);
}

}  // namespace

TEST_CASE("parse_tar_header reads a ustar block and checks its checksum", "[tar]") {
  TarBuilder t;
  t.header("a/b.jpg", 1234);
  TarHeader h;
  TarProblem p = TarProblem::kNone;
  REQUIRE(parse_tar_header(first_block(t), h, p) == HeaderParse::kHeader);
  REQUIRE(h.name == "a/b.jpg");
  REQUIRE(h.size == 1234);
  REQUIRE(h.type == '0');
  REQUIRE(h.stored_checksum == h.computed_checksum);

  t.corrupt(0);
  REQUIRE(parse_tar_header(first_block(t), h, p) == HeaderParse::kBad);
  REQUIRE(p == TarProblem::kBadChecksum);
  REQUIRE(h.stored_checksum + 1 == h.computed_checksum);

  const std::array<std::byte, kTarBlock> zero{};
  REQUIRE(parse_tar_header(zero, h, p) == HeaderParse::kZero);
}

TEST_CASE("parse_tar_header: POSIX prefix, GNU magic, base-256 and bad sizes", "[tar]") {
  TarHeader h;
  TarProblem p = TarProblem::kNone;
  SECTION("POSIX ustar joins prefix and name") {
    TarBuilder t;
    t.header("name.txt", 1, '0', "some/long/dir");
    REQUIRE(parse_tar_header(first_block(t), h, p) == HeaderParse::kHeader);
    REQUIRE(h.name == "some/long/dir/name.txt");
  }
  SECTION("GNU's magic leaves those bytes out of the name") {
    TarBuilder t;
    t.header("name.txt", 1, '0', "", true);
    REQUIRE(parse_tar_header(first_block(t), h, p) == HeaderParse::kHeader);
    REQUIRE(h.name == "name.txt");
  }
  SECTION("a base-256 size (GNU, for members of 8 GiB and more)") {
    TarBuilder t;
    t.header("big.bin", 0);
    std::vector<std::byte>& b = t.bytes;
    for (std::size_t i = 124; i < 136; ++i) b[i] = std::byte{0};
    b[124] = std::byte{0x80};
    b[131] = std::byte{0x02};  // 2 << 32 = 8 GiB
    std::memset(b.data() + 148, ' ', 8);
    unsigned sum = 0;
    for (std::size_t i = 0; i < 512; ++i) sum += std::to_integer<unsigned>(b[i]);
    const std::string octal = fmt::format("{:06o}", sum);
    std::memcpy(b.data() + 148, octal.data(), 6);
    b[154] = std::byte{0};
    REQUIRE(parse_tar_header(first_block(t), h, p) == HeaderParse::kHeader);
    REQUIRE(h.size == (std::uint64_t{2} << 32));
  }
  SECTION("a size that is not octal") {
    TarBuilder t;
    t.header("x.bin", 0);
    t.bytes[125] = static_cast<std::byte>('9');
    std::memset(t.bytes.data() + 148, ' ', 8);
    unsigned sum = 0;
    for (std::size_t i = 0; i < 512; ++i) sum += std::to_integer<unsigned>(t.bytes[i]);
    const std::string octal = fmt::format("{:06o}", sum);
    std::memcpy(t.bytes.data() + 148, octal.data(), 6);
    t.bytes[154] = std::byte{0};
    REQUIRE(parse_tar_header(first_block(t), h, p) == HeaderParse::kBad);
    REQUIRE(p == TarProblem::kBadNumber);
  }
}

TEST_CASE("parse_pax_records takes path and size and refuses malformed records", "[tar]") {
  auto bytes = [](std::string_view s) {
    return std::vector<std::byte>(reinterpret_cast<const std::byte*>(s.data()),
                                  reinterpret_cast<const std::byte*>(s.data()) + s.size());
  };
  PaxOverrides o;
  REQUIRE(parse_pax_records(bytes("30 mtime=1700000000.123456789\n18 path=dir/a.jpg\n"
                                  "16 size=9999999\n"),
                            o));
  REQUIRE(o.path == std::optional<std::string>("dir/a.jpg"));
  REQUIRE(o.size == std::optional<std::uint64_t>(9999999));
  PaxOverrides padded;
  REQUIRE(parse_pax_records(bytes(std::string("12 path=x.y\n\0\0\0", 15)), padded));
  REQUIRE(padded.path == std::optional<std::string>("x.y"));
  PaxOverrides bad;
  REQUIRE_FALSE(parse_pax_records(bytes("13 path=x.y\n"), bad));  // length one too many
  REQUIRE_FALSE(parse_pax_records(bytes("11 pathx.y\n"), bad));   // no '='
  REQUIRE_FALSE(parse_pax_records(bytes("12 size=1x\n"), bad));   // not a number
  REQUIRE_FALSE(parse_pax_records(bytes("999 path=x\n"), bad));   // runs past the payload
  REQUIRE_FALSE(parse_pax_records(bytes("path=x\n"), bad));       // no length
}

TEST_CASE("split_member_name: key up to the first '.' after the last '/'", "[tar]") {
  std::string_view key;
  std::string_view field;
  REQUIRE(split_member_name("dir/img001.seg.png", key, field));
  REQUIRE(key == "dir/img001");
  REQUIRE(field == "seg.png");
  REQUIRE(split_member_name("v1.2/x.jpg", key, field));
  REQUIRE(key == "v1.2/x");
  REQUIRE(field == "jpg");
  REQUIRE_FALSE(split_member_name("README", key, field));
  REQUIRE_FALSE(split_member_name("dir/.hidden.jpg", key, field));
  REQUIRE_FALSE(split_member_name("dir/._x.jpg", key, field));
  REQUIRE_FALSE(split_member_name("dir/", key, field));
  REQUIRE_FALSE(split_member_name("x.", key, field));
}

TEST_CASE("TarScanner: members, pax paths and sizes, GNU long names, directories", "[tar]") {
  const std::string long_path(150, 'p');
  TarBuilder t;
  t.header("dir/", 0, '5');
  t.file("dir/a.txt", "hello");
  t.pax("dir/" + long_path + ".bin").file("truncated-name", "12345678");
  t.long_name("gnu/" + long_path + ".cls").file("short", "7");
  t.pax("sized.bin", "3").header("sized.bin", 0).data("abc");
  t.header("link.txt", 0, '2');
  t.end();
  const Scanned s = scan(t.bytes);
  REQUIRE(s.damages.empty());
  REQUIRE(s.order == std::vector<std::string>{"m:dir/a.txt", "m:dir/" + long_path + ".bin",
                                              "m:gnu/" + long_path + ".cls", "m:sized.bin"});
  REQUIRE(s.members[0].size == 5);
  REQUIRE(s.members[0].header_offset == 512);
  REQUIRE(s.members[0].data_offset == 1024);
  REQUIRE(s.members[1].size == 8);
  REQUIRE(s.members[1].header_offset == 1536);  // the pax header belongs to its member
  REQUIRE(s.members[3].size == 3);              // the pax size wins over the header's 0
}

TEST_CASE("TarScanner: the end without zero blocks, with one, and a lone zero block", "[tar]") {
  TarBuilder t;
  t.file("a.txt", "x");
  REQUIRE(scan(t.bytes).members.size() == 1);  // the stream just ends
  TarBuilder one = t;
  one.bytes.insert(one.bytes.end(), 512, std::byte{0});
  REQUIRE(scan(one.bytes).members.size() == 1);
  TarBuilder gap = one;
  gap.file("b.txt", "y").end();  // a single zero block between members is padding
  REQUIRE(scan(gap.bytes).members.size() == 2);
}

TEST_CASE("TarScanner: a damaged header is passed over to the next good one", "[tar]") {
  TarBuilder t;
  t.file("a.txt", "first");
  const std::size_t bad_at = t.size();
  t.file("b.txt", std::string(2000, 'b'));  // its data spans several blocks
  const std::size_t next_at = t.size();
  t.file("c.txt", "third").end();
  t.corrupt(bad_at);
  const Scanned s = scan(t.bytes);
  REQUIRE(s.order == std::vector<std::string>{"m:a.txt", "d:a member header with a wrong checksum",
                                              "m:c.txt"});
  REQUIRE(s.damages[0].offset == bad_at);
  REQUIRE(s.damages[0].resume == next_at);
  REQUIRE_THAT(s.damages[0].detail, Catch::StartsWith("stored checksum "));
}

TEST_CASE("TarScanner: truncation inside a header and inside data", "[tar]") {
  TarBuilder t;
  t.file("a.txt", "first").file("b.txt", std::string(3000, 'b'));
  SECTION("inside the data") {
    std::vector<std::byte> cut(t.bytes.begin(), t.bytes.begin() + 1024 + 512 + 1000);
    const Scanned s = scan(cut);
    REQUIRE(s.order.back() == "d:the shard ends early (truncated)");
    REQUIRE(s.damages.back().in_member);
    REQUIRE(s.damages.back().offset == 1024);  // b.txt's header
  }
  SECTION("inside a header") {
    std::vector<std::byte> cut(t.bytes.begin(), t.bytes.begin() + 1024 + 100);
    const Scanned s = scan(cut);
    REQUIRE(s.order == std::vector<std::string>{"m:a.txt", "d:the shard ends early (truncated)"});
    REQUIRE_FALSE(s.damages.back().in_member);
  }
}

TEST_CASE("TarSampleReader groups consecutive members by key", "[tar]") {
  TarBuilder t;
  t.file("s/000.jpg", "J0").file("s/000.cls", "0");
  t.header("s/", 0, '5');  // passed over: not a member
  t.file("s/001.jpg", "J1").file("s/001.cls", "1").file("s/001.meta.json", "{}");
  t.file("README", "not a sample member");
  t.file("s/000.jpg", "again: a new sample, as the keys are not consecutive");
  t.end();
  const std::vector<TarSample> s = samples(t.bytes);
  REQUIRE(s.size() == 3);
  REQUIRE(s[0].key == "s/000");
  REQUIRE(s[0].members.size() == 2);
  REQUIRE(field_text(s[0], 0) == "J0");
  REQUIRE(s[0].members[1].field == "cls");
  REQUIRE(s[1].key == "s/001");
  REQUIRE(s[1].members.size() == 3);
  REQUIRE(s[1].members[2].field == "meta.json");
  REQUIRE(field_text(s[1], 2) == "{}");
  REQUIRE(s[1].offset == 1024 + 1024 + 512);
  REQUIRE(s[2].key == "s/000");
  const std::vector<TarSample> headers_only = samples(t.bytes, false);
  REQUIRE(headers_only.size() == 3);
  REQUIRE_FALSE(headers_only[1].members[0].stored);
  REQUIRE(headers_only[1].members[0].data_offset == s[1].members[0].data_offset);
}

TEST_CASE("TarSampleReader: whose is a damaged stretch", "[tar]") {
  SECTION("between samples: a bad record of its own") {
    TarBuilder t;
    t.file("a.jpg", "A").file("a.cls", "0");
    const std::size_t bad = t.size();
    t.file("b.jpg", "B").file("b.cls", "1").file("c.jpg", "C").end();
    t.corrupt(bad);
    const std::vector<TarSample> s = samples(t.bytes);
    // a (good), the damage, b (its .cls only: the damage took b.jpg), c.
    REQUIRE(s.size() == 4);
    REQUIRE_FALSE(s[0].damage);
    REQUIRE(s[0].members.size() == 2);
    REQUIRE(s[1].damage);
    REQUIRE(s[1].offset == bad);
    REQUIRE(s[2].key == "b");
    REQUIRE(s[3].key == "c");
  }
  SECTION("the first header of a sample, its name still readable: that sample is bad") {
    TarBuilder t;
    t.file("a.jpg", "A").file("a.cls", "0");
    const std::size_t bad = t.size();
    t.file("b.jpg", "B").file("b.cls", "1").file("c.jpg", "C").end();
    t.corrupt_mode(bad);
    const std::vector<TarSample> s = samples(t.bytes);
    REQUIRE(s.size() == 3);
    REQUIRE_FALSE(s[0].damage);
    REQUIRE(s[1].key == "b");
    REQUIRE(s[1].damage);
    REQUIRE(s[1].offset == bad);
    REQUIRE(s[1].damage->name_hint == "b.jpg");
    REQUIRE_FALSE(s[2].damage);
  }
  SECTION("the last header of a sample, its name still readable: that sample is bad") {
    TarBuilder t;
    t.file("a.jpg", "A");
    const std::size_t bad = t.size();
    t.file("a.cls", "0").file("b.jpg", "B").end();
    t.corrupt_mode(bad);
    const std::vector<TarSample> s = samples(t.bytes);
    REQUIRE(s.size() == 2);
    REQUIRE(s[0].damage);
    REQUIRE(s[0].offset == 0);
    REQUIRE_FALSE(s[1].damage);
  }
  SECTION("inside a sample: that sample is the bad record") {
    TarBuilder t;
    t.file("a.jpg", "A");
    const std::size_t bad = t.size();
    t.file("a.txt", "T").file("a.cls", "0").file("b.jpg", "B").end();
    t.corrupt(bad);
    const std::vector<TarSample> s = samples(t.bytes);
    REQUIRE(s.size() == 2);
    REQUIRE(s[0].key == "a");
    REQUIRE(s[0].damage);
    REQUIRE(s[0].damage->problem == TarProblem::kBadChecksum);
    REQUIRE(s[0].offset == 0);
    REQUIRE(s[1].key == "b");
    REQUIRE_FALSE(s[1].damage);
  }
  SECTION("a field twice") {
    TarBuilder t;
    t.file("a.jpg", "A").file("a.jpg", "A2").file("b.jpg", "B").end();
    const std::vector<TarSample> s = samples(t.bytes);
    REQUIRE(s.size() == 2);
    REQUIRE(s[0].damage->problem == TarProblem::kDuplicateField);
    REQUIRE_FALSE(s[1].damage);
  }
  SECTION("truncated inside the last sample") {
    TarBuilder t;
    t.file("a.jpg", "A").file("b.jpg", std::string(4000, 'b'));
    t.bytes.resize(t.bytes.size() - 1000);
    const std::vector<TarSample> s = samples(t.bytes);
    REQUIRE(s.size() == 2);
    REQUIRE(s[1].damage->problem == TarProblem::kTruncated);
    REQUIRE(s[1].key == "b");
  }
}

TEST_CASE("mutated archives are parsed or reported, never read outside their bytes",
          "[tar][fuzz]") {
  TarBuilder t;
  t.file("a/0.jpg", std::string(700, 'j')).file("a/0.cls", "3");
  t.pax("a/" + std::string(130, 'l') + ".txt").file("x", "pax");
  t.long_name("b/" + std::string(120, 'g') + ".bin").file("y", "gnu");
  t.file("a/1.jpg", "J").end();
  stoker::Generator rng(1234);
  for (int round = 0; round < 3000; ++round) {
    std::vector<std::byte> bytes = t.bytes;
    const int edits = 1 + static_cast<int>(rng.below(8));
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = static_cast<std::size_t>(rng.below(bytes.size()));
      switch (rng.below(3)) {
        case 0:
          bytes[at] = static_cast<std::byte>(rng.below(256));
          break;
        case 1:  // an octal digit in a header's size field
          bytes[at / 512 * 512 + 124 + rng.below(11)] = static_cast<std::byte>('0' + rng.below(8));
          break;
        default:
          bytes.resize(at);
          break;
      }
      if (bytes.empty()) break;
    }
    const std::vector<TarSample> got = samples(bytes);
    for (const TarSample& s : got) {
      REQUIRE(s.offset <= bytes.size());
      if (s.damage) continue;  // a bad record: its members are not used
      for (const TarSample::Member& m : s.members) {
        REQUIRE(m.data_offset <= bytes.size());
        REQUIRE(m.size <= bytes.size() - m.data_offset);
        if (m.stored) REQUIRE(m.stored_at + m.size <= s.storage.size());
      }
    }
    REQUIRE(samples(bytes, false).size() == got.size());  // numbered alike, read or not
  }
}
