#include "cgroup.hpp"

#include <sys/stat.h>

#include <cstdlib>
#include <sstream>
#include <vector>

#include "posix.hpp"

namespace stoker::detail {
namespace {

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// The first candidate that exists: the cgroup's own directory, or (inside a cgroup namespace,
// where /proc/self/cgroup says "/") the mount's root.
std::string first_directory(const std::vector<std::string>& candidates, const char* probe) {
  for (const std::string& dir : candidates) {
    if (is_directory(dir) && exists(dir + "/" + probe)) return dir;
  }
  return {};
}

}  // namespace

std::optional<std::uint64_t> find_keyed_value(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ' ') {
      char* end = nullptr;
      const unsigned long long value = std::strtoull(line.c_str() + key.size() + 1, &end, 10);
      if (end != line.c_str() + key.size() + 1) return static_cast<std::uint64_t>(value);
    }
  }
  return std::nullopt;
}

MemoryCgroup find_memory_cgroup(const std::string& root) {
  std::string text;
  MemoryCgroup found;
  if (!posix::read_file((root + "/proc/self/cgroup").c_str(), text)) return found;
  std::istringstream lines(text);
  std::string v2_path;
  std::string v1_path;
  bool have_v2 = false;
  bool have_v1 = false;
  for (std::string line; std::getline(lines, line);) {
    // "hierarchy-id:controller-list:path"
    const std::size_t a = line.find(':');
    const std::size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      v2_path = path;
      have_v2 = true;
    }
    std::istringstream list(controllers);
    for (std::string c; std::getline(list, c, ',');) {
      if (c == "memory") {
        v1_path = path;
        have_v1 = true;
      }
    }
  }
  const std::string cg = root + "/sys/fs/cgroup";
  if (have_v1) {
    const std::string dir =
        first_directory({cg + "/memory" + v1_path, cg + "/memory"}, "memory.limit_in_bytes");
    if (!dir.empty()) return {1, dir};
  }
  if (have_v2) {
    const std::string dir = first_directory(
        {cg + v2_path, cg + "/unified" + v2_path, cg, cg + "/unified"}, "memory.max");
    if (!dir.empty()) return {2, dir};
  }
  return found;
}

std::optional<OomCount> read_oom_kill_count(const std::string& root) {
  const MemoryCgroup cgroup = find_memory_cgroup(root);
  std::string text;
  if (cgroup.version != 0) {
    const std::string file =
        cgroup.directory + (cgroup.version == 2 ? "/memory.events" : "/memory.oom_control");
    if (posix::read_file(file.c_str(), text)) {
      if (const std::optional<std::uint64_t> n = find_keyed_value(text, "oom_kill")) {
        return OomCount{*n, file};
      }
    }
  }
  const std::string vmstat = root + "/proc/vmstat";
  if (posix::read_file(vmstat.c_str(), text)) {
    if (const std::optional<std::uint64_t> n = find_keyed_value(text, "oom_kill")) {
      return OomCount{*n, vmstat};
    }
  }
  return std::nullopt;
}

}  // namespace stoker::detail
