// Multi-process training: where this process stands among the ranks a launcher started
// (torchrun, Open MPI's mpirun, MPICH/Intel MPI, Slurm's srun), read from the environment the
// launcher sets. DistributedSampler::from_env() builds the rank's shard from it. stoker never
// links MPI: the launchers' environment variables are all it needs.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "stoker/sampler.hpp"

namespace stoker {

struct LaunchInfo {
  std::size_t rank = 0;
  std::size_t world_size = 1;
  std::size_t local_rank = 0;        // among the ranks on this machine
  std::size_t local_world_size = 1;  // ranks on this machine (they share its cores)
  // Where the values came from: "explicit", "torchrun", "openmpi", "mpich", "slurm", or "none"
  // (a single process).
  std::string source = "none";
};

// Explicit values win over the environment.
struct LaunchOverrides {
  std::optional<std::size_t> rank;
  std::optional<std::size_t> world_size;
  std::optional<std::size_t> local_rank;
  std::optional<std::size_t> local_world_size;
};

// Reads, in order: the overrides; torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE);
// Open MPI (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE); MPICH and Intel MPI
// (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS); Slurm (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, and the tasks on this node), only inside an srun step (SLURM_STEP_ID set), so
// a batch script's own environment is not mistaken for a launch. Logs the source (spdlog,
// info). Throws std::invalid_argument naming the variables when a value is not a number,
// rank >= world_size, or local_rank >= local_world_size.
LaunchInfo detect_launch(const LaunchOverrides& overrides = {});

}  // namespace stoker
