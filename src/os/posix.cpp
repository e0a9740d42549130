#include "os/posix.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include <fmt/format.h>

namespace stoker::detail::posix {
namespace {

struct Injection {
  std::atomic<int> err{0};
  std::atomic<int> remaining{0};
  std::atomic<int> skip{0};  // calls that still succeed before the failures start
};
std::array<Injection, static_cast<std::size_t>(Call::kCount)> g_injections;

// True (with errno set) when a test asked this call to fail. One relaxed load on the normal path.
bool injected(Call call) noexcept {
  Injection& slot = g_injections[static_cast<std::size_t>(call)];
  if (slot.remaining.load(std::memory_order_relaxed) <= 0) return false;
  if (slot.skip.load(std::memory_order_relaxed) > 0 &&
      slot.skip.fetch_sub(1, std::memory_order_relaxed) > 0) {
    return false;
  }
  if (slot.remaining.fetch_sub(1, std::memory_order_relaxed) <= 0) return false;
  errno = slot.err.load(std::memory_order_relaxed);
  return true;
}

// `call()` again while it fails with EINTR; its last result.
template <class F>
auto retry_eintr(F&& call) noexcept {
  decltype(call()) rc;
  do {
    rc = call();
  } while (rc < 0 && errno == EINTR);
  return rc;
}

}  // namespace

void Fd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

void inject_failure(Call call, int err, int times, int after) noexcept {
  Injection& slot = g_injections[static_cast<std::size_t>(call)];
  slot.err.store(err, std::memory_order_relaxed);
  slot.skip.store(after, std::memory_order_relaxed);
  slot.remaining.store(times, std::memory_order_relaxed);
}

void clear_injected_failures() noexcept {
  for (Injection& slot : g_injections) {
    slot.remaining.store(0, std::memory_order_relaxed);
    slot.skip.store(0, std::memory_order_relaxed);
  }
}

pid_t fork_process() noexcept {
  if (injected(Call::kFork)) return -1;
  return ::fork();
}

int memfd(const char* name, unsigned flags) noexcept {
  if (injected(Call::kMemfdCreate)) return -1;
  return ::memfd_create(name, flags);
}

int truncate_fd(int fd, off_t size) noexcept {
  if (injected(Call::kFtruncate)) return -1;
  return retry_eintr([&] { return ::ftruncate(fd, size); });
}

int add_seals(int fd, int seals) noexcept { return ::fcntl(fd, F_ADD_SEALS, seals); }

void* map_shared(int fd, std::size_t length) noexcept {
  if (injected(Call::kMmap)) return MAP_FAILED;
  return ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
}

int populate(void* addr, std::size_t length) noexcept {
  if (injected(Call::kMadvise)) return -1;
  return retry_eintr([&] { return ::madvise(addr, length, MADV_POPULATE_READ); });
}

void* map_shared_read_only(int fd, std::size_t length) noexcept {
  if (injected(Call::kMmap)) return MAP_FAILED;
  return ::mmap(nullptr, length, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
}

void* map_anonymous(std::size_t length) noexcept {
  if (injected(Call::kMmap)) return MAP_FAILED;
  return ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

int unmap(void* addr, std::size_t length) noexcept { return ::munmap(addr, length); }

int advise(void* addr, std::size_t length, int advice) noexcept {
  return retry_eintr([&] { return ::madvise(addr, length, advice); });
}

int lock_memory(const void* addr, std::size_t length) noexcept {
  return static_cast<int>(::syscall(SYS_mlock, addr, length));
}

int unlock_memory(const void* addr, std::size_t length) noexcept {
  return static_cast<int>(::syscall(SYS_munlock, addr, length));
}

int prefer_node(void* addr, std::size_t length, unsigned node) noexcept {
  if (node >= 64) {
    errno = EINVAL;
    return -1;
  }
  const unsigned long mask = 1UL << node;
  constexpr int kMpolPreferred = 1;
  return static_cast<int>(::syscall(SYS_mbind, addr, length, kMpolPreferred, &mask, 64UL, 0U));
}

int current_node(unsigned& node) noexcept {
  unsigned cpu = 0;
  return ::getcpu(&cpu, &node);
}

int make_eventfd() noexcept {
  if (injected(Call::kEventfd)) return -1;
  return ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

int eventfd_post(int fd) noexcept {
  const std::uint64_t one = 1;
  ssize_t n;
  do {
    n = ::write(fd, &one, sizeof one);
  } while (n < 0 && errno == EINTR);
  // EAGAIN means the counter is saturated: the reader will wake anyway.
  return n == sizeof one || (n < 0 && errno == EAGAIN) ? 0 : -1;
}

void eventfd_drain(int fd) noexcept {
  std::uint64_t value;
  ssize_t n;
  do {
    n = ::read(fd, &value, sizeof value);
  } while (n < 0 && errno == EINTR);
}

int futex_wait(const std::atomic<std::uint32_t>& word, std::uint32_t expected,
               int timeout_ms) noexcept {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  const timespec timeout{timeout_ms / 1000, static_cast<long>(timeout_ms % 1000) * 1'000'000};
  const long r = ::syscall(SYS_futex, reinterpret_cast<const std::uint32_t*>(&word), FUTEX_WAIT,
                           expected, &timeout, nullptr, 0);
  if (r < 0 && errno == EAGAIN) return 0;  // the word had changed already
  return r < 0 ? -1 : 0;
}

int futex_wake_all(const std::atomic<std::uint32_t>& word) noexcept {
  return static_cast<int>(::syscall(SYS_futex, reinterpret_cast<const std::uint32_t*>(&word),
                                    FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0));
}

int open_pidfd(pid_t pid) noexcept {
  if (injected(Call::kPidfdOpen)) return -1;
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

int make_pipe(int fds[2]) noexcept {
  if (injected(Call::kPipe)) return -1;
  return ::pipe2(fds, O_CLOEXEC);
}

int poll_fds(pollfd* fds, std::size_t count, int timeout_ms) noexcept {
  const int rc = ::poll(fds, static_cast<nfds_t>(count), timeout_ms);
  if (rc < 0 && errno == EINTR) return 0;
  return rc;
}

pid_t wait_pid(pid_t pid, int* status, int options) noexcept {
  return retry_eintr([&] { return ::waitpid(pid, status, options); });
}

int close_fd(int fd) noexcept { return ::close(fd); }

int open_read(const char* path) noexcept {
  if (injected(Call::kOpen)) return -1;
  return ::open(path, O_RDONLY | O_CLOEXEC);
}

int open_write(const char* path) noexcept {
  if (injected(Call::kOpen)) return -1;
  return ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

ssize_t read_some(int fd, void* buffer, std::size_t length) noexcept {
  if (injected(Call::kRead)) return -1;
  return retry_eintr([&] { return ::read(fd, buffer, length); });
}

ssize_t pread_some(int fd, void* buffer, std::size_t length, off_t offset) noexcept {
  if (injected(Call::kRead)) return -1;
  return retry_eintr([&] { return ::pread(fd, buffer, length, offset); });
}

ssize_t read_full(int fd, void* buffer, std::size_t length) noexcept {
  std::size_t done = 0;
  while (done < length) {
    const ssize_t n = read_some(fd, static_cast<char*>(buffer) + done, length - done);
    if (n < 0) return -1;
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

ssize_t pread_full(int fd, void* buffer, std::size_t length, off_t offset) noexcept {
  std::size_t done = 0;
  while (done < length) {
    const ssize_t n = pread_some(fd, static_cast<char*>(buffer) + done, length - done,
                                 offset + static_cast<off_t>(done));
    if (n < 0) return -1;
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

int write_all(int fd, const void* data, std::size_t length) noexcept {
  if (injected(Call::kWrite)) return -1;
  std::size_t done = 0;
  while (done < length) {
    const ssize_t n = ::write(fd, static_cast<const char*>(data) + done, length - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

off_t file_size(int fd) noexcept {
  struct ::stat st;
  if (::fstat(fd, &st) != 0) return -1;
  return st.st_size;
}

bool stat_path(const char* path, struct ::stat& out) noexcept { return ::stat(path, &out) == 0; }

bool stat_fd(int fd, struct ::stat& out) noexcept { return ::fstat(fd, &out) == 0; }

int advise_file(int fd, off_t offset, off_t length, int advice) noexcept {
  return ::posix_fadvise(fd, offset, length, advice);
}

pid_t spawn_shell(const char* command, int stdout_fd) noexcept {
  if (injected(Call::kSpawn)) return -1;
  const pid_t pid = ::fork();
  if (pid != 0) {
    if (pid > 0) (void)::setpgid(pid, pid);  // also done by the child: whichever runs first
    return pid;
  }
  // The child: only async-signal-safe calls until exec.
  (void)::setpgid(0, 0);
  if (stdout_fd != STDOUT_FILENO && ::dup2(stdout_fd, STDOUT_FILENO) < 0) ::_exit(127);
  ::execl("/bin/sh", "sh", "-c", command, static_cast<char*>(nullptr));
  ::_exit(127);
}

int open_file(const char* path, int flags, mode_t mode) noexcept {
  int fd;
  do {
    fd = ::open(path, flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

int create_file(const char* path, bool exclusive) noexcept {
  return open_file(path, O_WRONLY | O_CREAT | (exclusive ? O_EXCL : O_TRUNC), 0644);
}

int pwrite_all(int fd, const void* data, std::size_t length, off_t offset) noexcept {
  if (injected(Call::kPwrite)) return -1;
  std::size_t done = 0;
  while (done < length) {
    const ssize_t n = ::pwrite(fd, static_cast<const char*>(data) + done, length - done,
                               offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

int lock_file(int fd, int operation) noexcept {
  int rc;
  do {
    rc = ::flock(fd, operation);
  } while (rc < 0 && errno == EINTR);
  return rc;
}

int rename_file(const char* from, const char* to) noexcept {
  if (injected(Call::kRename)) return -1;
  return ::rename(from, to);
}

int remove_file(const char* path) noexcept { return ::unlink(path); }

int make_directories(const char* path, mode_t mode) noexcept {
  std::string p(path);
  for (std::size_t i = 1; i <= p.size(); ++i) {
    if (i < p.size() && p[i] != '/') continue;
    const std::string prefix = p.substr(0, i);
    if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) return -1;
  }
  struct ::stat st;
  if (::stat(path, &st) != 0) return -1;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

int sync_file_data(int fd) noexcept { return ::fdatasync(fd); }

int touch_file(int fd) noexcept {
  const timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  return ::futimens(fd, times);
}

std::optional<ResourceLimit> resource_limit(int resource) noexcept {
  rlimit lim{};
  if (::getrlimit(static_cast<__rlimit_resource_t>(resource), &lim) != 0) return std::nullopt;
  if (lim.rlim_cur == RLIM_INFINITY) return ResourceLimit{0, true};
  return ResourceLimit{static_cast<std::uint64_t>(lim.rlim_cur), false};
}

std::optional<std::uint64_t> soft_limit(int resource) noexcept {
  const std::optional<ResourceLimit> limit = resource_limit(resource);
  if (!limit || limit->unlimited) return std::nullopt;
  return limit->soft;
}

bool stat_filesystem(const char* path, struct ::statfs& out) noexcept {
  return ::statfs(path, &out) == 0;
}

bool stat_vfs(const char* path, struct ::statvfs& out) noexcept {
  return ::statvfs(path, &out) == 0;
}

std::size_t online_cpus() noexcept {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<std::size_t>(n) : 1;
}

int send_signal(pid_t pid, int signal) noexcept { return ::kill(pid, signal); }

int set_signal_action(int signal, const struct ::sigaction& action,
                      struct ::sigaction* previous) noexcept {
  return ::sigaction(signal, &action, previous);
}

void* map_zeros_at(void* addr, std::size_t length) noexcept {
  return ::mmap(addr, length, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}

void default_signal(int signal) noexcept {
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(signal, &dfl, nullptr);
}

void ignore_signal(int signal) noexcept { ::signal(signal, SIG_IGN); }

void unblock_all_signals() noexcept {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

int signal_on_io(int fd) noexcept {
  if (::fcntl(fd, F_SETOWN, ::getpid()) != 0) return -1;
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return -1;
  return ::fcntl(fd, F_SETFL, flags | O_ASYNC);
}

int bind_to_cpus(const std::vector<int>& cpus) noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int cpu : cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(static_cast<std::size_t>(cpu), &set);
  }
  return ::sched_setaffinity(0, sizeof set, &set);
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(static_cast<std::size_t>(cpu), &set)) cpus.push_back(cpu);
  }
  return cpus;
}

int unbind_cpus() noexcept {
  // Every CPU: the kernel keeps those of the thread's cpuset.
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) CPU_SET(static_cast<std::size_t>(cpu), &set);
  return ::sched_setaffinity(0, sizeof set, &set);
}

void yield_cpu() noexcept { (void)::sched_yield(); }

pid_t self_pid() noexcept { return ::getpid(); }
pid_t parent_pid() noexcept { return ::getppid(); }

std::vector<std::string> list_directory(const char* path) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path);
  if (dir == nullptr) return names;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  ::closedir(dir);
  return names;
}

bool read_file(const char* path, std::string& out) noexcept {
  Fd fd(open_read(path));
  if (!fd.valid()) return false;
  try {
    out.clear();
    char buffer[4096];
    for (;;) {
      const ssize_t n = read_some(fd.get(), buffer, sizeof buffer);
      if (n < 0) return false;
      if (n == 0) return true;
      out.append(buffer, static_cast<std::size_t>(n));
    }
  } catch (...) {
    errno = ENOMEM;
    return false;
  }
}

std::string errno_message(std::string_view what, int err) {
  return fmt::format("{}: {} (errno {})", what, std::strerror(err), err);
}

}  // namespace stoker::detail::posix
