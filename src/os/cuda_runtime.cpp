#include "os/cuda_runtime.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace stoker::detail {
namespace {

// One STOKER_CUDART value's library: loaded once and kept for the life of the process (the
// runtime may have started threads, and unloading it is not safe then).
struct Library {
  CudaRuntime runtime;  // the resolved functions, when `failure` is empty
  std::string failure;  // why there is no usable library
};

template <typename F>
bool resolve(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(::dlsym(lib, name));
  return out != nullptr;
}

Library load_library(const std::string& env) {
  Library found;
  std::vector<std::string> candidates;
  if (!env.empty()) {
    candidates.emplace_back(env);
  } else {
    candidates = {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                  "/usr/local/cuda/lib64/libcudart.so"};
  }
  void* lib = nullptr;
  std::string path;
  std::string last_error;
  for (const std::string& candidate : candidates) {
    lib = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      path = candidate;
      break;
    }
    const char* e = ::dlerror();
    last_error = e != nullptr ? e : "unknown error";
  }
  if (lib == nullptr) {
    found.failure = fmt::format("no CUDA runtime (libcudart) found: {}", last_error);
    return found;
  }
  CudaRuntime& rt = found.runtime;
  rt.path = path;
  const bool complete = resolve(lib, "cudaGetDeviceCount", rt.get_device_count) &&
                        resolve(lib, "cudaHostAlloc", rt.host_alloc) &&
                        resolve(lib, "cudaFreeHost", rt.free_host) &&
                        resolve(lib, "cudaHostRegister", rt.host_register) &&
                        resolve(lib, "cudaHostUnregister", rt.host_unregister) &&
                        resolve(lib, "cudaGetErrorString", rt.get_error_string);
  if (!complete) {
    found.failure = fmt::format("{} lacks the CUDA runtime functions stoker needs", path);
    ::dlclose(lib);
    return found;
  }
  resolve(lib, "cudaMalloc", rt.malloc_device);
  resolve(lib, "cudaFree", rt.free_device);
  resolve(lib, "cudaMemcpy", rt.memcpy);
  resolve(lib, "cudaDeviceSynchronize", rt.device_synchronize);
  return found;
}

}  // namespace

CudaLookup find_cuda_runtime() {
  CudaLookup out;
  const char* env = std::getenv("STOKER_CUDART");
  const std::string key = env != nullptr ? env : "";
  if (key == "none") {
    out.status = "CUDA disabled (STOKER_CUDART=none)";
    return out;
  }
  // Never destroyed: allocators in static objects may still hold a runtime at exit.
  static std::mutex mutex;
  static auto* libraries = new std::map<std::string, std::unique_ptr<Library>>();
  const std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Library>& library = (*libraries)[key];
  if (!library) library = std::make_unique<Library>(load_library(key));
  if (!library->failure.empty()) {
    out.status = library->failure;
    return out;
  }
  const CudaRuntime& rt = library->runtime;
  int count = 0;
  const int rc = rt.get_device_count(&count);
  if (rc != 0 || count <= 0) {
    out.status = fmt::format("{} found, but it sees no CUDA device ({})", rt.path,
                             rc != 0 ? rt.error(rc) : std::string("0 devices"));
    return out;
  }
  out.runtime = &rt;
  out.status =
      fmt::format("CUDA runtime {} with {} device{}", rt.path, count, count == 1 ? "" : "s");
  return out;
}

std::string CudaRuntime::error(int code) const {
  const char* text = get_error_string != nullptr ? get_error_string(code) : nullptr;
  return text != nullptr ? fmt::format("{} (CUDA error {})", text, code)
                         : fmt::format("CUDA error {}", code);
}

}  // namespace stoker::detail
