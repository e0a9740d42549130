#include "datasets/launch.hpp"

#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include "os/log.hpp"

namespace stoker {
namespace {

// A launcher's variables: rank, world size, local rank, local world size.
struct Source {
  const char* name;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

constexpr Source kSources[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_TASKS_PER_NODE"},
};

std::optional<std::size_t> read(const char* variable) {
  const char* text = std::getenv(variable);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  // Slurm writes tasks per node as "4(x2)" or "2,1": the count of this node is the first.
  const bool slurm_list = std::string(variable) == "SLURM_TASKS_PER_NODE" && end != text &&
                          (*end == '(' || *end == ',');
  if (end == text || (*end != '\0' && !slurm_list) || errno != 0 || text[0] == '-') {
    throw std::invalid_argument(
        fmt::format("detect_launch: {}='{}' is not a non-negative whole number; fix the launcher's "
                    "environment or pass the values explicitly",
                    variable, text));
  }
  return static_cast<std::size_t>(value);
}

}  // namespace

LaunchInfo detect_launch(const LaunchOverrides& overrides) {
  LaunchInfo info;
  const Source* found = nullptr;
  for (const Source& source : kSources) {
    if (std::string(source.name) == "slurm" && std::getenv("SLURM_STEP_ID") == nullptr) continue;
    if (std::getenv(source.rank) != nullptr && std::getenv(source.size) != nullptr) {
      found = &source;
      break;
    }
  }
  std::string rank_name = "rank";
  std::string size_name = "world_size";
  if (found != nullptr) {
    info.source = found->name;
    info.rank = *read(found->rank);
    info.world_size = *read(found->size);
    info.local_rank = read(found->local_rank).value_or(0);
    info.local_world_size = read(found->local_size).value_or(1);
    rank_name = found->rank;
    size_name = found->size;
  }
  if (overrides.rank || overrides.world_size || overrides.local_rank ||
      overrides.local_world_size) {
    info.source = found != nullptr ? fmt::format("explicit (over {})", found->name) : "explicit";
  }
  if (overrides.rank) info.rank = *overrides.rank;
  if (overrides.world_size) info.world_size = *overrides.world_size;
  if (overrides.local_rank) info.local_rank = *overrides.local_rank;
  if (overrides.local_world_size) info.local_world_size = *overrides.local_world_size;
  if (info.world_size == 0 || info.rank >= info.world_size) {
    throw std::invalid_argument(fmt::format(
        "detect_launch: rank {} ({}) is not below world size {} ({}); ranks count from 0",
        info.rank, overrides.rank ? "given" : rank_name, info.world_size,
        overrides.world_size ? "given" : size_name));
  }
  if (info.local_world_size == 0 || info.local_rank >= info.local_world_size) {
    throw std::invalid_argument(
        fmt::format("detect_launch: local rank {} is not below local world size {}",
                    info.local_rank, info.local_world_size));
  }
  try {
    detail::logger().info("stoker: rank {} of {} (local {} of {}), from {}", info.rank,
                          info.world_size, info.local_rank, info.local_world_size, info.source);
  } catch (...) {
  }
  return info;
}

DistributedSampler DistributedSampler::from_env(std::size_t dataset_size) {
  return from_env(dataset_size, Options{}, LaunchOverrides{});
}

DistributedSampler DistributedSampler::from_env(std::size_t dataset_size, Options options) {
  return from_env(dataset_size, options, LaunchOverrides{});
}

DistributedSampler DistributedSampler::from_env(std::size_t dataset_size, Options options,
                                                const LaunchOverrides& overrides) {
  const LaunchInfo info = detect_launch(overrides);
  return DistributedSampler(dataset_size, info.world_size, info.rank, options);
}

ShardShuffle ShardShuffle::from_env(std::vector<std::uint64_t> shard_sizes, Options options,
                                    const LaunchOverrides& overrides) {
  const LaunchInfo info = detect_launch(overrides);
  return ShardShuffle(std::move(shard_sizes), info.world_size, info.rank, options);
}

ShardShuffle ShardShuffle::from_env(std::vector<std::uint64_t> shard_sizes, Options options) {
  return from_env(std::move(shard_sizes), options, LaunchOverrides{});
}

ShardShuffle ShardShuffle::from_env(const ShardedDataset& dataset, Options options) {
  const LaunchInfo info = detect_launch();
  return ShardShuffle(dataset, info.world_size, info.rank, options);
}

}  // namespace stoker

namespace stoker::detail {

LaunchInfo detect_launch_quietly() noexcept {
  try {
    return detect_launch();
  } catch (...) {
    return LaunchInfo{};
  }
}

}  // namespace stoker::detail
