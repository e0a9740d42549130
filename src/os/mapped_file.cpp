#include "os/mapped_file.hpp"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <new>

#include <fmt/format.h>

#include "data/format.hpp"
#include "os/posix.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {
namespace mapped_file_guard {

// The table: chunks linked once and never freed, so the handler walks it without a lock.
struct Chunk {
  static constexpr std::size_t kEntries = 256;
  Entry entries[kEntries];
  std::atomic<Chunk*> next{nullptr};
};
Chunk g_table;

std::atomic<int> g_state{0};
struct sigaction g_previous;  // the disposition before ours, written once before g_state = 2
std::uintptr_t g_page_mask = ~std::uintptr_t{4095};

void chain(int signal, siginfo_t* info, void* context) noexcept {
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
      g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(signal);
    return;
  }
  // The default action, as if this handler had not been there: a fault repeats when the
  // handler returns and kills the process; a SIGBUS sent by kill() is raised again.
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  posix::set_signal_action(signal, dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) posix::send_signal(posix::self_pid(), signal);
}

void on_sigbus(int signal, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  if (info != nullptr && info->si_code == BUS_ADRERR) {
    const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
    for (Chunk* chunk = &g_table; chunk != nullptr;
         chunk = chunk->next.load(std::memory_order_acquire)) {
      for (Entry& e : chunk->entries) {
        const std::uintptr_t end = e.end.load(std::memory_order_acquire);  // INV-GUARD-1
        if (end == 0) continue;
        const std::uintptr_t begin = e.begin.load(std::memory_order_relaxed);
        if (addr < begin || addr >= end) continue;
        // Past the file's end: zeros from this page to the mapping's end, so the access
        // completes; intact() then reports the shrink.
        const std::uintptr_t page = addr & g_page_mask;
        if (posix::map_zeros_at(reinterpret_cast<void*>(page), end - page) != MAP_FAILED) {
          e.shrunk.store(1, std::memory_order_relaxed);  // same thread as the reader's check
          errno = saved_errno;
          return;
        }
        break;  // cannot repair it: die of it as without the guard
      }
    }
  }
  errno = saved_errno;
  chain(signal, info, context);
}

void forget_in_child() noexcept { g_state.store(0, std::memory_order_relaxed); }

void install() noexcept {
  int expected = 0;
  if (!g_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    while (g_state.load(std::memory_order_acquire) == 1) {
    }
    return;
  }
  static const bool once = [] {
    pthread_atfork(nullptr, nullptr, &forget_in_child);
    const long page = ::sysconf(_SC_PAGESIZE);
    if (page > 0) g_page_mask = ~static_cast<std::uintptr_t>(page - 1);
    return true;
  }();
  (void)once;
  struct sigaction action = {};
  action.sa_sigaction = &on_sigbus;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  struct sigaction previous = {};
  if (posix::set_signal_action(SIGBUS, action, &previous) == 0 &&
      !((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction == &on_sigbus)) {
    g_previous = previous;  // not ourselves, inherited across a fork without a reset
  }
  g_state.store(2, std::memory_order_release);
}

Entry* claim(const std::byte* data, std::size_t size) {
  for (Chunk* chunk = &g_table;; chunk = chunk->next.load(std::memory_order_acquire)) {
    for (Entry& e : chunk->entries) {
      int expected = 0;
      if (e.used.load(std::memory_order_relaxed) != 0 ||
          !e.used.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
        continue;
      }
      e.shrunk.store(0, std::memory_order_relaxed);
      e.begin.store(reinterpret_cast<std::uintptr_t>(data), std::memory_order_relaxed);
      e.end.store(reinterpret_cast<std::uintptr_t>(data) + size, std::memory_order_release);
      return &e;
    }
    if (chunk->next.load(std::memory_order_acquire) == nullptr) {
      auto* added = new Chunk();  // never freed: the handler may be walking the table
      Chunk* none = nullptr;
      if (!chunk->next.compare_exchange_strong(none, added, std::memory_order_acq_rel)) {
        delete added;  // another thread linked one first
      }
    }
  }
}

void release(Entry* e) noexcept {
  e->end.store(0, std::memory_order_release);  // INV-GUARD-1: before the mapping goes
  e->begin.store(0, std::memory_order_relaxed);
  e->used.store(0, std::memory_order_release);
}

}  // namespace mapped_file_guard

namespace {
// How far back from the end the sentinel is looked for (more than a page: see INV-MAP-1).
constexpr std::size_t kSentinelWindow = 8192;
}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, const char* who) {
  mapped_file_guard::ensure();
  posix::Fd fd(posix::open_read(path.c_str()));
  if (!fd.valid()) {
    throw Error(posix::errno_message(fmt::format("{}: cannot open {}", who, path), errno));
  }
  const off_t file_size = posix::file_size(fd.get());
  if (file_size < 0) {
    throw Error(posix::errno_message(fmt::format("{}: cannot stat {}", who, path), errno));
  }
  const auto size = static_cast<std::size_t>(file_size);
  if (size == 0) throw Error(fmt::format("{}: {} is empty", who, path));
  void* data = posix::map_shared_read_only(fd.get(), size);
  if (data == MAP_FAILED) {
    throw Error(posix::errno_message(
        fmt::format("{}: cannot map {} ({})", who, path, format_bytes(size)), errno));
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->data_ = static_cast<const std::byte*>(data);
  file->size_ = size;
  file->path_ = path;
  file->entry_ = mapped_file_guard::claim(file->data_, size);
  // The sentinel: the tail is read now, under the guard (a file cut meanwhile reads zeros).
  const std::size_t window_start = size > kSentinelWindow ? size - kSentinelWindow : 0;
  file->sentinel_at_ = size - 1;
  for (std::size_t i = size; i > window_start; --i) {
    if (file->data_[i - 1] != std::byte{0}) {
      file->sentinel_at_ = i - 1;
      break;
    }
  }
  file->sentinel_ = file->data_[file->sentinel_at_];
  if (!file->intact()) file->throw_shrunk(who, 0);
  return file;
}

MappedFile::~MappedFile() {
  if (entry_ != nullptr) mapped_file_guard::release(entry_);
  if (data_ != nullptr) posix::unmap(const_cast<std::byte*>(data_), size_);
}

std::string MappedFile::shrink_message(std::string_view where) const {
  // "<where>: the file ..." when `where` names it already ("TFRecordDataset: a.tfrecord: record
  // 5 at byte 10080"), else "<where>: <path> ...".
  const std::string file =
      where.find(path_) != std::string_view::npos ? std::string("the file") : path_;
  struct ::stat st {};
  if (!posix::stat_path(path_.c_str(), st)) {
    return fmt::format(
        "{}: {} changed while it was read ({} when it was opened; {}): it was deleted or cut "
        "short; copy it again and open the dataset again",
        where, file, size_, posix::errno_message("it cannot be stat()ed now", errno));
  }
  if (static_cast<std::uint64_t>(st.st_size) >= size_) {
    return fmt::format(
        "{}: part of {} could not be read through its mapping (it is {} bytes, as when it was "
        "opened): a read error of the disk, or the file was cut and written again; check the "
        "disk, copy the file again and open the dataset again",
        where, file, size_);
  }
  return fmt::format(
      "{}: {} shrank while it was read (it is {} bytes now, {} when it was opened): another "
      "process cut or rewrote it, or a network filesystem's view of it changed; copy it again "
      "and open the dataset again",
      where, file, st.st_size, size_);
}

void MappedFile::throw_shrunk(std::string_view where, std::uint64_t offset) const {
  throw ShardError(shrink_message(where), path_, offset);
}

}  // namespace stoker::detail
