// What this machine (or container) allows: probe_system() reads memory (MemAvailable, the
// memory cgroup's limit and usage, swap), the CPU quota, /dev/shm, resource limits, the CPU
// topology and the storage under a path, each figure with the file it came from. Used by the
// memory check (stoker/memory.hpp, which includes this header), recommend_num_workers() and
// stoker-tune.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace stoker {

// A value read from the system, with where it came from; `value` is empty when no source could
// be read ("unknown", never a made-up zero).
template <class T>
struct Probed {
  std::optional<T> value;
  std::string source = "unknown";
  bool known() const noexcept { return value.has_value(); }
};

struct SystemInfo {
  Probed<std::uint64_t> mem_total;      // bytes
  Probed<std::uint64_t> mem_available;  // MemAvailable: what can be used without swapping
  Probed<std::uint64_t> swap_total;
  Probed<std::uint64_t> swap_used;
  Probed<std::uint64_t> cgroup_limit;  // the memory cgroup's limit; empty when unlimited
  Probed<std::uint64_t> cgroup_usage;
  Probed<double> cpu_quota;        // CPUs the cgroup may use; empty when unlimited
  Probed<std::uint64_t> shm_size;  // /dev/shm (what Docker's --shm-size sets)
  Probed<std::uint64_t> shm_free;
  Probed<std::uint64_t> memlock_limit;  // RLIMIT_MEMLOCK; empty when unlimited
  Probed<std::uint64_t> nofile_limit;   // RLIMIT_NOFILE
  Probed<std::size_t> physical_cores;
  Probed<std::size_t> logical_cpus;
  Probed<std::size_t> numa_nodes;
  Probed<bool> rotational;          // the disk under ProbeOptions::path spins
  Probed<bool> network_filesystem;  // ProbeOptions::path is on NFS, CIFS, a FUSE mount...

  // The memory a new process tree may still use: MemAvailable, or what the cgroup's limit
  // leaves, whichever is smaller. Empty when neither is known.
  std::optional<std::uint64_t> usable_memory() const noexcept;
};

struct ProbeOptions {
  std::string root;        // "" for this machine; a directory with proc/ and sys/ for tests
  std::string path = ".";  // where the data lives, for `rotational` and `network_filesystem`
};

// Main process. Never throws for a missing or unreadable source: that field stays unknown.
SystemInfo probe_system(const ProbeOptions& options = {});

}  // namespace stoker
