#include "support/clean_state.hpp"

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace stoker::test {
namespace {

bool read_stat(pid_t pid, char& state, pid_t& ppid, double* cpu) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return false;
  const std::size_t close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(text.substr(close + 2));
  long ppid_long = 0;
  rest >> state >> ppid_long;
  ppid = static_cast<pid_t>(ppid_long);
  if (cpu != nullptr) {
    std::string skip;
    for (int field = 5; field <= 13; ++field) rest >> skip;
    unsigned long utime = 0;
    unsigned long stime = 0;
    rest >> utime >> stime;
    *cpu = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return true;
}

}  // namespace

std::vector<pid_t> child_pids() {
  std::vector<pid_t> children;
  const pid_t self = getpid();
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return children;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    char state = 0;
    pid_t ppid = 0;
    if (read_stat(static_cast<pid_t>(pid), state, ppid, nullptr) && ppid == self) {
      children.push_back(static_cast<pid_t>(pid));
    }
  }
  closedir(dir);
  return children;
}

namespace {

// Entries of a /proc directory, without "." and "..".
std::size_t count_entries(const char* path) {
  std::size_t n = 0;
  DIR* dir = opendir(path);
  if (dir == nullptr) return 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

}  // namespace

std::size_t open_fd_count() {
  const std::size_t n = count_entries("/proc/self/fd");
  return n > 0 ? n - 1 : 0;  // less the descriptor opendir itself holds
}

std::size_t thread_count() { return count_entries("/proc/self/task"); }

std::size_t ring_mapping_count() {
  std::ifstream maps("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("memfd:stoker-") != std::string::npos) ++n;
  }
  return n;
}

std::size_t rss_shmem_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("RssShmem:", 0) == 0) return std::strtoull(line.c_str() + 9, nullptr, 10);
  }
  return 0;
}

ProcessState process_state() {
  ProcessState state;
  // Children exit asynchronously after being killed: give reaping a moment before judging.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  state.children = child_pids();
  while (!state.children.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    state.children = child_pids();
  }
  state.open_fds = open_fd_count();
  state.ring_mappings = ring_mapping_count();
  state.shmem_kib = rss_shmem_kib();
  return state;
}

std::string differences(const ProcessState& baseline, const ProcessState& now) {
  std::string out;
  if (now.children.size() > baseline.children.size()) {
    out += "child processes left:";
    for (const pid_t pid : now.children) out += " " + std::to_string(pid);
    out += "; ";
  }
  if (now.open_fds != baseline.open_fds) {
    out += "open fds " + std::to_string(now.open_fds) + " (baseline " +
           std::to_string(baseline.open_fds) + "); ";
  }
  if (now.ring_mappings > baseline.ring_mappings) {
    out += "stoker memfd mappings " + std::to_string(now.ring_mappings) + " (baseline " +
           std::to_string(baseline.ring_mappings) + "); ";
  }
  if (now.shmem_kib > baseline.shmem_kib) {
    out += "resident shared memory " + std::to_string(now.shmem_kib) + " KiB (baseline " +
           std::to_string(baseline.shmem_kib) + " KiB); ";
  }
  return out;
}

double process_cpu_seconds(pid_t pid) {
  char state = 0;
  pid_t ppid = 0;
  double cpu = 0;
  return read_stat(pid, state, ppid, &cpu) ? cpu : -1;
}

bool process_alive(pid_t pid) {
  char state = 0;
  pid_t ppid = 0;
  return read_stat(pid, state, ppid, nullptr) && state != 'Z' && state != 'X';
}

namespace {
SettleHook g_settle = nullptr;
}  // namespace

void set_settle_hook(SettleHook hook) { g_settle = hook; }
SettleHook settle_hook() { return g_settle; }

}  // namespace stoker::test
