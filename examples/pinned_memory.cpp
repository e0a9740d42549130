// Page-locked batches for fast copies to a GPU. pin_memory = true makes every batch pinned:
// by locking the ring's slots in place (pin_mode kRegister, the default: no copy) or by copying
// each batch into a pinned staging block (kCopy: one copy, and the ring slot is free at once).
// With a CUDA runtime (found at run time) the memory comes from cudaHostAlloc/cudaHostRegister,
// without one from mlock. This example runs either way; on a GPU machine, hand
// batch["image"].raw_data() to cudaMemcpyAsync.
#include <cstdio>
#include <cstring>
#include <memory>

#include <fmt/format.h>
#include <stoker/stoker.hpp>

#include "cli.hpp"

namespace {

struct Images {
  std::size_t size() const { return 512; }
  stoker::Sample get(std::size_t i) {
    stoker::Tensor x = stoker::Tensor::empty(stoker::DType::kUInt8, {3, 64, 64});
    std::memset(x.raw_data(), static_cast<int>(i % 251), x.nbytes());
    stoker::Sample s;
    s.set("image", std::move(x));
    return s;
  }
};

}  // namespace

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: pinned_memory\n  page-locked batches: pin_memory with "
                   "PinMode::kRegister and kCopy.\n  It takes no arguments.");
  cli.done();
  // One allocator for the process, with an explicit budget (the default is half of MemAvailable,
  // or RLIMIT_MEMLOCK for mlock without CAP_IPC_LOCK).
  auto pinned =
      std::make_shared<stoker::PinnedAllocator>(stoker::PinnedOptions{std::size_t{64} << 20, true});
  fmt::print("pinned memory backend: {} ({})\n", stoker::to_string(pinned->backend()),
             pinned->backend_reason());

  for (const stoker::PinMode mode : {stoker::PinMode::kRegister, stoker::PinMode::kCopy}) {
    stoker::LoaderOptions opt;
    opt.batch_size = 32;
    opt.num_workers = 2;
    opt.pin_memory = true;
    opt.pin_mode = mode;
    opt.pinned_allocator = pinned;
    stoker::DataLoader loader(Images{}, opt);
    std::size_t batches = 0;
    std::size_t pinned_batches = 0;
    for (const stoker::Batch& batch : loader) {
      ++batches;
      if (batch.is_pinned()) ++pinned_batches;
    }
    const stoker::PinnedStats s = pinned->stats();
    fmt::print(
        "{}: {} of {} batches pinned; allocator: {} in use, {} cached, {} ranges "
        "registered, {} blocks reused\n",
        mode == stoker::PinMode::kRegister ? "register" : "copy", pinned_batches, batches,
        s.in_use_bytes, s.cached_bytes, s.registrations, s.cache_hits);
    if (pinned_batches != batches) return 1;
  }

  // The allocator on its own: a staging block, reused when freed.
  {
    stoker::PinnedBlock block = pinned->allocate(1 << 20);
    std::memset(block.data(), 0, block.size());
  }
  stoker::PinnedBlock again = pinned->allocate(1 << 20);
  fmt::print("a freed block is reused: {} cache hits\n", pinned->stats().cache_hits);
  return 0;
}
