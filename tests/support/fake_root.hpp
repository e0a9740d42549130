// A scratch directory tree standing in for / (proc/, sys/...), for the readers that take a
// root prefix. Removed when the test ends.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace stoker::test {

struct FakeRoot {
  std::string root;
  FakeRoot() {
    char templ[] = "/tmp/stoker-fakeroot-XXXXXX";
    root = ::mkdtemp(templ);
  }
  ~FakeRoot() { (void)!std::system(("rm -rf " + root).c_str()); }
  FakeRoot(const FakeRoot&) = delete;
  FakeRoot& operator=(const FakeRoot&) = delete;

  void write(const std::string& path, const std::string& text) const {
    const std::string full = root + path;
    (void)!std::system(("mkdir -p " + full.substr(0, full.rfind('/'))).c_str());
    std::ofstream(full) << text;
  }
};

}  // namespace stoker::test
