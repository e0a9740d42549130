// query_gpu(): NVML found at run time, through STOKER_NVML pointed at a fake libnvidia-ml with
// fixed figures; a missing library, a failing nvmlInit and a missing device give nullopt.
#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include <catch2/catch.hpp>

#include "os/nvml.hpp"

using stoker::detail::query_gpu;
using stoker::detail::reset_gpu_query;

namespace {

// Points STOKER_NVML at `path` for one test, and forgets the loaded library before and after.
struct NvmlAt {
  explicit NvmlAt(const char* path) {
    ::setenv("STOKER_NVML", path, 1);
    reset_gpu_query();
  }
  ~NvmlAt() {
    reset_gpu_query();
    ::unsetenv("STOKER_NVML");
    ::unsetenv("FAKE_NVML_INIT_FAILS");
  }
};

}  // namespace

TEST_CASE("query_gpu: the fake library's figures", "[nvml]") {
  NvmlAt fake(STOKER_FAKE_NVML);
  const auto gpu = query_gpu(0);
  REQUIRE(gpu.has_value());
  CHECK(gpu->device == 0);
  CHECK(gpu->utilization == Approx(0.45));
  CHECK(gpu->memory_total == (80ULL << 30));
  CHECK(gpu->memory_used == (20ULL << 30));
  const auto again = query_gpu(0);  // loaded once, queried again
  REQUIRE(again.has_value());
  CHECK(again->utilization == Approx(0.45));
}

TEST_CASE("query_gpu: asks the driver at most every 200 ms", "[nvml]") {
  NvmlAt fake(STOKER_FAKE_NVML);
  REQUIRE(query_gpu(0).has_value());
  // The library query_gpu() loaded, already mapped: its query counter.
  void* lib = dlopen(STOKER_FAKE_NVML, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(lib != nullptr);
  const auto queries = reinterpret_cast<int (*)()>(dlsym(lib, "fake_nvml_queries"));
  REQUIRE(queries != nullptr);
  const int before = queries();
  CHECK(query_gpu(0).has_value());
  CHECK(queries() == before);  // within 200 ms of the first: the cached answer
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  CHECK(query_gpu(0)->utilization == Approx(0.45));
  CHECK(queries() == before + 1);
  dlclose(lib);
}

TEST_CASE("query_gpu: a device past the count is nullopt", "[nvml]") {
  NvmlAt fake(STOKER_FAKE_NVML);
  CHECK_FALSE(query_gpu(1).has_value());
  CHECK(query_gpu(0).has_value());
}

TEST_CASE("query_gpu: a missing library is nullopt", "[nvml]") {
  NvmlAt missing("/nonexistent/libnvidia-ml.so.1");
  CHECK_FALSE(query_gpu(0).has_value());
  CHECK_FALSE(query_gpu(0).has_value());
}

TEST_CASE("query_gpu: a library without NVML's symbols is nullopt", "[nvml]") {
  NvmlAt wrong("libc.so.6");
  CHECK_FALSE(query_gpu(0).has_value());
}

TEST_CASE("query_gpu: nvmlInit failing is nullopt, and reset tries again", "[nvml]") {
  NvmlAt fake(STOKER_FAKE_NVML);
  ::setenv("FAKE_NVML_INIT_FAILS", "1", 1);
  reset_gpu_query();
  CHECK_FALSE(query_gpu(0).has_value());
  ::unsetenv("FAKE_NVML_INIT_FAILS");
  CHECK_FALSE(query_gpu(0).has_value());  // the failure is remembered until a reset
  reset_gpu_query();
  CHECK(query_gpu(0).has_value());
}
