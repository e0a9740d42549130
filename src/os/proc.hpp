// The one module that reads /proc: this process's own files (through /proc/thread-self), a
// process's memory (smaps_rollup), the machine's CPU time
// (/proc/stat), /proc/meminfo values, a process's thread count, and a process tree (each
// thread's `children`). Used by the library and by stoker-tune. The parse_* functions take the
// text (for tests); the read_* functions read the file and never throw for a missing or
// unreadable one (nullopt / empty instead). Either process.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stoker::detail {

// This process's own /proc file `leaf` ("cgroup", "smaps_rollup"...), whole, under `root` (""
// for this machine; a fake tree in tests). Read through /proc/thread-self/, which is the calling
// thread's and so stays whole after the main thread has exited while the process goes on
// (pthread_exit from main): /proc/self/ then describes the zombie leader, whose smaps_rollup
// cannot be read and whose cgroup reads "/". /proc/self/ where thread-self does not exist
// (kernels before 3.17, fake trees). False when neither can be read.
bool read_own_proc_file(std::string_view leaf, std::string& text, const std::string& root = "");

// A process's memory from /proc/<pid>/smaps_rollup.
struct ProcessMemory {
  std::uint64_t rss_bytes = 0;
  std::uint64_t pss_bytes = 0;
  std::uint64_t private_dirty_bytes = 0;  // pages only this process has written
  // The part of pss_bytes that the kernel cannot drop and read again: anonymous memory and
  // shared memory (the ring), without file-backed pages (code, libraries, mapped files), which
  // are page cache. pss_bytes itself on kernels without Pss_Anon / Pss_Shmem (before 5.9).
  std::uint64_t unreclaimable_pss_bytes = 0;
};
std::optional<ProcessMemory> parse_process_memory(std::string_view smaps_rollup);
std::optional<ProcessMemory> read_process_memory(pid_t pid);  // 0: this process
// The dirty pages of a process's private mappings in /proc/<pid>/smaps text: its anonymous
// memory (heap, stacks, the copy-on-write copies of libraries' data), without shared mappings
// (the ring's memfd, which smaps_rollup's Private_Dirty counts while no other process maps
// those pages) and without clean file pages. Empty when the text has no mapping.
std::optional<std::uint64_t> parse_private_anonymous(std::string_view smaps);
std::optional<std::uint64_t> read_own_private_anonymous();
// This process's resident set now and at its highest (VmRSS and VmHWM of /proc/self/status):
// their difference is memory it had and gave back (buffers unmapped, the heap trimmed).
struct ResidentPeak {
  std::uint64_t now_bytes = 0;
  std::uint64_t peak_bytes = 0;
};
std::optional<ResidentPeak> read_own_resident_peak();

// Whole-machine CPU time from /proc/stat's first line, in clock ticks.
struct CpuTimes {
  std::uint64_t total = 0;
  std::uint64_t idle = 0;  // idle, without iowait
  std::uint64_t iowait = 0;
};
std::optional<CpuTimes> parse_cpu_times(std::string_view proc_stat);
std::optional<CpuTimes> read_cpu_times();

// A "Key:   123 kB" line of /proc/meminfo (or smaps, status...), in bytes.
std::optional<std::uint64_t> parse_kb_field(std::string_view text, std::string_view key);
// /proc/meminfo's `key` under `root` ("" for this machine; a fake tree in tests), in bytes.
std::optional<std::uint64_t> read_meminfo(std::string_view key, const std::string& root = "");

// Threads of process `pid` (0: this one), from /proc/<pid>/stat; 0 when unknown.
std::size_t count_threads(pid_t pid = 0) noexcept;

// `pid` and every descendant (a child forked from any thread of a process is listed under
// that thread's /proc/<pid>/task/<tid>/children), parents before children.
std::vector<pid_t> process_tree(pid_t pid);

}  // namespace stoker::detail
