#include "os/proc.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
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
  return ProcessMemory{*rss, *pss, parse_kb_field(text, "Private_Dirty").value_or(0),
                       anon && shmem ? *anon + *shmem : *pss};
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

std::optional<std::uint64_t> read_own_private_anonymous() {
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

std::vector<pid_t> process_tree(pid_t pid) {
  std::vector<pid_t> out{pid};
  for (std::size_t next = 0; next < out.size(); ++next) {
    const std::string task_dir = fmt::format("/proc/{}/task", out[next]);
    for (const std::string& tid : posix::list_directory(task_dir.c_str())) {
      std::string children;
      if (!posix::read_file((task_dir + "/" + tid + "/children").c_str(), children)) continue;
      std::string_view rest = children;
      while (const std::optional<std::uint64_t> child = leading_number(rest)) {
        out.push_back(static_cast<pid_t>(*child));
        const std::size_t space =
            rest.find_first_not_of("0123456789", rest.find_first_of("0123456789"));
        if (space == std::string_view::npos) break;
        rest.remove_prefix(space);
      }
    }
  }
  return out;
}

}  // namespace stoker::detail
