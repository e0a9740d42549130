// The launcher's view of this process (torchrun, Open MPI, MPICH, Slurm), for the loader's own
// use: a single process when the launcher's variables are inconsistent (DistributedSampler, not
// the loader, reports those).
#pragma once

#include "stoker/distributed.hpp"

namespace stoker::detail {

LaunchInfo detect_launch_quietly() noexcept;

}  // namespace stoker::detail
