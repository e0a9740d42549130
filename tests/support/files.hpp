// Scratch files for tests: a directory under /tmp that is removed with all it holds when the
// test ends, and whole-file reads and writes.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace stoker::test {

// /tmp/stoker-<name>-XXXXXX, made unique by mkdtemp.
struct TempDir {
  explicit TempDir(std::string_view name = "test") {
    std::string templ = "/tmp/stoker-" + std::string(name) + "-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      throw std::runtime_error("TempDir: mkdtemp failed for " + templ);
    }
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string path;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace stoker::test
