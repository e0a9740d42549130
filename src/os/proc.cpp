#include "os/proc.hpp"

#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "os/posix.hpp"

namespace stoker::detail {
namespace {

// Process `pid`'s file `leaf`; 0: this process's (read_own_proc_file).
bool read_proc_file(pid_t pid, std::string_view leaf, std::string& text) {
  if (pid == 0) return read_own_proc_file(leaf, text);
  return posix::read_file(fmt::format("/proc/{}/{}", pid, leaf).c_str(), text);
}

// The unsigned number at the start of `text` (after blanks); nullopt when there is none.
std::optional<std::uint64_t> leading_number(std::string_view text) {
  std::size_t at = 0;
  while (at < text.size() && (text[at] == ' ' || text[at] == '\t')) ++at;
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data() + at, text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data() + at) return std::nullopt;
  return value;
}

}  // namespace

bool read_own_proc_file(std::string_view leaf, std::string& text, const std::string& root) {
  return posix::read_file(fmt::format("{}/proc/thread-self/{}", root, leaf).c_str(), text) ||
         posix::read_file(fmt::format("{}/proc/self/{}", root, leaf).c_str(), text);
}

std::optional<std::uint64_t> parse_kb_field(std::string_view text, std::string_view key) {
  for (std::size_t at = text.find(key); at != std::string_view::npos; at = text.find(key, at + 1)) {
    const std::size_t after = at + key.size();
    if ((at != 0 && text[at - 1] != '\n') || after >= text.size() || text[after] != ':') continue;
    const std::optional<std::uint64_t> kb = leading_number(text.substr(after + 1));
    if (!kb || *kb > (~std::uint64_t{0} >> 10)) return std::nullopt;
    return *kb * 1024;
  }
  return std::nullopt;
}

std::optional<ProcessMemory> parse_process_memory(std::string_view text) {
  const std::optional<std::uint64_t> rss = parse_kb_field(text, "Rss");
  const std::optional<std::uint64_t> pss = parse_kb_field(text, "Pss");
  if (!rss || !pss) return std::nullopt;
  const std::optional<std::uint64_t> anon = parse_kb_field(text, "Pss_Anon");
  const std::optional<std::uint64_t> shmem = parse_kb_field(text, "Pss_Shmem");
  return ProcessMemory{*rss,
                       *pss,
                       parse_kb_field(text, "Private_Dirty").value_or(0),
                       anon && shmem ? *anon + *shmem : *pss,
                       anon,
                       parse_kb_field(text, "Pss_File")};
}

std::optional<ProcessMemory> read_process_memory(pid_t pid) {
  std::string text;
  if (!read_proc_file(pid, "smaps_rollup", text)) return std::nullopt;
  return parse_process_memory(text);
}

namespace {

// Sums the Private_Dirty lines of private mappings, one smaps line at a time.
class PrivateAnonymousSum {
 public:
  void line(std::string_view line) {
    // A mapping starts with "start-end perms offset dev inode [path]"; its fields follow as
    // "Key:   value kB", whose first word ends in ':' and holds no '-'.
    const std::size_t blank = line.find(' ');
    if (blank != std::string_view::npos && blank > 0 && line[blank - 1] != ':' &&
        line.substr(0, blank).find('-') != std::string_view::npos) {
      const std::string_view perms = line.substr(blank + 1, 4);
      counted_ = perms.size() == 4 && perms[3] == 'p';
      any_ = true;
      return;
    }
    if (counted_ && line.substr(0, 14) == "Private_Dirty:") {
      if (const std::optional<std::uint64_t> bytes = parse_kb_field(line, "Private_Dirty")) {
        total_ += *bytes;
      }
    }
  }
  std::optional<std::uint64_t> total() const {
    if (!any_) return std::nullopt;
    return total_;
  }

 private:
  std::uint64_t total_ = 0;
  bool any_ = false;
  bool counted_ = false;  // the mapping the lines belong to is private
};

}  // namespace

std::optional<std::uint64_t> parse_private_anonymous(std::string_view text) {
  PrivateAnonymousSum sum;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    sum.line(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  }
  return sum.total();
}

std::optional<std::uint64_t> read_own_private_anonymous(bool yield_between_reads) {
  // Streamed through a buffer on the stack: a worker measures itself with this, and a heap
  // buffer the size of smaps (hundreds of KiB in a large program) would stay in its heap.
  int fd = posix::open_read("/proc/thread-self/smaps");
  if (fd < 0) fd = posix::open_read("/proc/self/smaps");
  if (fd < 0) return std::nullopt;
  PrivateAnonymousSum sum;
  char buffer[8192];
  std::size_t held = 0;   // bytes of a line not yet ended, at the buffer's start
  bool skipping = false;  // the rest of a line longer than the buffer
  for (;;) {
    const ssize_t got = posix::read_full(fd, buffer + held, sizeof buffer - held);
    if (got <= 0) break;
    if (yield_between_reads) posix::yield_cpu();
    std::string_view text(buffer, held + static_cast<std::size_t>(got));
    for (std::size_t end = text.find('\n'); end != std::string_view::npos; end = text.find('\n')) {
      if (!skipping) sum.line(text.substr(0, end));
      skipping = false;
      text.remove_prefix(end + 1);
    }
    if (text.size() == sizeof buffer) {  // one line fills the buffer: its start is enough
      if (!skipping) sum.line(text);
      skipping = true;
      text = std::string_view(buffer, 0);
    }
    std::memmove(buffer, text.data(), text.size());
    held = text.size();
  }
  posix::close_fd(fd);
  return sum.total();
}

std::optional<std::uint64_t> read_own_anonymous_resident() {
  std::string text;
  if (!read_own_proc_file("status", text)) return std::nullopt;
  return parse_kb_field(text, "RssAnon");
}

std::optional<ResidentPeak> read_own_resident_peak() {
  std::string text;
  if (!read_own_proc_file("status", text)) return std::nullopt;
  const std::optional<std::uint64_t> now = parse_kb_field(text, "VmRSS");
  const std::optional<std::uint64_t> peak = parse_kb_field(text, "VmHWM");
  if (!now || !peak) return std::nullopt;
  return ResidentPeak{*now, std::max(*now, *peak)};
}

std::optional<CpuTimes> parse_cpu_times(std::string_view text) {
  // "cpu  user nice system idle iowait irq softirq steal guest guest_nice"; guest time is
  // already inside user and nice, so only the first eight count.
  if (text.substr(0, 4) != "cpu ") return std::nullopt;
  text.remove_prefix(4);
  std::uint64_t v[8] = {};
  int n = 0;
  for (; n < 8; ++n) {
    std::size_t at = 0;
    while (at < text.size() && text[at] == ' ') ++at;
    const auto [end, ec] = std::from_chars(text.data() + at, text.data() + text.size(), v[n]);
    if (ec != std::errc() || end == text.data() + at) break;
    text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  }
  if (n < 5) return std::nullopt;
  CpuTimes t;
  for (int i = 0; i < n; ++i) t.total += v[i];
  t.idle = v[3];
  t.iowait = v[4];
  return t;
}

std::optional<CpuTimes> read_cpu_times() {
  std::string text;
  if (!posix::read_file("/proc/stat", text)) return std::nullopt;
  return parse_cpu_times(text);
}

std::optional<std::uint64_t> read_meminfo(std::string_view key, const std::string& root) {
  std::string text;
  if (!posix::read_file((root + "/proc/meminfo").c_str(), text)) return std::nullopt;
  return parse_kb_field(text, key);
}

std::size_t count_threads(pid_t pid) noexcept {
  try {
    std::string text;
    if (!read_proc_file(pid, "stat", text)) return 0;
    const std::size_t close = text.rfind(')');
    if (close == std::string::npos) return 0;
    // Fields after "(comm)": state is field 3, num_threads is field 20.
    std::size_t pos = close + 2;
    for (int field = 3; field < 20; ++field) {
      pos = text.find(' ', pos);
      if (pos == std::string::npos) return 0;
      ++pos;
    }
    return static_cast<std::size_t>(leading_number(std::string_view(text).substr(pos)).value_or(0));
  } catch (...) {
    return 0;
  }
}

namespace {

// `pid` and its descendants into `out`, parents before children; with `parents`, each one's
// parent beside it (0 for `pid`).
void walk_tree(pid_t pid, std::vector<pid_t>& out, std::vector<pid_t>* parents) {
  out.assign(1, pid);
  if (parents != nullptr) parents->assign(1, 0);
  std::string children;
  for (std::size_t next = 0; next < out.size(); ++next) {
    const pid_t parent = out[next];
    const std::string task_dir = fmt::format("/proc/{}/task", parent);
    for (const std::string& tid : posix::list_directory(task_dir.c_str())) {
      if (!posix::read_file((task_dir + "/" + tid + "/children").c_str(), children)) continue;
      std::string_view rest = children;
      while (const std::optional<std::uint64_t> child = leading_number(rest)) {
        out.push_back(static_cast<pid_t>(*child));
        if (parents != nullptr) parents->push_back(parent);
        const std::size_t space =
            rest.find_first_not_of("0123456789", rest.find_first_of("0123456789"));
        if (space == std::string_view::npos) break;
        rest.remove_prefix(space);
      }
    }
  }
}

}  // namespace

std::vector<pid_t> process_tree(pid_t pid) {
  std::vector<pid_t> out;
  walk_tree(pid, out, nullptr);
  return out;
}

std::optional<ProcessPages> parse_statm(std::string_view text) {
  std::uint64_t fields[3] = {};
  for (std::uint64_t& field : fields) {
    std::size_t at = 0;
    while (at < text.size() && text[at] == ' ') ++at;
    const auto [end, ec] = std::from_chars(text.data() + at, text.data() + text.size(), field);
    if (ec != std::errc() || end == text.data() + at) return std::nullopt;
    text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  }
  if (fields[2] > fields[1]) return std::nullopt;
  return ProcessPages{fields[0], fields[1], fields[2]};
}

namespace {

// Reads a hexadecimal or decimal number at the start of `text` and removes it; false when there
// is none.
bool take_number(std::string_view& text, std::uint64_t& value, int base) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc() || end == text.data()) return false;
  text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  return true;
}

// Removes `c` from the start of `text`; false when it is not there.
bool take_char(std::string_view& text, char c) {
  if (text.empty() || text.front() != c) return false;
  text.remove_prefix(1);
  return true;
}

bool is_shmem_name(std::string_view name) {
  for (const std::string_view prefix :
       {std::string_view("/memfd:"), std::string_view("/dev/shm/"), std::string_view("/run/shm/"),
        std::string_view("/SYSV"), std::string_view("/dev/zero")}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

// "start-end perms offset major:minor inode   path" (the path may be missing).
std::optional<ShmemMapping> parse_maps_line(std::string_view line) {
  ShmemMapping m;
  std::uint64_t offset = 0;
  std::uint64_t major = 0;
  std::uint64_t minor = 0;
  if (!take_number(line, m.start, 16) || !take_char(line, '-') || !take_number(line, m.end, 16) ||
      !take_char(line, ' ') || line.size() < 5 || line[4] != ' ') {
    return std::nullopt;
  }
  const bool shared = line[3] == 's';
  line.remove_prefix(5);
  if (!take_number(line, offset, 16) || !take_char(line, ' ') || !take_number(line, major, 16) ||
      !take_char(line, ':') || !take_number(line, minor, 16) || !take_char(line, ' ') ||
      !take_number(line, m.inode, 10) || major > 0xffffffffu || minor > 0xffffffffu) {
    return std::nullopt;
  }
  const std::size_t path = line.find_first_not_of(' ');
  if (!shared || m.end <= m.start || path == std::string_view::npos) return std::nullopt;
  m.name = line.substr(path);
  if (!is_shmem_name(m.name)) return std::nullopt;
  m.device = (major << 32) | minor;
  return m;
}

double thread_cpu_seconds() noexcept {
  timespec t{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return 0;
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace

std::vector<ShmemMapping> parse_shmem_mappings(std::string_view text) {
  std::vector<ShmemMapping> out;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    if (std::optional<ShmemMapping> m = parse_maps_line(text.substr(0, end))) out.push_back(*m);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  }
  return out;
}

TreeMemoryReader::TreeMemoryReader(AnonymousCount anonymous, std::string ring_prefix)
    : anonymous_(anonymous),
      ring_prefix_(std::move(ring_prefix)),
      page_bytes_(static_cast<std::uint64_t>(std::max(1L, ::sysconf(_SC_PAGESIZE)))) {}

std::optional<TreeMemory> TreeMemoryReader::read(pid_t root, bool exact) {
  if (root == 0) root = ::getpid();
  if (anonymous_ == AnonymousCount::kResident) exact = false;
  if (anonymous_ == AnonymousCount::kProportional) exact = true;
  for (int attempt = 0; attempt < 3; ++attempt) {
    TreeMemory m;
    walk_tree(root, tree_, &parents_);
    bool retry = false;
    if (!read_pass(root, exact, m, retry)) return std::nullopt;
    if (retry) continue;
    // Only shares move when a process is forked or reaped: a count of each process's resident
    // pages stands whatever happened to the others meanwhile.
    if (!exact || process_tree(root) == tree_) {
      if (exact) {
        for (Process& p : processes_) {
          if (p.seen == pass_) p.baseline = p.candidate;
        }
        last_pss_shmem_ = pending_pss_shmem_;
      }
      m.exact = exact;
      return m;
    }
  }
  return std::nullopt;
}

TreeMemoryReader::Process& TreeMemoryReader::process(pid_t pid, std::uint64_t size_pages) {
  auto it = std::find_if(processes_.begin(), processes_.end(),
                         [&](const Process& p) { return p.pid == pid; });
  if (it == processes_.end()) {
    Process fresh;
    fresh.pid = pid;
    fresh.passes = kMapsKeptPasses;  // never read
    it = processes_.insert(processes_.end(), std::move(fresh));
  }
  Process& p = *it;
  if (p.stale || p.size_pages != size_pages || ++p.passes >= kMapsKeptPasses) {
    p.mappings.clear();
    p.size_pages = size_pages;
    p.passes = 0;
    p.stale = false;
    if (posix::read_file(fmt::format("/proc/{}/maps", pid).c_str(), text_)) {
      for (const ShmemMapping& m : parse_shmem_mappings(text_)) {
        p.mappings.push_back(
            {m.device, m.inode, m.start, m.end,
             !ring_prefix_.empty() && m.name.substr(0, ring_prefix_.size()) == ring_prefix_});
      }
    }
  }
  return p;
}

bool TreeMemoryReader::read_pass(pid_t root, bool exact, TreeMemory& out, bool& retry) {
  const std::vector<pid_t>& tree = tree_;
  ++pass_;
  // Forget the processes that left the tree (the objects below point into processes_, which
  // stays as it is from the first process() until they are measured).
  processes_.erase(std::remove_if(processes_.begin(), processes_.end(),
                                  [&](const Process& p) {
                                    return std::find(tree.begin(), tree.end(), p.pid) == tree.end();
                                  }),
                   processes_.end());
  processes_.reserve(tree.size());
  residents_.assign(tree.size(), 0);
  std::uint64_t pss_shmem = 0;
  for (std::size_t i = 0; i < tree.size(); ++i) {
    const pid_t pid = tree[i];
    if (!posix::read_file(fmt::format("/proc/{}/statm", pid).c_str(), text_)) {
      if (pid == root) return false;  // no such process
      continue;                       // a descendant gone meanwhile
    }
    const ProcessPages pages = parse_statm(text_).value_or(ProcessPages{});
    const std::uint64_t resident = pages.anonymous() * page_bytes_;
    residents_[i] = resident;
    Process& p = process(pid, pages.size);
    p.seen = pass_;
    if (!p.inherited) {
      // Seen for the first time: a child forked from a process of the tree shares its parent's
      // anonymous pages (RssAnon copies the parent's at fork()); a process not forked from one
      // (the root) inherits nothing here.
      const auto parent =
          std::find(tree.begin(), tree.begin() + static_cast<std::ptrdiff_t>(i), parents_[i]);
      p.inherited = parent == tree.begin() + static_cast<std::ptrdiff_t>(i)
                        ? 0
                        : residents_[static_cast<std::size_t>(parent - tree.begin())];
    }
    std::uint64_t anon = resident;
    if (exact) {
      p.candidate = Baseline{resident, resident, true};
      if (posix::read_file(fmt::format("/proc/{}/smaps_rollup", pid).c_str(), text_)) {
        // Without Pss_Anon (kernels before 5.9), or for a process whose memory is being torn
        // down, statm's figure stands.
        if (const std::optional<std::uint64_t> pss = parse_kb_field(text_, "Pss_Anon")) {
          anon = std::min(*pss, resident);
          p.candidate.proportional = anon;
        }
        out.file_pss_bytes += parse_kb_field(text_, "Pss_File").value_or(0);
        pss_shmem += parse_kb_field(text_, "Pss_Shmem").value_or(0);
      }
    } else if (anonymous_ == AnonymousCount::kTracked && p.baseline.valid) {
      // The share at the last exact pass, moved by what the resident count moved since: pages
      // a process gains are its own (a fault, or a copy-on-write copy replacing a shared page,
      // which RssAnon does not see: the estimate can only be low by the shared pages' shares).
      const std::int64_t moved =
          static_cast<std::int64_t>(resident) - static_cast<std::int64_t>(p.baseline.resident);
      const std::int64_t estimate = static_cast<std::int64_t>(p.baseline.proportional) + moved;
      anon = static_cast<std::uint64_t>(
          std::clamp<std::int64_t>(estimate, 0, static_cast<std::int64_t>(resident)));
    } else if (anonymous_ == AnonymousCount::kTracked) {
      // Forked since the last exact pass: what it has beyond what it inherited, which its
      // parent's figure already holds. Pages it copies on write are not seen until the next
      // exact pass (RssAnon does not change when a shared page is replaced by a private copy).
      anon = resident > *p.inherited ? resident - *p.inherited : 0;
    }
    out.anonymous_bytes += anon;
    if (pid == root) out.root_anonymous_bytes = anon;
    ++out.processes;
  }
  objects_.clear();
  for (Process& p : processes_) {
    if (p.seen != pass_) continue;
    for (const Mapping& m : p.mappings) {
      const bool known = std::any_of(objects_.begin(), objects_.end(), [&](const Object& o) {
        return o.mapping->device == m.device && o.mapping->inode == m.inode;
      });
      if (!known) objects_.push_back({&m, &p});
    }
  }
  bool all_ring = true;
  for (const Object& o : objects_) {
    all_ring = all_ring && o.mapping->ring;
    bool gone = false;
    const std::optional<std::uint64_t> bytes = object_bytes(o, gone);
    if (gone) {  // the process's mappings changed since its maps were read: read them again
      o.process->stale = true;
      retry = true;
    }
    if (!bytes) {
      ++out.unmeasured_objects;
      continue;
    }
    ++out.shared_objects;
    out.shared_bytes += *bytes;
    if (o.mapping->ring) out.ring_bytes += *bytes;
  }
  pending_pss_shmem_ = pss_shmem;
  if (out.unmeasured_objects > 0 && anonymous_ != AnonymousCount::kResident) {
    // Without map_files (no privilege): each page some process maps, once, as the processes'
    // shares of it; right because an exact pass counts only if the tree did not change.
    out.shared_from_pss = true;
    out.shared_bytes = exact ? pss_shmem : last_pss_shmem_;
    out.ring_bytes = all_ring ? out.shared_bytes : 0;
  }
  return true;
}

std::optional<std::uint64_t> TreeMemoryReader::object_bytes(const Object& o, bool& gone) {
  const Mapping& m = *o.mapping;
  struct ::stat st {};
  const std::string path =
      fmt::format("/proc/{}/map_files/{:x}-{:x}", o.process->pid, m.start, m.end);
  if (posix::stat_path(path.c_str(), st)) {
    if (static_cast<std::uint64_t>(st.st_ino) == m.inode) {
      return static_cast<std::uint64_t>(st.st_blocks) * 512;
    }
    gone = true;  // another file is mapped there now
    return std::nullopt;
  }
  if (errno == ENOENT) {
    gone = true;  // nothing is mapped there now (or the process is gone)
    return std::nullopt;
  }
  return std::nullopt;  // EPERM: map_files needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE
}

namespace {

// Held by a sampler thread through each pass, and by fork() (pthread_atfork) while it copies the
// process: a child is then never forked while a pass holds an allocator's lock. glibc's malloc
// takes its own locks around fork(), but other allocators (ASan's, whose stack depot's spin lock
// a worker forked mid-pass waited on forever) do not.
pthread_mutex_t g_pass_lock = PTHREAD_MUTEX_INITIALIZER;

void lock_passes() noexcept { (void)::pthread_mutex_lock(&g_pass_lock); }
void unlock_passes() noexcept { (void)::pthread_mutex_unlock(&g_pass_lock); }

void hold_passes_across_fork() {
  static std::once_flag registered;
  std::call_once(registered, [] {
    // In the child the forking thread, which took the lock, is the one left: it unlocks it.
    (void)::pthread_atfork(lock_passes, unlock_passes, unlock_passes);
  });
}

}  // namespace

TreeMemorySampler::TreeMemorySampler(Options options)
    : options_(std::move(options)),
      started_(std::chrono::steady_clock::now()),
      reader_(options_.anonymous, options_.ring_prefix) {
  report_.interval = options_.interval;
  hold_passes_across_fork();
  first_exact_cpu_ = pass(true);
  thread_ = std::thread([this] { run(); });
}

TreeMemorySampler::~TreeMemorySampler() { (void)stop(); }

double TreeMemorySampler::pass(bool exact) {
  const double cpu_before = thread_cpu_seconds();
  const std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
  std::optional<TreeMemory> m;
  try {
    m = reader_.read(options_.root, exact);
  } catch (const std::exception&) {  // out of memory for a path or a buffer: a skipped pass
  }
  const double cpu = thread_cpu_seconds() - cpu_before;
  const std::lock_guard<std::mutex> lock(mutex_);
  report_.cpu_seconds += cpu;
  report_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  if (!m) {
    ++report_.skipped;
    return cpu;
  }
  if (m->exact) ++report_.exact_passes;
  if (report_.passes++ == 0 || m->total_bytes() > report_.peak.total_bytes()) {
    report_.peak = *m;
    report_.peak_at = at;
    report_.peak_after_seconds = std::chrono::duration<double>(at - started_).count();
  }
  report_.ring_peak_bytes = std::max(report_.ring_peak_bytes, m->ring_bytes);
  return cpu;
}

void TreeMemorySampler::run() {
  using Clock = std::chrono::steady_clock;
  const double share = std::max(options_.max_cpu_share, 1e-6);
  // With kTracked each kind of pass has half the budget: an exact pass that took c seconds of
  // CPU waits c / (share / 2) before the next exact one, a cheap one the same before the next.
  const double half = options_.anonymous == AnonymousCount::kTracked ? share / 2 : share;
  auto after = [](double cpu, double budget) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cpu / budget));
  };
  Clock::time_point next_exact = Clock::now() + after(first_exact_cpu_, half);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    const Clock::time_point now = Clock::now();
    const bool exact = options_.anonymous != AnonymousCount::kTracked || now >= next_exact;
    lock_passes();
    const double cpu = pass(exact);
    unlock_passes();
    Clock::duration rest = std::max<Clock::duration>(options_.interval, after(cpu, half));
    if (exact && options_.anonymous == AnonymousCount::kTracked) {
      next_exact = now + after(cpu, half);
      rest = options_.interval;
    }
    lock.lock();
    wake_.wait_for(lock, rest, [this] { return stopping_; });
  }
}

TreeMemoryReport TreeMemorySampler::stop() {
  if (!stopped_) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
    pass(true);
    stopped_ = true;
  }
  return report();
}

TreeMemoryReport TreeMemorySampler::report() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return report_;
}

}  // namespace stoker::detail
