// Thin wrappers over the system calls stoker makes. Each returns what the call returns (-1 and
// errno on failure), retries EINTR where a retry is correct, and can be told by a test to fail
// (inject_failure), so every failure path can be exercised. Fd is the RAII owner of a descriptor.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
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
  kOpen,    // open_read, open_write
  kRead,    // read_some, pread_some, read_full, pread_full
  kWrite,   // write_all
  kSpawn,   // spawn_shell
  kPwrite,  // pwrite_all: the shard cache's downloads (ENOSPC)
  kRename,  // rename_file: the cache's atomic publish
  kCount,
};
// Tests only: after `after` calls of `call` succeed, the next `times` fail with `err` without
// reaching the kernel (after > 0: a read that fails mid-file).
void inject_failure(Call call, int err, int times = 1, int after = 0) noexcept;
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
// Read-only shared mapping of fd; MAP_FAILED on failure.
void* map_shared_read_only(int fd, std::size_t length) noexcept;
// Private anonymous read-write memory; MAP_FAILED on failure.
void* map_anonymous(std::size_t length) noexcept;
int unmap(void* addr, std::size_t length) noexcept;
int advise(void* addr, std::size_t length, int advice) noexcept;
// mlock / munlock by system call (a sanitizer's interceptor may make the libc ones no-ops).
int lock_memory(const void* addr, std::size_t length) noexcept;
int unlock_memory(const void* addr, std::size_t length) noexcept;
// mbind(MPOL_PREFERRED) of [addr, addr + length) to `node`.
int prefer_node(void* addr, std::size_t length, unsigned node) noexcept;
// The NUMA node of the CPU this thread runs on.
int current_node(unsigned& node) noexcept;
int make_eventfd() noexcept;          // non-blocking, close-on-exec
int eventfd_post(int fd) noexcept;    // adds 1
void eventfd_drain(int fd) noexcept;  // resets to 0 if readable
// futex(FUTEX_WAIT) on a word of shared memory (a process-shared futex: the waker is another
// process): sleeps while `word` holds `expected`, for at most `timeout_ms`. 0 when woken or the
// word differed; -1 and errno (ETIMEDOUT, EINTR) otherwise.
int futex_wait(const std::atomic<std::uint32_t>& word, std::uint32_t expected,
               int timeout_ms) noexcept;
// Wakes every process sleeping in futex_wait on `word`.
int futex_wake_all(const std::atomic<std::uint32_t>& word) noexcept;
int open_pidfd(pid_t pid) noexcept;  // -1 with ENOSYS on old kernels
int make_pipe(int fds[2]) noexcept;  // close-on-exec
// poll(); an EINTR is reported as 0 ready descriptors so callers recompute their deadline.
int poll_fds(pollfd* fds, std::size_t count, int timeout_ms) noexcept;
pid_t wait_pid(pid_t pid, int* status, int options) noexcept;  // retries EINTR

int close_fd(int fd) noexcept;
// Opens `path` read-only, close-on-exec; -1 and errno on failure.
int open_read(const char* path) noexcept;
// Creates or truncates `path` for writing (mode 0644 before the umask), close-on-exec.
int open_write(const char* path) noexcept;
// One read() / pread() of at most `length` bytes, retrying EINTR: the bytes read (0 at the end
// of the file), or -1 and errno.
ssize_t read_some(int fd, void* buffer, std::size_t length) noexcept;
ssize_t pread_some(int fd, void* buffer, std::size_t length, off_t offset) noexcept;
// read() until `length` bytes or end of file, retrying EINTR; the bytes read, or -1.
ssize_t read_full(int fd, void* buffer, std::size_t length) noexcept;
// pread() until `length` bytes at `offset` or end of file, retrying EINTR; the bytes read, or -1.
ssize_t pread_full(int fd, void* buffer, std::size_t length, off_t offset) noexcept;
// write() all of `length`, retrying EINTR and short writes; 0, or -1 and errno.
int write_all(int fd, const void* data, std::size_t length) noexcept;
// The size of the open file fd; -1 and errno on failure.
off_t file_size(int fd) noexcept;
// stat(path) / fstat(fd); false and errno when it cannot.
bool stat_path(const char* path, struct ::stat& out) noexcept;
bool stat_fd(int fd, struct ::stat& out) noexcept;
// posix_fadvise (a hint: its result is only informative). 0, or an error number.
int advise_file(int fd, off_t offset, off_t length, int advice) noexcept;
// A resource limit's soft value (RLIMIT_*); nullopt when it cannot be read.
struct ResourceLimit {
  std::uint64_t soft = 0;
  bool unlimited = false;
};
std::optional<ResourceLimit> resource_limit(int resource) noexcept;
// The soft limit of a resource: nullopt when unlimited or unreadable.
std::optional<std::uint64_t> soft_limit(int resource) noexcept;
// statfs / statvfs of path; false and errno when they cannot.
bool stat_filesystem(const char* path, struct ::statfs& out) noexcept;
bool stat_vfs(const char* path, struct ::statvfs& out) noexcept;
// Logical CPUs online (at least 1).
std::size_t online_cpus() noexcept;

// Runs `/bin/sh -c command` in a new process group whose id is its pid, with its standard
// output on `stdout_fd` (every other descriptor of this process stays closed to it, being
// close-on-exec). The child's pid, or -1 and errno when it cannot fork. A command that cannot
// be run exits with status 127 (as sh does for a missing program).
pid_t spawn_shell(const char* command, int stdout_fd) noexcept;

// Signals and process state.
int send_signal(pid_t pid, int signal) noexcept;
// sigaction(); 0, or -1 and errno.
int set_signal_action(int signal, const struct ::sigaction& action,
                      struct ::sigaction* previous) noexcept;
// A private anonymous read-only mapping of zeros placed exactly at [addr, addr + length),
// replacing what was there. Async-signal-safe (one system call): for a SIGBUS handler.
// MAP_FAILED on failure.
void* map_zeros_at(void* addr, std::size_t length) noexcept;
// Restores `signal`'s default disposition.
void default_signal(int signal) noexcept;
void ignore_signal(int signal) noexcept;
void unblock_all_signals() noexcept;
// SIGIO to this process when fd becomes readable or its other end closes (F_SETOWN, O_ASYNC).
int signal_on_io(int fd) noexcept;
// Runs this process only on `cpus` (best effort: a cpuset may forbid it).
int bind_to_cpus(const std::vector<int>& cpus) noexcept;
// The logical CPUs this thread may run on (sched_getaffinity); empty when it cannot be read.
std::vector<int> allowed_cpus();
// Lets this thread run on every CPU its cpuset allows (after bind_to_cpus). -1 and errno on
// failure.
int unbind_cpus() noexcept;
// sched_yield(): another runnable thread on this CPU runs first.
void yield_cpu() noexcept;

pid_t self_pid() noexcept;
pid_t parent_pid() noexcept;

// Files that are created, replaced and locked (the remote shard cache, uploads' local copies).
// open(path, flags | O_CLOEXEC, mode); -1 and errno on failure.
int open_file(const char* path, int flags, mode_t mode = 0644) noexcept;
// Creates (or truncates) `path` for writing; with `exclusive`, fails with EEXIST when it exists.
int create_file(const char* path, bool exclusive) noexcept;
// pwrite() all of `length` at `offset`, retrying EINTR and short writes; 0, or -1 and errno.
int pwrite_all(int fd, const void* data, std::size_t length, off_t offset) noexcept;
// flock(fd, operation) (LOCK_SH, LOCK_EX, LOCK_UN, | LOCK_NB), retrying EINTR; 0 or -1.
int lock_file(int fd, int operation) noexcept;
int rename_file(const char* from, const char* to) noexcept;
int remove_file(const char* path) noexcept;  // unlink()
// mkdir -p: each missing directory of `path` (an existing one is fine); 0 or -1 and errno.
int make_directories(const char* path, mode_t mode = 0755) noexcept;
int sync_file_data(int fd) noexcept;  // fdatasync()
int touch_file(int fd) noexcept;      // futimens(): the modification time to now

// The names in a directory, without "." and ".."; empty when it cannot be read.
std::vector<std::string> list_directory(const char* path);

// Reads a small file (procfs, sysfs) whole. False, with errno set, when it cannot be read.
bool read_file(const char* path, std::string& out) noexcept;

// "<what>: <strerror> (errno <n>)"
std::string errno_message(std::string_view what, int err);

}  // namespace stoker::detail::posix
