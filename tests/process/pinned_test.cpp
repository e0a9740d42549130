// PinnedAllocator (size classes, reuse, budget, errors; the mlock path and the CUDA path through
// a fake libcudart) and LoaderOptions::pin_memory in both modes. Each allocator reads
// STOKER_CUDART when it is made, so the cases pass in any order, in one process or in several.
#include <dlfcn.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "support/captured_log.hpp"
#include "support/datasets.hpp"

using namespace stoker;
using stoker::test::IndexDataset;

namespace {

// Locked memory of this process (VmLck), in bytes.
std::size_t locked_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  REQUIRE(f != nullptr);
  char line[256];
  std::size_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "VmLck:", 6) == 0) kb = std::strtoull(line + 6, nullptr, 10);
  }
  std::fclose(f);
  return kb * 1024;
}

void use_mlock_only() { ::setenv("STOKER_CUDART", "none", 1); }

// Whether this process may lock `bytes` more. Raises RLIMIT_MEMLOCK's soft limit to the hard
// one first. Containers often drop CAP_IPC_LOCK and keep a small limit (Docker: 8 MiB, older
// versions 64 KiB): a test that needs real locking then says so and stops.
bool may_lock(std::size_t bytes) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_MEMLOCK, &lim) != 0) return false;
  if (lim.rlim_cur != lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_MEMLOCK, &lim);
  }
  if (lim.rlim_cur == RLIM_INFINITY) return true;
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) == 0 && (data[0].effective >> CAP_IPC_LOCK) & 1U) {
    return true;
  }
  if (lim.rlim_cur >= locked_bytes() + bytes) return true;
  WARN("RLIMIT_MEMLOCK is " << lim.rlim_cur << " bytes without CAP_IPC_LOCK: this test needs "
                            << bytes << " bytes of locked memory and checks nothing here");
  return false;
}

// Points STOKER_CUDART at the fake runtime, with its call counters at zero when an earlier test
// in this process already loaded it.
void use_fake_cuda(const char* devices = "1") {
  ::setenv("STOKER_CUDART", STOKER_FAKE_CUDART, 1);
  ::setenv("FAKE_CUDART_DEVICES", devices, 1);
  ::unsetenv("FAKE_CUDART_FAIL_ALLOC");
  if (void* lib = ::dlopen(STOKER_FAKE_CUDART, RTLD_NOW | RTLD_NOLOAD)) {
    auto reset = reinterpret_cast<void (*)()>(::dlsym(lib, "fake_cudart_reset_counts"));
    REQUIRE(reset != nullptr);
    reset();
    ::dlclose(lib);
  }
}

// The fake runtime's call counters (the same library stoker loaded: dlopen returns its handle).
long fake_count(int which) {
  void* lib = ::dlopen(STOKER_FAKE_CUDART, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(lib != nullptr);
  auto count = reinterpret_cast<long (*)(int)>(::dlsym(lib, "fake_cudart_count"));
  REQUIRE(count != nullptr);
  const long n = count(which);
  ::dlclose(lib);
  return n;
}
enum { kAlloc, kFree, kRegister, kUnregister, kDeviceCount };

// Runs `body` in a child process; true when it returned true.
template <class F>
bool in_child(F body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    bool ok = false;
    try {
      ok = body();
    } catch (...) {
    }
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Drops CAP_IPC_LOCK from this process, so RLIMIT_MEMLOCK applies even to root.
bool drop_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  data[0].effective &= ~(1U << CAP_IPC_LOCK);
  data[0].permitted &= ~(1U << CAP_IPC_LOCK);
  return ::syscall(SYS_capset, &header, data) == 0;
}

}  // namespace

TEST_CASE("size classes: whole pages, at most a quarter more than asked, monotonic", "[pinned]") {
  REQUIRE(PinnedAllocator::size_class(1) == 4096);
  REQUIRE(PinnedAllocator::size_class(4096) == 4096);
  REQUIRE(PinnedAllocator::size_class(4097) == 8192);
  std::size_t previous = 0;
  for (std::size_t n = 1; n < (std::size_t{1} << 26); n = n * 3 / 2 + 7) {
    const std::size_t c = PinnedAllocator::size_class(n);
    CAPTURE(n, c);
    REQUIRE(c >= n);
    REQUIRE(c % 4096 == 0);
    REQUIRE(c <= n + n / 4 + 4096);
    REQUIRE(c >= previous);
    REQUIRE(PinnedAllocator::size_class(c) == c);  // a class is its own class
    previous = c;
  }
}

TEST_CASE("the mlock backend locks blocks, caches freed ones and reuses them", "[pinned]") {
  if (!may_lock(std::size_t{4} << 20)) return;
  use_mlock_only();
  PinnedAllocator pinned(PinnedOptions{std::size_t{64} << 20, true});
  REQUIRE(pinned.backend() == PinnedBackend::kMlock);
  REQUIRE_THAT(pinned.backend_reason(), Catch::Contains("STOKER_CUDART=none"));
  const std::size_t before = locked_bytes();
  std::byte* first = nullptr;
  {
    PinnedBlock block = pinned.allocate(100'000);
    REQUIRE(block);
    REQUIRE(block.size() == 100'000);
    REQUIRE(block.capacity() == PinnedAllocator::size_class(100'000));
    std::memset(block.data(), 0x5a, block.size());
    REQUIRE(locked_bytes() >= before + block.capacity());
    first = block.data();
    const PinnedStats s = pinned.stats();
    REQUIRE(s.in_use_bytes == block.capacity());
    REQUIRE(s.cache_misses == 1);
  }
  PinnedStats s = pinned.stats();
  REQUIRE(s.in_use_bytes == 0);
  REQUIRE(s.cached_bytes == PinnedAllocator::size_class(100'000));
  {
    PinnedBlock again = pinned.allocate(99'000);  // the same size class
    REQUIRE(again.data() == first);
    PinnedBlock other = pinned.allocate(1 << 20);  // another class: a new block
    REQUIRE(other.data() != first);
  }
  s = pinned.stats();
  REQUIRE(s.allocations == 3);
  REQUIRE(s.cache_hits == 1);
  REQUIRE(s.cache_misses == 2);
  REQUIRE(s.peak_bytes == PinnedAllocator::size_class(100'000) + (1 << 20));
  pinned.release_cached();
  REQUIRE(pinned.stats().cached_bytes == 0);
  REQUIRE(locked_bytes() == before);
}

TEST_CASE("past the budget, cached blocks are freed first, then PinnedMemoryError", "[pinned]") {
  if (!may_lock(std::size_t{4} << 20)) return;
  use_mlock_only();
  PinnedAllocator pinned(PinnedOptions{std::size_t{1} << 20, true});
  REQUIRE(pinned.budget() == std::size_t{1} << 20);
  PinnedBlock a = pinned.allocate(512 << 10);
  try {
    (void)pinned.allocate(600 << 10);
    FAIL("no error past the budget");
  } catch (const PinnedMemoryError& e) {
    const std::string what = e.what();
    CAPTURE(what);
    REQUIRE_THAT(what, Catch::Contains("would pass the budget of 1.0 MiB"));
    REQUIRE_THAT(what, Catch::Contains("PinnedOptions::budget_bytes"));
    REQUIRE_THAT(what, Catch::Contains("ulimit -l"));
    REQUIRE_THAT(what, Catch::Contains("pin_memory = false"));
    REQUIRE(e.budget() == std::size_t{1} << 20);
    REQUIRE(e.in_use() == 512 << 10);
  }
  a = PinnedBlock();  // cached now
  REQUIRE(pinned.stats().cached_bytes == 512 << 10);
  PinnedBlock b = pinned.allocate(900 << 10);  // fits once the cached block is freed
  REQUIRE(b);
  REQUIRE(pinned.stats().cached_bytes == 0);
  REQUIRE_THROWS_AS(pinned.allocate(0), std::invalid_argument);
}

TEST_CASE("a block outlives its allocator", "[pinned]") {
  if (!may_lock(std::size_t{4} << 20)) return;
  use_mlock_only();
  PinnedBlock block;
  {
    PinnedAllocator pinned(PinnedOptions{std::size_t{8} << 20, true});
    block = pinned.allocate(10'000);
  }
  std::memset(block.data(), 1, block.size());
  REQUIRE(block.data()[9'999] == std::byte{1});
}

TEST_CASE("pin_range locks existing page-aligned memory and unlocks it after", "[pinned]") {
  if (!may_lock(std::size_t{4} << 20)) return;
  use_mlock_only();
  PinnedAllocator pinned(PinnedOptions{std::size_t{8} << 20, true});
  std::vector<std::byte> unaligned(10'000);
  REQUIRE_THROWS_AS(pinned.pin_range(unaligned.data() + 1, 4096), std::invalid_argument);
  void* p = ::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  const std::size_t before = locked_bytes();
  {
    PinnedRange range = pinned.pin_range(p, 1 << 20);
    REQUIRE(locked_bytes() == before + (1 << 20));
    REQUIRE(pinned.stats().in_use_bytes == 1 << 20);
    REQUIRE(pinned.stats().registrations == 1);
    REQUIRE_THROWS_AS(pinned.pin_range(p, 8 << 20), PinnedMemoryError);  // past the budget
  }
  REQUIRE(locked_bytes() == before);
  REQUIRE(pinned.stats().in_use_bytes == 0);
  ::munmap(p, 1 << 20);
}

TEST_CASE("when the system refuses to lock memory, the error names RLIMIT_MEMLOCK", "[pinned]") {
  use_mlock_only();
  const bool ok = in_child([] {
    if (!drop_ipc_lock()) return true;  // cannot drop the capability here: nothing to test
    rlimit lim{64 << 10, 64 << 10};
    if (::setrlimit(RLIMIT_MEMLOCK, &lim) != 0) return false;
    {
      // The default budget follows RLIMIT_MEMLOCK.
      PinnedAllocator pinned;
      if (pinned.budget() != std::size_t{64} << 10) return false;
      try {
        (void)pinned.allocate(1 << 20);
        return false;
      } catch (const PinnedMemoryError& e) {
        const std::string what = e.what();
        if (what.find("RLIMIT_MEMLOCK") == std::string::npos) return false;
        if (what.find("64.0 KiB") == std::string::npos) return false;
      }
    }
    // A budget above the limit: mlock itself fails, and says so.
    PinnedAllocator pinned(PinnedOptions{std::size_t{16} << 20, true});
    try {
      (void)pinned.allocate(1 << 20);
      return false;
    } catch (const PinnedMemoryError& e) {
      const std::string what = e.what();
      return what.find("mlock of 1.0 MiB failed") != std::string::npos &&
             what.find("RLIMIT_MEMLOCK 64.0 KiB") != std::string::npos &&
             what.find("ulimit -l") != std::string::npos;
    }
  });
  REQUIRE(ok);
}

TEST_CASE("with a CUDA runtime, blocks come from cudaHostAlloc and ranges are registered",
          "[pinned]") {
  use_fake_cuda();
  PinnedAllocator pinned(PinnedOptions{std::size_t{64} << 20, true});
  REQUIRE(pinned.backend() == PinnedBackend::kCuda);
  REQUIRE_THAT(pinned.backend_reason(), Catch::Contains("with 1 device"));
  {
    PinnedBlock block = pinned.allocate(1 << 20);
    std::memset(block.data(), 7, block.size());
    REQUIRE(fake_count(kAlloc) == 1);
  }
  REQUIRE(fake_count(kFree) == 0);  // cached
  pinned.release_cached();
  REQUIRE(fake_count(kFree) == 1);
  void* p = ::mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  {
    PinnedRange range = pinned.pin_range(p, 1 << 16);
    REQUIRE(fake_count(kRegister) == 1);
    REQUIRE(fake_count(kUnregister) == 0);
  }
  REQUIRE(fake_count(kUnregister) == 1);
  ::munmap(p, 1 << 16);
}

TEST_CASE("a failing cudaHostAlloc is a PinnedMemoryError with the runtime's message", "[pinned]") {
  use_fake_cuda();
  ::setenv("FAKE_CUDART_FAIL_ALLOC", "1", 1);
  PinnedAllocator pinned(PinnedOptions{std::size_t{64} << 20, true});
  REQUIRE_THROWS_WITH(pinned.allocate(4096), Catch::Contains("cudaHostAlloc of 4.0 KiB failed") &&
                                                 Catch::Contains("out of memory (fake)"));
}

TEST_CASE("a CUDA runtime without a device, or none at all, falls back to mlock", "[pinned]") {
  if (!may_lock(std::size_t{4} << 20)) return;
  use_fake_cuda("0");
  PinnedAllocator pinned(PinnedOptions{std::size_t{8} << 20, true});
  REQUIRE(pinned.backend() == PinnedBackend::kMlock);
  REQUIRE_THAT(pinned.backend_reason(), Catch::Contains("sees no CUDA device"));
  REQUIRE(pinned.allocate(4096));
  REQUIRE(fake_count(kAlloc) == 0);
}

TEST_CASE("a missing CUDA runtime library is reported and mlock is used", "[pinned]") {
  ::setenv("STOKER_CUDART", "/nonexistent/libcudart.so", 1);
  PinnedAllocator pinned(PinnedOptions{std::size_t{8} << 20, true});
  REQUIRE(pinned.backend() == PinnedBackend::kMlock);
  REQUIRE_THAT(pinned.backend_reason(), Catch::Contains("no CUDA runtime (libcudart) found"));
}

#if !defined(__SANITIZE_ADDRESS__)
TEST_CASE("this machine's own libcudart search ends in a backend and a reason", "[pinned]") {
  if (!may_lock(std::size_t{4} << 20)) return;
  ::unsetenv("STOKER_CUDART");
  PinnedAllocator pinned(PinnedOptions{std::size_t{8} << 20, true});
  const std::string reason = pinned.backend_reason();
  CAPTURE(reason);
  if (pinned.backend() == PinnedBackend::kCuda) {
    REQUIRE_THAT(reason, Catch::Contains("device"));
  } else {
    // Without a GPU: either no libcudart, or one that sees no device (no driver).
    REQUIRE((reason.find("no CUDA runtime") != std::string::npos ||
             reason.find("sees no CUDA device") != std::string::npos));
  }
  PinnedBlock block = pinned.allocate(8192);
  std::memset(block.data(), 3, block.size());
}
#endif

TEST_CASE("pin_memory (register) locks the ring's slots: every batch is pinned", "[pinned]") {
  if (!may_lock(std::size_t{4} << 20)) return;
  use_mlock_only();
  auto pinned = std::make_shared<PinnedAllocator>(PinnedOptions{std::size_t{256} << 20, true});
  const std::size_t before = locked_bytes();
  {
    LoaderOptions opt;
    opt.batch_size = 8;
    opt.num_workers = 2;
    opt.pin_memory = true;
    opt.pinned_allocator = pinned;
    DataLoader loader(IndexDataset{100, {}}, opt);
    std::size_t seen = 0;
    for (const Batch& batch : loader) {
      REQUIRE(batch.is_pinned());
      REQUIRE(batch.is_view());
      REQUIRE(!batch.clone().is_pinned());
      for (std::size_t r = 0; r < batch.size(); ++r) {
        REQUIRE(batch["index"].data<std::int64_t>()[r] ==
                static_cast<std::int64_t>(batch.indices()[r]));
      }
      seen += batch.size();
      REQUIRE(locked_bytes() > before);
    }
    REQUIRE(seen == 100);
    const PinnedStats s = pinned->stats();
    REQUIRE(s.registrations >= 1);
    REQUIRE(s.registrations <= 4);  // each slot's committed pages once (they do not grow here)
    REQUIRE(s.in_use_bytes > 0);
  }
  REQUIRE(pinned->stats().in_use_bytes == 0);  // unlocked with the ring
  REQUIRE(locked_bytes() == before);
}

TEST_CASE("pin_memory (register) through the CUDA runtime registers slots", "[pinned]") {
  use_fake_cuda();
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 1;
  opt.pin_memory = true;
  opt.pinned_allocator = std::make_shared<PinnedAllocator>();
  REQUIRE(opt.pinned_allocator->backend() == PinnedBackend::kCuda);
  {
    DataLoader loader(IndexDataset{40, {}}, opt);
    std::size_t seen = 0;
    for (const Batch& batch : loader) {
      REQUIRE(batch.is_pinned());
      seen += batch.size();
    }
    REQUIRE(seen == 40);
    REQUIRE(fake_count(kRegister) >= 1);
  }
  REQUIRE(fake_count(kUnregister) == fake_count(kRegister));
}

TEST_CASE("pin_memory (copy) stages batches in pinned blocks and frees slots early", "[pinned]") {
  if (!may_lock(std::size_t{4} << 20)) return;
  use_mlock_only();
  auto pinned = std::make_shared<PinnedAllocator>(PinnedOptions{std::size_t{64} << 20, true});
  LoaderOptions opt;
  opt.batch_size = 5;
  opt.num_workers = 1;
  opt.prefetch_factor = 2;
  opt.pin_memory = true;
  opt.pin_mode = PinMode::kCopy;
  opt.pinned_allocator = pinned;
  DataLoader loader(IndexDataset{60, {}}, opt);
  // Keeping every batch of the epoch would block a ring of 2 slots; copies hold no slot.
  std::vector<Batch> kept;
  for (const Batch& batch : loader) kept.push_back(batch);
  REQUIRE(kept.size() == 12);
  for (std::size_t k = 0; k < kept.size(); ++k) {
    const Batch& batch = kept[k];
    REQUIRE(batch.is_pinned());
    REQUIRE(batch.index() == k);
    REQUIRE(batch.size() == 5);
    for (std::size_t r = 0; r < 5; ++r) {
      const auto i = static_cast<std::int64_t>(5 * k + r);
      REQUIRE(batch.indices()[r] == static_cast<std::size_t>(i));
      REQUIRE(batch["index"].data<std::int64_t>()[r] == i);
      REQUIRE(batch["data"].data<float>()[4 * r + 3] == static_cast<float>(i + 3));
    }
  }
  REQUIRE(pinned->stats().in_use_bytes == 12 * PinnedAllocator::size_class(1));
  kept.clear();
  // The next epoch reuses the cached staging blocks.
  for (const Batch& batch : loader) REQUIRE(batch.is_pinned());
  const PinnedStats s = pinned->stats();
  REQUIRE(s.cache_hits >= 12);
  REQUIRE(s.cache_misses == 12);
}

TEST_CASE("pin_memory past the pinned budget fails before forking, naming the fixes", "[pinned]") {
  use_mlock_only();
  LoaderOptions opt;
  opt.batch_size = 64;
  opt.num_workers = 2;
  opt.pin_memory = true;
  opt.sample_bytes = 150'000;
  opt.check_memory = false;
  opt.pinned_allocator =
      std::make_shared<PinnedAllocator>(PinnedOptions{std::size_t{1} << 20, true});
  DataLoader loader(IndexDataset{1000, {}}, opt);
  try {
    (void)loader.begin();
    FAIL("no error");
  } catch (const PinnedMemoryError& e) {
    const std::string what = e.what();
    CAPTURE(what);
    REQUIRE_THAT(what, Catch::Contains("pin_memory would lock about"));
    REQUIRE_THAT(what, Catch::Contains("the ring: 4 slots"));
    REQUIRE_THAT(what, Catch::Contains("pin_mode = kCopy"));
    REQUIRE_THAT(what, Catch::Contains("1.0 MiB budget"));
  }
  REQUIRE(loader.worker_pids().empty());
}

TEST_CASE("a batch that cannot be pinned mid-epoch is delivered unpinned, with a warning",
          "[pinned]") {
  use_mlock_only();
  if (!may_lock(std::size_t{1} << 20)) return;
  std::string out;
  LoaderOptions opt;
  opt.batch_size = 5;
  opt.num_workers = 1;
  opt.pin_memory = true;
  opt.pin_mode = PinMode::kCopy;
  // Two staging blocks pass the check before forking; keeping every batch needs more.
  opt.pinned_allocator = std::make_shared<PinnedAllocator>(PinnedOptions{2 * 4096, true});
  std::vector<Batch> kept;
  {
    const test::CapturedLog log;
    DataLoader loader(IndexDataset{20, {}}, opt);
    for (const Batch& batch : loader) kept.push_back(batch);
    out = log.text();
  }
  REQUIRE(kept.size() == 4);
  REQUIRE(kept[0].is_pinned());
  REQUIRE(kept[1].is_pinned());
  REQUIRE(!kept[2].is_pinned());
  REQUIRE(!kept[3].is_pinned());
  for (std::size_t k = 0; k < 4; ++k) {  // nothing lost: every sample, in order
    for (std::size_t r = 0; r < 5; ++r) {
      REQUIRE(kept[k]["index"].data<std::int64_t>()[r] == static_cast<std::int64_t>(5 * k + r));
    }
  }
  CAPTURE(out);
  REQUIRE(test::count_of(out, "could not be pinned and is delivered unpinned") == 1);
  REQUIRE_THAT(out, Catch::Contains("would pass the budget"));
}
