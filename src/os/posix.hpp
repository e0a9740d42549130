// Thin wrappers over the system calls stoker makes. Each returns what the call returns (-1 and
// errno on failure), retries EINTR where a retry is correct, and can be told by a test to fail
// (inject_failure), so every failure path can be exercised. Fd is the RAII owner of a descriptor.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stoker::detail::posix {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }
  // Closes the current descriptor (errors are ignored: the descriptor is gone either way).
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

// The calls a test can make fail.
enum class Call : int {
  kFork,
  kMemfdCreate,
  kFtruncate,
  kMmap,
  kMadvise,
  kEventfd,
  kPidfdOpen,
  kPipe,
  kCount,
};
// Tests only: the next `times` calls of `call` fail with `err` without reaching the kernel.
void inject_failure(Call call, int err, int times = 1) noexcept;
void clear_injected_failures() noexcept;

pid_t fork_process() noexcept;
int memfd(const char* name, unsigned flags) noexcept;
int truncate_fd(int fd, off_t size) noexcept;
int add_seals(int fd, int seals) noexcept;
// Shared read-write mapping of fd; MAP_FAILED on failure.
void* map_shared(int fd, std::size_t length) noexcept;
// madvise(MADV_POPULATE_READ): backs and maps [addr, addr + length). On a shared mapping the
// pages are mapped writable, and the kernel maps ~16 pages per fault, so it costs 2-5x less
// than MADV_POPULATE_WRITE in a freshly forked worker (measured: 1.3 vs 3.4 ms for 10 MiB).
int populate(void* addr, std::size_t length) noexcept;
int make_eventfd() noexcept;          // non-blocking, close-on-exec
int eventfd_post(int fd) noexcept;    // adds 1
void eventfd_drain(int fd) noexcept;  // resets to 0 if readable
int open_pidfd(pid_t pid) noexcept;   // -1 with ENOSYS on old kernels
int make_pipe(int fds[2]) noexcept;   // close-on-exec
// poll(); an EINTR is reported as 0 ready descriptors so callers recompute their deadline.
int poll_fds(pollfd* fds, std::size_t count, int timeout_ms) noexcept;
pid_t wait_pid(pid_t pid, int* status, int options) noexcept;  // retries EINTR

pid_t self_pid() noexcept;
pid_t self_tid() noexcept;
pid_t parent_pid() noexcept;

// The names in a directory, without "." and ".."; empty when it cannot be read.
std::vector<std::string> list_directory(const char* path);

// Reads a small file (procfs, sysfs) whole. False, with errno set, when it cannot be read.
bool read_file(const char* path, std::string& out) noexcept;

// "<what>: <strerror> (errno <n>)"
std::string errno_message(std::string_view what, int err);

}  // namespace stoker::detail::posix
