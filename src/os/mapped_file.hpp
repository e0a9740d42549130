// MappedFile: a whole file mapped read-only and shared, unmapped when the last holder goes: what
// the mmap readers (TFRecord and MDS shards, .npy, token and IDX files) serve bytes from, and the
// guard that keeps a file shrinking under its mapping from killing the process.
//
// Design (a file that shrinks while it is mapped). Touching a page of a shared file mapping that
// lies wholly past the file's end raises SIGBUS, whose default action kills the process; bytes
// past the end on the new last page (partial) read as zeros. So:
//   - The first MappedFile of a process installs a SIGBUS handler (again in a forked child, whose
//     handlers the loader resets). For a fault inside a MappedFile's mapping it maps zero pages
//     over the rest of that mapping and marks the file shrunk: the read completes, with zeros,
//     and the process lives. Faults anywhere else go to the handler installed before it, or to
//     the default action: the process dies of them as it would have.
//   - The zeros of the partial page are caught by a sentinel: at open, the offset and value of
//     the file's last non-zero byte within its last kSentinelWindow bytes (or, when those are all
//     zero, its last byte, value 0). A shrink that cut any non-zero byte makes the sentinel read
//     differently (zero, or a fault: shrunk); one that cut only zeros lost nothing, since a read
//     there still gets the file's bytes (zeros) or is marked shrunk by the fault.
//   - Readers call intact() after they have used bytes of the mapping, and before they hand out
//     a view of them: one atomic load and one byte compare, no system call (a fstat per record
//     would cost ~1 us here, more than a whole TFRecord get()).
// INV-MAP-1: when intact() returns true after a read of bytes [a, b) of the mapping, that read
// got the file's bytes, unless the file was cut and written again in between (a rewrite, which
// no size check would see either).
// A view handed out before the shrink and read after it (a view dataset's row, copied into the
// batch after get() returned) reads zeros for the cut part without an error; the next read of
// that file reports the shrink.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace stoker::detail {

namespace mapped_file_guard {

// One mapping the handler may repair. Written by the thread that maps or unmaps the file; read
// by the SIGBUS handler on any thread.
// INV-GUARD-1: `end` != 0 only while [begin, end) is mapped by the MappedFile that claimed the
// entry: claiming stores begin, then end (release); releasing stores end = 0 first. The handler
// loads end (acquire), then begin: a non-zero end it sees comes with its own begin.
struct Entry {
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};
  std::atomic<int> shrunk{0};  // set by the handler after it mapped zeros; read by intact()
  std::atomic<int> used{0};    // claimed by a MappedFile (compare-exchange 0 -> 1)
};
static_assert(std::atomic<std::uintptr_t>::is_always_lock_free, "the handler reads them");
static_assert(std::atomic<int>::is_always_lock_free, "the handler writes it");

// 0: the handler is not installed in this process; 1: being installed; 2: installed. A fork
// child handler sets 0: the loader's workers reset SIGBUS to its default action, so they
// install it again on first use.
extern std::atomic<int> g_state;
void install() noexcept;
// Installs the SIGBUS handler in this process if it is not installed. One atomic load when it
// is (acquire: pairs with install()'s release store of 2, after g_previous was written).
inline void ensure() noexcept {
  if (g_state.load(std::memory_order_acquire) != 2) install();
}

}  // namespace mapped_file_guard

class MappedFile {
 public:
  // Throws stoker::Error naming `who`, the path and the reason when the file cannot be opened,
  // is empty, or cannot be mapped. Either process; installs the SIGBUS guard.
  static std::shared_ptr<const MappedFile> open(const std::string& path, const char* who);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const noexcept { return data_; }
  // The file's size when it was mapped.
  std::size_t size() const noexcept { return size_; }
  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  const std::string& path() const noexcept { return path_; }

  // False when the file has shrunk under the mapping (a fault in it, or the sentinel changed).
  // Either process; no system call. Call it after reading, and before handing out a view. In a
  // forked process, call it (or guard()) before the first read: it installs the guard there.
  bool intact() const noexcept {
    mapped_file_guard::ensure();
    // The sentinel is read first: a fault there marks the entry shrunk before it is loaded. The
    // handler runs on this thread, so a signal fence orders the two for the compiler.
    const std::byte now = *static_cast<const volatile std::byte*>(data_ + sentinel_at_);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    return now == sentinel_ && entry_->shrunk.load(std::memory_order_relaxed) == 0;
  }
  // The guard, installed in this process (see intact()); no check of the file.
  static void guard() noexcept { mapped_file_guard::ensure(); }
  // "<where>: <path> shrank while it was read: ... ; <what to do>": the file's size now (one
  // stat()) and when it was mapped. For the error a reader raises when intact() is false.
  std::string shrink_message(std::string_view where) const;
  // Throws ShardError(shrink_message(where), path(), offset).
  [[noreturn]] void throw_shrunk(std::string_view where, std::uint64_t offset) const;
  // Throws as throw_shrunk() when !intact().
  void check(std::string_view where, std::uint64_t offset) const {
    if (!intact()) throw_shrunk(where, offset);
  }

 private:
  MappedFile() = default;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::string path_;
  std::size_t sentinel_at_ = 0;  // the last non-zero byte of the file's tail (or its last)
  std::byte sentinel_{};         // its value when the file was mapped
  mapped_file_guard::Entry* entry_ = nullptr;  // this mapping in the guard's table
};

}  // namespace stoker::detail
