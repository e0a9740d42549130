// ShardFiles: a bounded LRU of open shard files per process, and a read window that reads
// ahead only on sequential access.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "datasets/shards/shard_files.hpp"
#include "stoker/errors.hpp"

using stoker::detail::ShardFiles;
namespace fs = std::filesystem;

namespace {
struct Files {
  Files() : dir("/tmp/stoker-shard-files-" + std::to_string(::getpid())) {
    fs::create_directories(dir);
    for (int i = 0; i < 5; ++i) {
      std::ofstream out(path(i), std::ios::binary);
      for (int k = 0; k < 300000; ++k) out.put(static_cast<char>((k + i) % 251));
    }
  }
  ~Files() { fs::remove_all(dir); }
  std::string path(int i) const { return dir + "/s" + std::to_string(i) + ".tar"; }
  std::string dir;
};
}  // namespace

TEST_CASE("ShardFiles keeps at most max_open files open, least recently used closed first",
          "[shards][files]") {
  const Files f;
  ShardFiles files(2);
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < 5; ++i) {
      const auto bytes = files.read(i, f.path(static_cast<int>(i)), 1000, 10);
      REQUIRE(std::to_integer<int>(bytes[0]) == static_cast<int>((1000 + i) % 251));
      REQUIRE(files.open_count() <= 2);
    }
  }
  const int a = files.fd(3, f.path(3));
  const int b = files.fd(4, f.path(4));
  REQUIRE(files.fd(3, f.path(3)) == a);  // kept open
  files.fd(0, f.path(0));                // closes the least recently used: 4
  REQUIRE(files.open_count() == 2);
  REQUIRE(files.fd(3, f.path(3)) == a);
  (void)b;
  REQUIRE_THROWS_AS(ShardFiles(0), std::invalid_argument);
}

TEST_CASE("ShardFiles reads ahead on sequential reads only, and reports short files",
          "[shards][files]") {
  const Files f;
  ShardFiles files;
  // 100-byte records 1 KiB apart (a tar's header and padding between them): after the first
  // few reads the window covers many.
  for (std::uint64_t off = 0; off < 290000; off += 1024) {
    const auto bytes = files.read(0, f.path(0), off, 100);
    REQUIRE(std::to_integer<int>(bytes[99]) == static_cast<int>((off + 99) % 251));
  }
  REQUIRE(files.read_calls() < 20);
  // Reads far apart (more than 16 KiB) read what they ask, one call each.
  ShardFiles random;
  for (std::uint64_t k = 0; k < 50; ++k) random.read(1, f.path(1), (k * 104729) % 290000, 100);
  REQUIRE(random.read_calls() == 50);
  REQUIRE_THROWS_WITH(files.read(2, f.path(2), 299990, 100),
                      Catch::Contains("ends at byte 300000, before the 100 bytes its index says"));
  REQUIRE_THROWS_WITH(files.read(9, f.dir + "/missing.tar", 0, 1),
                      Catch::Contains("cannot open shard " + f.dir + "/missing.tar"));
}
