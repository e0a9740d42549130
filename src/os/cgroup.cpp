#include "os/cgroup.hpp"

#include <sys/stat.h>

#include <cstdlib>
#include <sstream>
#include <vector>

#include "os/posix.hpp"
#include "os/proc.hpp"

namespace stoker::detail {
namespace {

bool is_directory(const std::string& path) {
  struct stat st;
  return posix::stat_path(path.c_str(), st) && S_ISDIR(st.st_mode);
}

bool exists(const std::string& path) {
  struct stat st;
  return posix::stat_path(path.c_str(), st);
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

namespace {

struct CgroupLine {
  bool v2 = false;
  std::string controllers;  // v1: "cpu,cpuacct"; v2: ""
  std::string path;
};

std::vector<CgroupLine> read_cgroup_lines(const std::string& root) {
  std::vector<CgroupLine> lines;
  std::string text;
  if (!read_own_proc_file("cgroup", text, root)) return lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    // "hierarchy-id:controller-list:path"
    const std::size_t a = line.find(':');
    const std::size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    CgroupLine entry;
    entry.controllers = line.substr(a + 1, b - a - 1);
    entry.path = line.substr(b + 1);
    if (entry.path == "/") entry.path.clear();  // the root: no "cpu//file" paths
    entry.v2 = line.compare(0, a, "0") == 0 && entry.controllers.empty();
    lines.push_back(std::move(entry));
  }
  return lines;
}

bool lists(const std::string& controllers, const std::string& controller) {
  std::istringstream list(controllers);
  for (std::string c; std::getline(list, c, ',');) {
    if (c == controller) return true;
  }
  return false;
}

std::optional<std::string> find_in(const std::string& root, const std::string& controller,
                                   const std::string& probe_file, bool v2) {
  const std::string cg = root + "/sys/fs/cgroup";
  for (const CgroupLine& line : read_cgroup_lines(root)) {
    std::vector<std::string> candidates;
    if (v2 && line.v2) {
      candidates = {cg + line.path, cg + "/unified" + line.path, cg, cg + "/unified"};
    } else if (!v2 && !line.v2 && lists(line.controllers, controller)) {
      // Inside a cgroup namespace the path is "/" and the mount's root is the cgroup.
      for (const std::string& mount : {line.controllers, controller}) {
        candidates.push_back(cg + "/" + mount + line.path);
        candidates.push_back(cg + "/" + mount);
      }
    }
    for (const std::string& dir : candidates) {
      if (is_directory(dir) && exists(dir + "/" + probe_file)) return dir;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> find_cgroup_directory(const std::string& root,
                                                 const std::string& controller,
                                                 const std::string& probe_file) {
  if (auto dir = find_in(root, controller, probe_file, false)) return dir;
  return find_in(root, controller, probe_file, true);
}

MemoryCgroup find_memory_cgroup(const std::string& root) {
  if (auto dir = find_in(root, "memory", "memory.limit_in_bytes", false)) return {1, *dir};
  if (auto dir = find_in(root, "memory", "memory.max", true)) return {2, *dir};
  return {};
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
