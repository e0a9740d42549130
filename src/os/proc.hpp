// The one module that reads /proc: this process's own files (through /proc/thread-self), a
// process's memory (smaps_rollup, statm), the machine's CPU time
// (/proc/stat), /proc/meminfo values, a process's thread count, a process tree (each
// thread's `children`), and the memory of a whole tree (TreeMemoryReader, once;
// TreeMemorySampler, from a thread for as long as a run lasts). Used by the library and by the
// tools and benches (stoker-tune, stoker-bench, bench/memory_estimate). The parse_* functions
// take the text (for tests); the read_* functions read the file and never throw for a missing
// or unreadable one (nullopt / empty instead). Either process.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
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
  std::optional<std::uint64_t> anonymous_pss_bytes;  // Pss_Anon (kernels 5.9 and newer)
  std::optional<std::uint64_t> file_pss_bytes;       // Pss_File (likewise)
};
std::optional<ProcessMemory> parse_process_memory(std::string_view smaps_rollup);
std::optional<ProcessMemory> read_process_memory(pid_t pid);  // 0: this process
// The dirty pages of a process's private mappings in /proc/<pid>/smaps text: its anonymous
// memory (heap, stacks, the copy-on-write copies of libraries' data), without shared mappings
// (the ring's memfd, which smaps_rollup's Private_Dirty counts while no other process maps
// those pages) and without clean file pages. Empty when the text has no mapping.
std::optional<std::uint64_t> parse_private_anonymous(std::string_view smaps);
// `yield_between_reads`: sched_yield() after each chunk read, so a thread this one preempted on
// its CPU runs first (a worker measuring itself while the main process waits for its batch).
std::optional<std::uint64_t> read_own_private_anonymous(bool yield_between_reads = false);
// This process's resident anonymous memory (RssAnon of /proc/self/status, a counter the kernel
// keeps: no page-table walk, unlike smaps_rollup, which takes 10-15 ms in a process that has
// imported torch). A page shared copy-on-write with a forked child counts here in full, once;
// the child counts only the pages it copies. Empty on kernels before 4.5, which lack RssAnon.
std::optional<std::uint64_t> read_own_anonymous_resident();
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

// The first three fields of /proc/<pid>/statm ("size resident shared text lib data dt", in
// pages): the address space's size, the resident pages, and the part of those that is
// file-backed or shared memory, so resident - shared is the anonymous resident memory (RssAnon),
// from counters the kernel keeps, without walking page tables. nullopt when the text does not
// start with three numbers or shared exceeds resident.
struct ProcessPages {
  std::uint64_t size = 0;
  std::uint64_t resident = 0;
  std::uint64_t shared = 0;
  std::uint64_t anonymous() const noexcept { return resident - shared; }
};
std::optional<ProcessPages> parse_statm(std::string_view statm);

// One line of /proc/<pid>/maps that maps a shared-memory object: a shared mapping ('s') of a
// memfd ("/memfd:NAME (deleted)"), of a file in /dev/shm or /run/shm, of a System V segment
// ("/SYSV%08x") or of /dev/zero (a MAP_SHARED | MAP_ANONYMOUS mapping). Each is a tmpfs inode
// whose pages stay allocated as long as the object lives, mapped or not, so a tree holds them
// once however many processes map them. `name` views the text it was parsed from.
struct ShmemMapping {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  std::uint64_t device = 0;  // the maps line's major:minor, as (major << 32) | minor
  std::uint64_t inode = 0;
  std::string_view name;
};
// Every such line of `maps`, in order; lines that are not one, or do not parse, are skipped.
std::vector<ShmemMapping> parse_shmem_mappings(std::string_view maps);

// ---- The memory of a process tree ----------------------------------------------------------
// What a process tree holds that the kernel cannot drop and read back (what the memory cgroup
// charges and the OOM killer frees): each process's anonymous memory, plus each shared-memory
// object once, by inode, however many processes map it, as its allocated blocks (st_blocks of
// /proc/<pid>/map_files/<range>, one counter the kernel keeps: exact at any moment, also while a
// worker exits, when sums of per-process shares of the same pages count them twice or not at
// all). File-backed pages (code, libraries, memory-mapped datasets) are page cache, left out.

// How each process's anonymous memory is counted.
enum class AnonymousCount {
  // RssAnon of /proc/<pid>/statm: counters, about 10 µs a process however large it is. A page
  // still shared copy-on-write after fork() counts in every process that maps it (an upper
  // bound: stoker's workers share under 0.5 MiB each with the main process).
  kResident,
  // Pss_Anon of /proc/<pid>/smaps_rollup: a shared page is split among the processes that map
  // it, so the tree counts it once. Reading it walks every page table of the process, the
  // ring's included: about 0.1 µs per resident page (10 ms for a 300 MiB ring).
  kProportional,
  // kProportional in the passes the caller asks to be exact (read(root, true)); in the others,
  // each process's share at the last exact pass moved by what its RssAnon moved since, and a
  // process forked after it counts its RssAnon beyond what its parent had when it was first
  // seen (a child shares its parent's pages). What TreeMemorySampler uses by default: exact
  // passes as often as its CPU budget allows, cheap ones in between. Between exact passes the
  // pages a process copies on write are not seen, and a reaped child's shares are not given
  // back to its parent: low by at most the pages shared copy-on-write.
  kTracked,
};

struct TreeMemory {
  std::uint64_t anonymous_bytes = 0;       // summed over the processes
  std::uint64_t root_anonymous_bytes = 0;  // the root process's part of it
  std::uint64_t shared_bytes = 0;          // each shared-memory object once
  std::uint64_t ring_bytes = 0;            // the part of shared_bytes in the ring's objects
  std::uint64_t file_pss_bytes = 0;        // Pss_File summed (kProportional only; not in total)
  std::size_t processes = 0;
  std::size_t shared_objects = 0;
  // Objects whose size could not be read: following /proc/<pid>/map_files needs CAP_SYS_ADMIN
  // (or CAP_CHECKPOINT_RESTORE). When there is one, shared_bytes is instead the processes'
  // Pss_Shmem summed (shared_from_pss): the objects' pages that some process maps, once, read
  // by the exact passes (a kTracked pass in between repeats the last one's; a kResident pass
  // has none). ring_bytes is then shared_bytes if every object is the ring's, else 0.
  std::size_t unmeasured_objects = 0;
  bool shared_from_pss = false;
  bool exact = false;  // the anonymous figure is every process's Pss_Anon, read in this pass
  std::uint64_t total_bytes() const noexcept { return anonymous_bytes + shared_bytes; }
};

// One pass at a time over a process tree, keeping its buffers between passes (a sampler in the
// measured process should not grow its heap every pass). Not thread-safe: one per thread.
class TreeMemoryReader {
 public:
  // Objects whose maps name starts with `ring_prefix` are counted in TreeMemory::ring_bytes
  // (the loader's ring is "/memfd:stoker-ring").
  explicit TreeMemoryReader(AnonymousCount anonymous,
                            std::string ring_prefix = "/memfd:stoker-ring");
  // `root` (0: this process) and its descendants, read once. With kProportional, a pass during
  // which a process was forked or reaped (the tree listed before and after differs) could count
  // a shared page in two processes or in none: it is read again, up to three times. nullopt
  // when the tree kept changing, or `root` does not exist.
  // `exact` matters with kTracked only (kProportional always is, kResident never).
  std::optional<TreeMemory> read(pid_t root, bool exact = true);

 private:
  // A shared-memory mapping of one process, as its maps said when last read.
  struct Mapping {
    std::uint64_t device = 0;
    std::uint64_t inode = 0;
    std::uint64_t start = 0;
    std::uint64_t end = 0;
    bool ring = false;
  };
  // What a process's maps held. Reading maps costs 5-10 times what statm does (a line formatted
  // per mapping), and a process's mappings change rarely, so its list is kept while the size of
  // its address space (statm's first field) stays the same, for at most kMapsKeptPasses passes,
  // and until a mapping in it no longer leads to the object it named.
  // A process's anonymous memory at an exact pass: RssAnon, and its Pss_Anon.
  struct Baseline {
    std::uint64_t resident = 0;
    std::uint64_t proportional = 0;
    bool valid = false;
  };
  struct Process {
    pid_t pid = 0;
    std::uint64_t size_pages = 0;
    int passes = 0;
    bool stale = false;
    std::uint64_t seen = 0;  // the last pass that could read it
    std::vector<Mapping> mappings;
    Baseline baseline;                       // of the last exact pass that counted
    Baseline candidate;                      // of this pass, if it is exact and counts
    std::optional<std::uint64_t> inherited;  // its parent's RssAnon when first seen
  };
  static constexpr int kMapsKeptPasses = 16;
  // One object of this pass: the first mapping of it seen, in `process`.
  struct Object {
    const Mapping* mapping = nullptr;
    Process* process = nullptr;
  };

  // false when `root` cannot be read; `retry` is set when an object must be looked up again.
  bool read_pass(pid_t root, bool exact, TreeMemory& out, bool& retry);
  Process& process(pid_t pid, std::uint64_t size_pages);
  // The object's allocated bytes, from map_files; nullopt when they cannot be read. `gone` when
  // the mapping no longer leads to the object.
  std::optional<std::uint64_t> object_bytes(const Object& o, bool& gone);

  AnonymousCount anonymous_;
  std::string ring_prefix_;
  std::uint64_t page_bytes_;
  std::string text_;
  std::vector<Process> processes_;  // of the last pass
  std::uint64_t pass_ = 0;
  std::vector<pid_t> tree_;               // this pass's processes, parents first
  std::vector<pid_t> parents_;            // ... and each one's parent
  std::vector<std::uint64_t> residents_;  // ... and each one's RssAnon
  std::vector<Object> objects_;
  std::uint64_t last_pss_shmem_ = 0;     // Pss_Shmem summed by the last exact pass that counted
  std::uint64_t pending_pss_shmem_ = 0;  // ... by this pass
};

// The peak of a tree's memory over a run, sampled from a thread of this process.
struct TreeMemoryReport {
  TreeMemory peak;                                // the pass with the largest total_bytes()
  std::chrono::steady_clock::time_point peak_at;  // when that pass began
  double peak_after_seconds = 0;                  // ... as seconds after the sampler started
  std::uint64_t ring_peak_bytes = 0;              // the ring's largest size in any pass
  std::size_t passes = 0;                         // passes that counted
  std::size_t exact_passes = 0;                   // of those, passes that read Pss_Anon
  std::size_t skipped = 0;                        // passes the tree kept changing through
  double seconds = 0;                             // from start to the last pass
  double cpu_seconds = 0;                         // the sampling thread's CPU time
  std::chrono::microseconds interval{0};          // the interval asked for
};

class TreeMemorySampler {
 public:
  struct Options {
    pid_t root = 0;  // 0: this process
    // Time between passes. A pass never starts sooner than its predecessor's CPU time divided by
    // max_cpu_share after it, so the thread takes at most that share of one core whatever the
    // tree costs to read (a large ring read with kProportional). With kTracked, exact and cheap
    // passes have half of it each; the first and the last pass are exact.
    std::chrono::microseconds interval{std::chrono::milliseconds(10)};
    double max_cpu_share = 0.01;
    AnonymousCount anonymous = AnonymousCount::kTracked;
    std::string ring_prefix = "/memfd:stoker-ring";
  };
  // Takes a first pass, then starts the thread. Any process (`root` need not be this one); no
  // throw except std::system_error when the thread cannot start. fork() copies only the forking
  // thread: a forked child neither sees nor joins this one (it must leave with _exit(), as
  // stoker's workers do). fork() waits for the thread's pass to end (pthread_atfork), so a child
  // never starts with a lock the pass held (an allocator's: ASan's are not taken around fork);
  // a DataLoader forking while it runs still warns, once, that the process has two threads.
  explicit TreeMemorySampler(Options options);
  ~TreeMemorySampler();  // stop()
  TreeMemorySampler(const TreeMemorySampler&) = delete;
  TreeMemorySampler& operator=(const TreeMemorySampler&) = delete;

  // Takes a last pass and stops the thread; the report of the whole run. Blocks for at most one
  // pass. Later calls return the same report.
  TreeMemoryReport stop();
  // The report so far (the thread goes on).
  TreeMemoryReport report() const;

 private:
  void run();
  // One pass, recorded in report_; its CPU time.
  double pass(bool exact);

  Options options_;
  std::chrono::steady_clock::time_point started_;
  // Used by one thread at a time: the caller's for the first pass (before the thread starts)
  // and the last (after it is joined), the sampling thread for the others.
  TreeMemoryReader reader_;
  double first_exact_cpu_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;    // guarded by mutex_
  bool stopped_ = false;     // stop() has joined (caller's thread only)
  TreeMemoryReport report_;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace stoker::detail
