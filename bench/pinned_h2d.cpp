// pinned_h2d: host-to-device copy bandwidth of an image batch (64 x 3 x 224 x 224 uint8, 9.6 MB)
// from four kinds of host memory: a pageable heap buffer, a pinned staging block
// (PinnedAllocator), a ring slot as the loader delivers it without pin_memory (pageable shared
// memory), and a ring slot locked by pin_memory (register mode). Uses the CUDA runtime found at
// run time, like the library; on a machine without a GPU it says so and exits 0.
//
//   bench/pinned_h2d.sh            (builds it, then runs it)
//   pinned_h2d [--copies N]        one JSON line per kind of memory
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../tools/bench_workloads.hpp"
#include "os/cuda_runtime.hpp"
#include "stoker/stoker.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  double median_gb_s = 0;
  double best_gb_s = 0;
};

// Median and best bandwidth of `copies` synchronous copies of `bytes` from `src` to `dst`.
Result measure(const stoker::detail::CudaRuntime& rt, void* dst, const void* src, std::size_t bytes,
               int copies) {
  std::vector<double> rates;
  for (int i = 0; i < copies + 1; ++i) {
    const Clock::time_point t0 = Clock::now();
    const int rc = rt.memcpy(dst, src, bytes, stoker::detail::kCudaMemcpyHostToDevice);
    if (rt.device_synchronize != nullptr) rt.device_synchronize();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (rc != 0) {
      std::fprintf(stderr, "pinned_h2d: cudaMemcpy failed: %s\n", rt.error(rc).c_str());
      std::exit(1);
    }
    if (i > 0) rates.push_back(static_cast<double>(bytes) / s / 1e9);  // the first warms up
  }
  std::sort(rates.begin(), rates.end());
  return {rates[rates.size() / 2], rates.back()};
}

void print(const char* memory, std::size_t bytes, const Result& r, int copies,
           const std::string& runtime) {
  std::printf(
      "{\"bench\": \"pinned_h2d\", \"memory\": \"%s\", \"bytes\": %zu, \"copies\": %d, "
      "\"median_gb_per_s\": %.2f, \"best_gb_per_s\": %.2f, \"runtime\": \"%s\", "
      "\"command\": \"bench/pinned_h2d.sh\"}\n",
      memory, bytes, copies, r.median_gb_s, r.best_gb_s, runtime.c_str());
}

// The loader's first batch of the image workload, with or without pin_memory, copied `copies`
// times while the batch is held.
Result ring_slot(const stoker::detail::CudaRuntime& rt, void* dst, bool pin, int copies,
                 std::size_t& bytes, bool& pinned) {
  stoker::LoaderOptions opt;
  opt.batch_size = 64;
  opt.num_workers = 1;
  opt.pin_memory = pin;
  stoker::DataLoader loader(stoker::bench::ImageDataset{64 * 4}, opt);
  for (const stoker::Batch& batch : loader) {
    const stoker::Tensor& data = batch["data"];
    bytes = data.nbytes();
    pinned = batch.is_pinned();
    return measure(rt, dst, data.raw_data(), bytes, copies);
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  int copies = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--copies") == 0 && i + 1 < argc) {
      copies = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: pinned_h2d [--copies N]\n");
      return 2;
    }
  }
  const stoker::detail::CudaLookup lookup = stoker::detail::find_cuda_runtime();
  const stoker::detail::CudaRuntime* rt = lookup.runtime;
  if (rt == nullptr) {
    std::printf("pinned_h2d: no GPU here (%s); nothing to measure\n", lookup.status.c_str());
    return 0;
  }
  if (rt->malloc_device == nullptr || rt->memcpy == nullptr) {
    std::printf("pinned_h2d: %s lacks cudaMalloc/cudaMemcpy; nothing to measure\n",
                rt->path.c_str());
    return 0;
  }
  const std::size_t bytes = std::size_t{64} * 3 * 224 * 224;
  void* device = nullptr;
  if (const int rc = rt->malloc_device(&device, bytes); rc != 0) {
    std::fprintf(stderr, "pinned_h2d: cudaMalloc of %zu bytes failed: %s\n", bytes,
                 rt->error(rc).c_str());
    return 1;
  }
  const std::string& runtime = lookup.status;

  std::vector<std::byte> pageable(bytes, std::byte{1});
  print("pageable heap buffer", bytes, measure(*rt, device, pageable.data(), bytes, copies), copies,
        runtime);

  stoker::PinnedAllocator pinned;
  stoker::PinnedBlock block = pinned.allocate(bytes);
  std::memset(block.data(), 2, bytes);
  print("pinned staging block", bytes, measure(*rt, device, block.data(), bytes, copies), copies,
        runtime);

  std::size_t slot_bytes = 0;
  bool is_pinned = true;
  const Result plain = ring_slot(*rt, device, false, copies, slot_bytes, is_pinned);
  print("ring slot (pin_memory = false)", slot_bytes, plain, copies, runtime);
  const Result registered = ring_slot(*rt, device, true, copies, slot_bytes, is_pinned);
  if (!is_pinned) {
    std::fprintf(stderr, "pinned_h2d: a pin_memory batch was not pinned\n");
    return 1;
  }
  print("ring slot (pin_memory = true, registered)", slot_bytes, registered, copies, runtime);
  if (rt->free_device != nullptr) rt->free_device(device);
  return 0;
}
