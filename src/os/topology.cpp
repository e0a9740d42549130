// The only file that includes <hwloc.h>.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>
#include <hwloc.h>

#include "os/posix.hpp"
#include "os/topology_probe.hpp"
#include "stoker/topology.hpp"

namespace stoker {
namespace {

// hwloc: cores and their PUs, NUMA nodes. Empty on failure.
bool detect_hwloc(std::vector<std::vector<int>>& cores, std::size_t& numa) {
  hwloc_topology_t topology = nullptr;
  if (hwloc_topology_init(&topology) != 0) return false;
  bool ok = hwloc_topology_load(topology) == 0;
  if (ok) {
    const int n = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_CORE);
    for (int i = 0; i < n; ++i) {
      hwloc_obj_t core = hwloc_get_obj_by_type(topology, HWLOC_OBJ_CORE, static_cast<unsigned>(i));
      std::vector<int> cpus;
      for (int cpu = hwloc_bitmap_first(core->cpuset); cpu != -1;
           cpu = hwloc_bitmap_next(core->cpuset, cpu)) {
        cpus.push_back(cpu);
      }
      if (!cpus.empty()) cores.push_back(std::move(cpus));
    }
    const int nodes = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE);
    numa = nodes > 0 ? static_cast<std::size_t>(nodes) : 1;
    ok = !cores.empty();
  }
  hwloc_topology_destroy(topology);
  return ok;
}

// sysfs: /sys/devices/system/cpu/cpuN/topology/{physical_package_id,core_id}.
bool detect_sysfs(std::vector<std::vector<int>>& cores) {
  std::map<std::pair<int, int>, std::vector<int>> by_core;
  const long online = static_cast<long>(detail::posix::online_cpus());
  for (long cpu = 0; cpu < online; ++cpu) {
    const std::string dir = fmt::format("/sys/devices/system/cpu/cpu{}/topology/", cpu);
    std::string package;
    std::string core;
    if (!detail::posix::read_file((dir + "physical_package_id").c_str(), package) ||
        !detail::posix::read_file((dir + "core_id").c_str(), core)) {
      return false;
    }
    by_core[{std::atoi(package.c_str()), std::atoi(core.c_str())}].push_back(static_cast<int>(cpu));
  }
  for (auto& [key, cpus] : by_core) cores.push_back(std::move(cpus));
  return !cores.empty();
}

}  // namespace

Topology Topology::detect() {
  std::vector<std::vector<int>> cores;
  std::size_t numa = 1;
  if (std::getenv("STOKER_NO_HWLOC") == nullptr && detect_hwloc(cores, numa)) {
    return Topology(std::move(cores), numa, "hwloc");
  }
  cores.clear();
  if (detect_sysfs(cores)) return Topology(std::move(cores), 1, "sysfs cpu topology");
  // Every logical CPU its own core: the best guess without topology information.
  const long online = static_cast<long>(detail::posix::online_cpus());
  for (long cpu = 0; cpu < online; ++cpu) cores.push_back({static_cast<int>(cpu)});
  return Topology(std::move(cores), 1, "sysconf(_SC_NPROCESSORS_ONLN) (cores unknown)");
}

std::size_t Topology::logical_cpus() const noexcept {
  std::size_t n = 0;
  for (const std::vector<int>& core : cores_) n += core.size();
  return n;
}

std::size_t Topology::core_of(int cpu) const noexcept {
  for (std::size_t c = 0; c < cores_.size(); ++c) {
    if (std::find(cores_[c].begin(), cores_[c].end(), cpu) != cores_[c].end()) return c;
  }
  return cores_.size();
}

std::vector<std::vector<int>> worker_cores(const Topology& topology, std::size_t num_workers,
                                           int caller_cpu) {
  std::vector<std::size_t> free;
  const std::size_t caller = topology.core_of(caller_cpu);
  for (std::size_t c = 0; c < topology.physical_cores(); ++c) {
    if (c != caller) free.push_back(c);
  }
  if (free.empty()) free.push_back(caller);  // a single core: share it
  std::vector<std::vector<int>> out;
  for (std::size_t w = 0; w < num_workers; ++w)
    out.push_back(topology.cores()[free[w % free.size()]]);
  return out;
}

namespace detail {

TopologyCounts count_topology() {
  const Topology t = Topology::detect();
  TopologyCounts counts;
  counts.logical_cpus = t.logical_cpus();
  counts.numa_nodes = t.numa_nodes();
  counts.source = t.source();
  // Without topology information the "cores" are logical CPUs: say unknown rather than guess.
  counts.physical_cores =
      t.source().find("cores unknown") == std::string::npos ? t.physical_cores() : 0;
  return counts;
}

}  // namespace detail
}  // namespace stoker
