// Where this process's memory cgroup lives, and what it counts. Reads this process's cgroup
// file (/proc/thread-self/cgroup, so it survives the main thread's exit; proc.hpp) and
// the cgroup filesystem (v2, v1, or the hybrid layout with v2 under /sys/fs/cgroup/unified).
// Every reader takes a root prefix so tests can point it at a fake /proc and /sys tree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace stoker::detail {

struct MemoryCgroup {
  int version = 0;        // 1 or 2; 0 when none was found
  std::string directory;  // e.g. "/sys/fs/cgroup/memory/job42" (with the root prefix)
};

// `root` is "" for the real system, or a directory holding proc/ and sys/ for tests.
MemoryCgroup find_memory_cgroup(const std::string& root = "");

// The directory of this process's cgroup for `controller` (v1: the controller's hierarchy;
// v2: the unified one) that holds `probe_file`; empty when there is none.
std::optional<std::string> find_cgroup_directory(const std::string& root,
                                                 const std::string& controller,
                                                 const std::string& probe_file);

// Times the kernel's OOM killer has killed a process in this cgroup (v2 memory.events or v1
// memory.oom_control), or system-wide (/proc/vmstat) when there is no memory cgroup. Empty
// when no source is readable.
struct OomCount {
  std::uint64_t kills = 0;
  std::string source;  // the file it came from
};
std::optional<OomCount> read_oom_kill_count(const std::string& root = "");

// The value after `key` on the line that starts with it ("oom_kill 3" -> 3), in file text.
std::optional<std::uint64_t> find_keyed_value(const std::string& text, const std::string& key);

}  // namespace stoker::detail
