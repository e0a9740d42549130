// The GPU's utilisation and memory from the NVIDIA management library, found at run time:
// libnvidia-ml.so.1 is dlopen()ed on first use, never linked, so stoker builds and runs on
// machines without a GPU or driver. The environment variable STOKER_NVML names another file
// to load instead (the tests point it at a fake library).
#pragma once

#include <optional>

#include "stoker/stats.hpp"

namespace stoker::detail {

// Main process (never in a worker: NVML is not fork-safe). Thread-safe. The first call loads
// the library and runs nvmlInit (a few milliseconds); later calls ask the driver for two
// figures, at most every 200 ms per device (in between they return the last answer). nullopt
// when the library, its symbols or the device are missing, or NVML fails; after the library
// failed to load or initialise, every later call returns nullopt at once. Never throws.
std::optional<GpuStats> query_gpu(unsigned device = 0);

// Shuts NVML down and unloads the library, so the next query_gpu() loads it again (and reads
// STOKER_NVML again). For tests; not to be called while another thread queries.
void reset_gpu_query();

}  // namespace stoker::detail
