// A stand-in for libnvidia-ml.so.1 with fixed figures, loaded through STOKER_NVML by the NVML
// tests: one device, 45% busy, 20 GiB of 80 GiB used. FAKE_NVML_INIT_FAILS=1 in the
// environment makes nvmlInit_v2 fail (NVML_ERROR_DRIVER_NOT_LOADED). fake_nvml_queries()
// counts the utilisation queries, for the test of query_gpu()'s cache.
#include <cstdlib>

namespace {
struct FakeDevice {
  int unused;
};
FakeDevice g_device{0};
int g_queries = 0;
}  // namespace

extern "C" {

struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

int nvmlInit_v2() {
  const char* fail = std::getenv("FAKE_NVML_INIT_FAILS");
  return fail != nullptr && fail[0] == '1' ? 9 : 0;
}
int nvmlShutdown() { return 0; }
int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = 1;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index != 0) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *device = &g_device;
  return 0;
}
int nvmlDeviceGetUtilizationRates(void* device, nvmlUtilization_t* rates) {
  if (device != &g_device) return 2;
  ++g_queries;
  rates->gpu = 45;
  rates->memory = 30;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* device, nvmlMemory_t* memory) {
  if (device != &g_device) return 2;
  memory->total = 80ULL << 30;
  memory->used = 20ULL << 30;
  memory->free = memory->total - memory->used;
  return 0;
}

int fake_nvml_queries() { return g_queries; }

}  // extern "C"
