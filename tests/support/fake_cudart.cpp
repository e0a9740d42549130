// A stand-in for libcudart, for testing stoker's run-time CUDA path on machines without a GPU.
// It exports the runtime functions stoker resolves with dlsym, backs "pinned" allocations with
// plain page-aligned memory, and counts every call. The environment steers it:
//   FAKE_CUDART_DEVICES=n      what cudaGetDeviceCount reports (default 1)
//   FAKE_CUDART_FAIL_ALLOC=1   cudaHostAlloc fails with cudaErrorMemoryAllocation (2)
#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace {
std::atomic<long> g_counts[6];  // alloc, free, register, unregister, device_count, memcpy
enum { kAlloc, kFree, kRegister, kUnregister, kDeviceCount, kMemcpy };
}  // namespace

extern "C" {

__attribute__((visibility("default"))) long fake_cudart_count(int which) {
  return which >= 0 && which < 6 ? g_counts[which].load() : -1;
}

// Zeroes the counters, so a test that loads the library already loaded by an earlier test in
// the same process counts only its own calls.
__attribute__((visibility("default"))) void fake_cudart_reset_counts() {
  for (std::atomic<long>& count : g_counts) count = 0;
}

__attribute__((visibility("default"))) int cudaGetDeviceCount(int* count) {
  ++g_counts[kDeviceCount];
  const char* n = std::getenv("FAKE_CUDART_DEVICES");
  *count = n != nullptr ? std::atoi(n) : 1;
  return *count > 0 ? 0 : 100;  // cudaErrorNoDevice
}

__attribute__((visibility("default"))) int cudaHostAlloc(void** ptr, std::size_t bytes,
                                                         unsigned /*flags*/) {
  const char* fail = std::getenv("FAKE_CUDART_FAIL_ALLOC");
  if (fail != nullptr && std::strcmp(fail, "1") == 0) return 2;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 2;
  ++g_counts[kAlloc];
  *ptr = p;
  return 0;
}

__attribute__((visibility("default"))) int cudaFreeHost(void* /*ptr*/) {
  ++g_counts[kFree];
  return 0;  // the fake leaks its mappings on purpose: tests are short-lived processes
}

__attribute__((visibility("default"))) int cudaHostRegister(void* /*ptr*/, std::size_t /*bytes*/,
                                                            unsigned /*flags*/) {
  ++g_counts[kRegister];
  return 0;
}

__attribute__((visibility("default"))) int cudaHostUnregister(void* /*ptr*/) {
  ++g_counts[kUnregister];
  return 0;
}

__attribute__((visibility("default"))) const char* cudaGetErrorString(int error) {
  switch (error) {
    case 2:
      return "out of memory (fake)";
    case 100:
      return "no CUDA-capable device is detected (fake)";
    default:
      return "unknown error (fake)";
  }
}

__attribute__((visibility("default"))) int cudaMalloc(void** ptr, std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 2;
  *ptr = p;
  return 0;
}

__attribute__((visibility("default"))) int cudaFree(void* /*ptr*/) { return 0; }

__attribute__((visibility("default"))) int cudaDeviceSynchronize() { return 0; }

__attribute__((visibility("default"))) int cudaMemcpy(void* dst, const void* src, std::size_t bytes,
                                                      int /*kind*/) {
  ++g_counts[kMemcpy];
  std::memcpy(dst, src, bytes);
  return 0;
}

}  // extern "C"
