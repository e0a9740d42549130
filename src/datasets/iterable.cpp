#include <stdexcept>

#include <fmt/format.h>

#include "stoker/dataset.hpp"
#include "stoker/worker_info.hpp"

namespace stoker {

IterableShard iterable_shard(std::size_t rank, std::size_t world_size) {
  if (world_size == 0 || rank >= world_size) {
    throw std::invalid_argument(
        fmt::format("iterable_shard: rank {} is not below world_size {}; ranks count from 0", rank,
                    world_size));
  }
  const WorkerInfo* info = worker_info();
  const std::size_t workers = info == nullptr ? 1 : info->num_workers;
  const std::size_t worker = info == nullptr ? 0 : info->id;
  return IterableShard{rank * workers + worker, world_size * workers};
}

}  // namespace stoker
