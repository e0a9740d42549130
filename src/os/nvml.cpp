#include "os/nvml.hpp"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>

namespace stoker::detail {

namespace {

// The few NVML types used, declared here so no NVIDIA header is needed: the ABI of nvml.h.
using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;     // percent of the last sample period a kernel ran
  unsigned int memory;  // percent of it device memory was read or written
};
struct nvmlMemory_t {
  unsigned long long total;  // bytes
  unsigned long long free;
  unsigned long long used;
};

// NVML's utilisation is itself an average over 1/6 s to 1 s, so a figure younger than this is
// returned again rather than asked for: stats() may be called every batch.
constexpr auto kRefresh = std::chrono::milliseconds(200);

struct Cached {
  std::chrono::steady_clock::time_point when;
  std::optional<GpuStats> stats;
};

struct Nvml {
  void* handle = nullptr;
  std::map<unsigned, Cached> cache;  // by device index
  bool tried = false;                // the load (and nvmlInit) ran, successfully or not
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*device_count)(unsigned int*) = nullptr;
  nvmlReturn_t (*device_handle)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
};

// Guards every field of state() and each call into NVML (NVML is thread-safe, but its loading
// and unloading here are not).
std::mutex& nvml_mutex() {
  static std::mutex m;
  return m;
}

Nvml& state() {
  static Nvml n;
  return n;
}

template <class F>
bool resolve(void* handle, const char* name, F& fn) {
  void* symbol = dlsym(handle, name);
  // POSIX guarantees object and function pointers convert through dlsym's void*.
  fn = reinterpret_cast<F>(symbol);
  return symbol != nullptr;
}

void unload(Nvml& n) {
  if (n.handle != nullptr) dlclose(n.handle);
  n = Nvml{};
  n.tried = true;
}

// Called with nvml_mutex() held, once until reset_gpu_query().
void load(Nvml& n) {
  n.tried = true;
  const char* path = std::getenv("STOKER_NVML");
  n.handle =
      dlopen(path != nullptr && *path != '\0' ? path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (n.handle == nullptr) return;
  const bool all = resolve(n.handle, "nvmlInit_v2", n.init) &&
                   resolve(n.handle, "nvmlShutdown", n.shutdown) &&
                   resolve(n.handle, "nvmlDeviceGetCount_v2", n.device_count) &&
                   resolve(n.handle, "nvmlDeviceGetHandleByIndex_v2", n.device_handle) &&
                   resolve(n.handle, "nvmlDeviceGetUtilizationRates", n.utilization) &&
                   resolve(n.handle, "nvmlDeviceGetMemoryInfo", n.memory);
  if (!all || n.init() != kNvmlSuccess) unload(n);
}

// One device's figures from the driver; called with nvml_mutex() held and the library loaded.
std::optional<GpuStats> ask(Nvml& n, unsigned device) {
  unsigned int count = 0;
  if (n.device_count(&count) != kNvmlSuccess || device >= count) return std::nullopt;
  nvmlDevice_t handle = nullptr;
  if (n.device_handle(device, &handle) != kNvmlSuccess) return std::nullopt;
  nvmlUtilization_t utilization{};
  nvmlMemory_t memory{};
  if (n.utilization(handle, &utilization) != kNvmlSuccess) return std::nullopt;
  if (n.memory(handle, &memory) != kNvmlSuccess) return std::nullopt;
  GpuStats g;
  g.device = device;
  g.utilization = static_cast<double>(utilization.gpu) / 100.0;
  g.memory_used = memory.used;
  g.memory_total = memory.total;
  return g;
}

}  // namespace

std::optional<GpuStats> query_gpu(unsigned device) {
  const std::lock_guard<std::mutex> lock(nvml_mutex());
  Nvml& n = state();
  if (!n.tried) load(n);
  if (n.handle == nullptr) return std::nullopt;
  const auto now = std::chrono::steady_clock::now();
  const auto hit = n.cache.find(device);
  if (hit != n.cache.end() && now - hit->second.when < kRefresh) return hit->second.stats;
  std::optional<GpuStats> g = ask(n, device);
  n.cache[device] = Cached{now, g};
  return g;
}

void reset_gpu_query() {
  const std::lock_guard<std::mutex> lock(nvml_mutex());
  Nvml& n = state();
  if (n.handle != nullptr) n.shutdown();
  unload(n);
  n.tried = false;
}

}  // namespace stoker::detail
