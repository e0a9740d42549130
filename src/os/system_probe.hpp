// The memory part of probe_system() (stoker/memory.hpp) on its own, for the loader's
// pre-flight check: /proc/meminfo and the memory cgroup, without the CPU topology (hwloc), the
// storage and the resource limits. Loading the topology costs the main process a few hundred
// KiB of heap for a moment, more than the whole loader of small samples needs; the check needs
// none of it. Main process; never throws for a missing or unreadable source.
#pragma once

#include "stoker/system_probe.hpp"

namespace stoker::detail {

// mem_total, mem_available, swap_total, swap_used, cgroup_limit and cgroup_usage, as
// probe_system() fills them; every other field unknown.
SystemInfo probe_memory_limits(const ProbeOptions& options = {});

}  // namespace stoker::detail
