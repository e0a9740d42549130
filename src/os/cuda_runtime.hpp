// The CUDA runtime, found at run time. stoker is never linked against CUDA: the first call
// dlopen()s libcudart and resolves the few functions pinned memory needs. Without a runtime, or
// without a device the runtime can see, there is none, and callers fall back to mlock.
#pragma once

#include <cstddef>
#include <string>

namespace stoker::detail {

struct CudaRuntime {
  // cudaError_t is an int-sized enum; 0 is cudaSuccess.
  int (*get_device_count)(int* count) = nullptr;
  int (*host_alloc)(void** ptr, std::size_t bytes, unsigned flags) = nullptr;
  int (*free_host)(void* ptr) = nullptr;
  int (*host_register)(void* ptr, std::size_t bytes, unsigned flags) = nullptr;
  int (*host_unregister)(void* ptr) = nullptr;
  const char* (*get_error_string)(int error) = nullptr;
  // Optional (for bench/pinned_h2d): device memory and copies.
  int (*malloc_device)(void** ptr, std::size_t bytes) = nullptr;
  int (*free_device)(void* ptr) = nullptr;
  int (*memcpy)(void* dst, const void* src, std::size_t bytes, int kind) = nullptr;
  int (*device_synchronize)() = nullptr;
  std::string path;  // the library that was loaded

  // "cudaErrorX (code n)", or the runtime's text for it.
  std::string error(int code) const;
};

inline constexpr unsigned kCudaHostAllocPortable = 1;
inline constexpr unsigned kCudaHostRegisterPortable = 1;
inline constexpr int kCudaMemcpyHostToDevice = 1;

// The runtime when it sees a device, and in words what was found or why nothing was.
struct CudaLookup {
  const CudaRuntime* runtime = nullptr;  // valid for the life of the process
  std::string status;
};

// Reads STOKER_CUDART at each call: a library path, "none" (CUDA off), or unset for
// libcudart.so, libcudart.so.13/.12/.11.0, then /usr/local/cuda/lib64/libcudart.so. Each
// value's library is loaded once per process and never unloaded; the device count is asked at
// each call. Thread-safe.
CudaLookup find_cuda_runtime();

}  // namespace stoker::detail
