// Topology: the machine's cores as hwloc sees them (physical cores, the logical CPUs of each,
// NUMA nodes), for choosing num_workers and binding workers to cores. hwloc is used only in
// src/topology.cpp; when it is missing or fails, the kernel's sysfs topology (or just the CPU
// count) stands in, and `source` says which.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace stoker {

class Topology {
 public:
  // Main process. Never throws: the fallbacks always give an answer.
  static Topology detect();

  std::size_t physical_cores() const noexcept { return cores_.size(); }
  std::size_t logical_cpus() const noexcept;
  std::size_t numa_nodes() const noexcept { return numa_nodes_; }
  // The OS numbers of each physical core's logical CPUs (hyperthreads), cores in OS order.
  const std::vector<std::vector<int>>& cores() const noexcept { return cores_; }
  // The core whose logical CPUs include `cpu`; cores().size() when none does.
  std::size_t core_of(int cpu) const noexcept;
  const std::string& source() const noexcept { return source_; }

  // For tests: a topology given by hand.
  Topology(std::vector<std::vector<int>> cores, std::size_t numa_nodes, std::string source)
      : cores_(std::move(cores)), numa_nodes_(numa_nodes), source_(std::move(source)) {}

 private:
  std::vector<std::vector<int>> cores_;
  std::size_t numa_nodes_ = 1;
  std::string source_;
};

// The cores the workers of a loader should run on: one each, avoiding the core `caller_cpu`
// belongs to (the training thread's), cycling when there are more workers than free cores.
// Returns each worker's logical CPUs.
std::vector<std::vector<int>> worker_cores(const Topology& topology, std::size_t num_workers,
                                           int caller_cpu);

}  // namespace stoker
