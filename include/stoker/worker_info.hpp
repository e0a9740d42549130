// worker_info(): who is running this code. In a DataLoader worker process it describes the
// worker (what a dataset uses to shard itself or open per-worker resources); in the main
// process, including while num_workers == 0 loads batches in-process, it returns nullptr.
#pragma once

#include <sys/types.h>
#include <cstddef>
#include <cstdint>

namespace stoker {

struct WorkerInfo {
  std::size_t id = 0;  // 0 .. num_workers - 1
  std::size_t num_workers = 0;
  std::uint64_t seed = 0;  // LoaderOptions::seed mixed with the worker id
  pid_t pid = 0;
};

// Either process; never blocks or throws. The pointer stays valid for the worker's lifetime.
const WorkerInfo* worker_info() noexcept;

}  // namespace stoker
