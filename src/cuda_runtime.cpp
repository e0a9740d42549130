#include "cuda_runtime.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace stoker::detail {
namespace {

struct Found {
  CudaRuntime runtime;
  bool usable = false;
  std::string status;
};

template <typename F>
bool resolve(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(::dlsym(lib, name));
  return out != nullptr;
}

Found find_runtime() {
  Found found;
  const char* env = std::getenv("STOKER_CUDART");
  if (env != nullptr && std::string(env) == "none") {
    found.status = "CUDA disabled (STOKER_CUDART=none)";
    return found;
  }
  std::vector<std::string> candidates;
  if (env != nullptr && *env != '\0') {
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
    found.status = fmt::format("no CUDA runtime (libcudart) found: {}", last_error);
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
    found.status = fmt::format("{} lacks the CUDA runtime functions stoker needs", path);
    ::dlclose(lib);
    return found;
  }
  resolve(lib, "cudaMalloc", rt.malloc_device);
  resolve(lib, "cudaFree", rt.free_device);
  resolve(lib, "cudaMemcpy", rt.memcpy);
  resolve(lib, "cudaDeviceSynchronize", rt.device_synchronize);
  int count = 0;
  const int rc = rt.get_device_count(&count);
  if (rc != 0 || count <= 0) {
    // Kept loaded: the runtime may have started threads, and unloading it is not safe then.
    found.status = fmt::format("{} found, but it sees no CUDA device ({})", path,
                               rc != 0 ? rt.error(rc) : std::string("0 devices"));
    return found;
  }
  rt.devices = count;
  found.usable = true;
  found.status =
      fmt::format("CUDA runtime {} with {} device{}", path, count, count == 1 ? "" : "s");
  return found;
}

const Found& found() {
  static const Found f = find_runtime();
  return f;
}

}  // namespace

std::string CudaRuntime::error(int code) const {
  const char* text = get_error_string != nullptr ? get_error_string(code) : nullptr;
  return text != nullptr ? fmt::format("{} (CUDA error {})", text, code)
                         : fmt::format("CUDA error {}", code);
}

const CudaRuntime* cuda_runtime() noexcept {
  try {
    const Found& f = found();
    return f.usable ? &f.runtime : nullptr;
  } catch (...) {
    return nullptr;
  }
}

std::string cuda_runtime_status() { return found().status; }

}  // namespace stoker::detail
