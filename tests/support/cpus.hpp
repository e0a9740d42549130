// The CPUs a process may run on, read from /proc/<pid>/status ("Cpus_allowed_list"), not
// through sched_getaffinity, so tests check the library's placement by another road.
#pragma once

#include <sys/types.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace stoker::test {

inline std::vector<int> allowed_cpus(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::vector<int> cpus;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Cpus_allowed_list:", 0) != 0) continue;
    std::istringstream list(line.substr(18));
    for (std::string part; std::getline(list, part, ',');) {
      const std::size_t dash = part.find('-');
      const int first = std::stoi(part.substr(0, dash));
      const int last = dash == std::string::npos ? first : std::stoi(part.substr(dash + 1));
      for (int c = first; c <= last; ++c) cpus.push_back(c);
    }
  }
  return cpus;
}

}  // namespace stoker::test
