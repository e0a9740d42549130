#include "ipc/shared_region.hpp"

#include <fcntl.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <utility>

#include <fmt/format.h>

#include "data/format.hpp"
#include "os/posix.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {
namespace {

constexpr std::size_t kPage = 4096;

}  // namespace

SharedRegion::SharedRegion(const char* name, std::size_t bytes, const std::string& who,
                           const std::string& map_advice, bool read_only_view)
    : bytes_(bytes) {
  posix::Fd fd(posix::memfd(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) {
    throw Error(posix::errno_message(fmt::format("{}: memfd_create failed", who), errno) +
                "; stoker needs Linux 3.17 or newer and a free file descriptor (`ulimit -n`)");
  }
  if (posix::truncate_fd(fd.get(), static_cast<off_t>(bytes_)) != 0) {
    throw Error(posix::errno_message(
        fmt::format("{}: sizing shared memory to {} failed", who, format_bytes(bytes_)), errno));
  }
  (void)posix::add_seals(fd.get(), F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  void* base = posix::map_shared(fd.get(), bytes_);
  if (base == MAP_FAILED) {
    throw AddressSpaceError(
        posix::errno_message(
            fmt::format("{}: mapping {} of address space failed", who, format_bytes(bytes_)),
            errno) +
        map_advice);
  }
  base_ = static_cast<std::byte*>(base);
  if (read_only_view) {
    void* view = posix::map_shared_read_only(fd.get(), bytes_);
    if (view == MAP_FAILED) {
      const int err = errno;
      release();
      throw Error(posix::errno_message(
          fmt::format("{}: mapping shared memory read-only failed", who), err));
    }
    read_only_ = static_cast<const std::byte*>(view);
  }
  // The mappings keep the memory; the descriptor closes here.
}

SharedRegion::~SharedRegion() { release(); }

SharedRegion::SharedRegion(SharedRegion&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      read_only_(std::exchange(other.read_only_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

SharedRegion& SharedRegion::operator=(SharedRegion&& other) noexcept {
  if (this != &other) {
    release();
    base_ = std::exchange(other.base_, nullptr);
    read_only_ = std::exchange(other.read_only_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void SharedRegion::release() noexcept {
  if (base_ != nullptr) posix::unmap(base_, bytes_);
  if (read_only_ != nullptr) posix::unmap(const_cast<std::byte*>(read_only_), bytes_);
  base_ = nullptr;
  read_only_ = nullptr;
}

int SharedRegion::populate(std::byte* p, std::size_t n) noexcept {
  const std::size_t lead = reinterpret_cast<std::uintptr_t>(p) % kPage;
  p -= lead;
  n += lead;
  if (posix::populate(p, n) == 0) return 0;
  if (errno != EINVAL) return errno;
  for (std::size_t off = 0; off < n; off += kPage) {
    __atomic_fetch_add(reinterpret_cast<std::uint64_t*>(p + off), 0, __ATOMIC_RELAXED);
  }
  return 0;
}

}  // namespace stoker::detail
