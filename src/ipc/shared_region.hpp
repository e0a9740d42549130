// SharedRegion: one anonymous shared-memory region for a loader's processes. A memfd (not
// /dev/shm, so Docker's 64 MiB limit does not apply), sized once and sealed against shrinking
// and growing (no process can truncate it under another's mapping), mapped shared before fork()
// so every process sees it at the same address, and freed by the kernel when the last process
// holding a mapping is gone (nothing to leak when the parent is killed). The batch ring and the
// CachedDataset cache are both one. Address space is reserved whole; memory is used only where
// populate() (or a write) backs it.
#pragma once

#include <cstddef>
#include <string>

#include "stoker/errors.hpp"

namespace stoker::detail {

// The region's address space could not be reserved (mmap failed, or it is more than a process
// has): the loader may retry with a smaller ring. Any other failure is a plain stoker::Error.
class AddressSpaceError : public Error {
 public:
  using Error::Error;
};

class SharedRegion {
 public:
  SharedRegion() = default;
  // Main process, before forking. `name` shows in /proc/<pid>/maps as memfd:<name>; `who`
  // starts error messages ("DataLoader: ... the batch ring"), and `map_advice` ends the one for
  // a mapping too large for the address space. With `read_only_view`, a second, read-only
  // mapping of the same memory is made too. Throws stoker::Error naming the step that failed
  // (memfd_create, ftruncate, mmap) and what to do.
  SharedRegion(const char* name, std::size_t bytes, const std::string& who,
               const std::string& map_advice, bool read_only_view = false);
  ~SharedRegion();
  SharedRegion(SharedRegion&& other) noexcept;
  SharedRegion& operator=(SharedRegion&& other) noexcept;
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  std::byte* data() const noexcept { return base_; }
  const std::byte* read_only() const noexcept { return read_only_; }
  std::size_t size() const noexcept { return bytes_; }

  // Backs and maps [p, p + n) in this process (any process mapping the region): one
  // MADV_POPULATE_READ, whose failure (memory exhausted) is an errno value here instead of a
  // SIGBUS later. On kernels before 5.14, which lack it, each page is touched with an atomic
  // no-op instead (cannot clobber a concurrent writer; exhaustion is then SIGBUS). Returns 0 or
  // an errno value. `p` need not be page-aligned.
  static int populate(std::byte* p, std::size_t n) noexcept;

 private:
  void release() noexcept;
  std::byte* base_ = nullptr;
  const std::byte* read_only_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace stoker::detail
