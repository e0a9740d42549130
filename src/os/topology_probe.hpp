// The counts probe_system() reports, from Topology::detect().
#pragma once

#include <cstddef>
#include <string>

namespace stoker::detail {

struct TopologyCounts {
  std::size_t physical_cores = 0;  // 0 when unknown
  std::size_t logical_cpus = 0;
  std::size_t numa_nodes = 0;
  std::string source;
};
TopologyCounts count_topology();

}  // namespace stoker::detail
