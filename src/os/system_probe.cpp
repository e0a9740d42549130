#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>

#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

#include "os/cgroup.hpp"
#include "os/posix.hpp"
#include "os/system_probe.hpp"
#include "os/topology_probe.hpp"
#include "stoker/system_probe.hpp"

namespace stoker {
namespace {

// "MemAvailable:   23776912 kB" -> bytes.
std::optional<std::uint64_t> meminfo_value(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.compare(0, key.size() + 1, key + ":") != 0) continue;
    char* end = nullptr;
    const unsigned long long kb = std::strtoull(line.c_str() + key.size() + 1, &end, 10);
    if (end == line.c_str() + key.size() + 1) return std::nullopt;
    return static_cast<std::uint64_t>(kb) * 1024;
  }
  return std::nullopt;
}

bool read(const std::string& path, std::string& out) {
  return detail::posix::read_file(path.c_str(), out);
}

// A number in a cgroup file; empty for "max" and for v1's "no limit" (a value near 2^63).
std::optional<std::uint64_t> limit_value(const std::string& text) {
  if (text.compare(0, 3, "max") == 0) return std::nullopt;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || v >= (1ULL << 60)) return std::nullopt;
  return static_cast<std::uint64_t>(v);
}

void probe_memory(const ProbeOptions& o, SystemInfo& s) {
  std::string text;
  const std::string meminfo = o.root + "/proc/meminfo";
  if (read(meminfo, text)) {
    auto set = [&](Probed<std::uint64_t>& field, const char* key) {
      if (const auto v = meminfo_value(text, key)) {
        field.value = v;
        field.source = fmt::format("{} {}", meminfo, key);
      }
    };
    set(s.mem_total, "MemTotal");
    set(s.mem_available, "MemAvailable");
    set(s.swap_total, "SwapTotal");
    const auto free = meminfo_value(text, "SwapFree");
    if (s.swap_total.value && free) {
      s.swap_used.value = *s.swap_total.value - std::min(*s.swap_total.value, *free);
      s.swap_used.source = fmt::format("{} SwapTotal - SwapFree", meminfo);
    }
  }
  const detail::MemoryCgroup cg = detail::find_memory_cgroup(o.root);
  if (cg.version == 0) return;
  const std::string limit_file =
      cg.directory + (cg.version == 2 ? "/memory.max" : "/memory.limit_in_bytes");
  const std::string usage_file =
      cg.directory + (cg.version == 2 ? "/memory.current" : "/memory.usage_in_bytes");
  if (read(limit_file, text)) {
    s.cgroup_limit.value = limit_value(text);
    s.cgroup_limit.source = s.cgroup_limit.value ? limit_file : limit_file + " (no limit)";
  }
  if (read(usage_file, text)) {
    s.cgroup_usage.value = limit_value(text);
    if (s.cgroup_usage.value) s.cgroup_usage.source = usage_file;
  }
}

void probe_cpu_quota(const ProbeOptions& o, SystemInfo& s) {
  std::string text;
  // v2: "<quota> <period>" or "max <period>" in cpu.max.
  if (const auto dir = detail::find_cgroup_directory(o.root, "cpu", "cpu.max")) {
    const std::string file = *dir + "/cpu.max";
    if (read(file, text)) {
      std::istringstream in(text);
      std::string quota;
      double period = 0;
      in >> quota >> period;
      if (quota != "max" && period > 0)
        s.cpu_quota.value = std::strtod(quota.c_str(), nullptr) / period;
      s.cpu_quota.source = s.cpu_quota.value ? file : file + " (no quota)";
      return;
    }
  }
  // v1: cfs_quota_us / cfs_period_us, -1 for none.
  if (const auto dir = detail::find_cgroup_directory(o.root, "cpu", "cpu.cfs_quota_us")) {
    std::string period_text;
    if (read(*dir + "/cpu.cfs_quota_us", text) && read(*dir + "/cpu.cfs_period_us", period_text)) {
      const double quota = std::strtod(text.c_str(), nullptr);
      const double period = std::strtod(period_text.c_str(), nullptr);
      if (quota > 0 && period > 0) s.cpu_quota.value = quota / period;
      s.cpu_quota.source = *dir + "/cpu.cfs_quota_us" + (s.cpu_quota.value ? "" : " (no quota)");
    }
  }
}

void probe_limits(const ProbeOptions& o, SystemInfo& s) {
  struct statvfs fs;
  const std::string shm = o.root + "/dev/shm";
  if (detail::posix::stat_vfs(shm.c_str(), fs)) {
    s.shm_size.value = static_cast<std::uint64_t>(fs.f_blocks) * fs.f_frsize;
    s.shm_free.value = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
    s.shm_size.source = s.shm_free.source = "statvfs(" + shm + ")";
  }
  if (const auto memlock = detail::posix::resource_limit(RLIMIT_MEMLOCK)) {
    if (!memlock->unlimited) s.memlock_limit.value = memlock->soft;
    s.memlock_limit.source =
        memlock->unlimited ? "getrlimit(RLIMIT_MEMLOCK) (unlimited)" : "getrlimit(RLIMIT_MEMLOCK)";
  }
  if (const auto nofile = detail::posix::resource_limit(RLIMIT_NOFILE)) {
    s.nofile_limit.value = nofile->unlimited ? ~std::uint64_t{0} : nofile->soft;
    s.nofile_limit.source = "getrlimit(RLIMIT_NOFILE)";
  }
}

void probe_storage(const ProbeOptions& o, SystemInfo& s) {
  struct stat st;
  if (!detail::posix::stat_path(o.path.c_str(), st)) return;
  const unsigned major_id = major(st.st_dev);
  const unsigned minor_id = minor(st.st_dev);
  // The block device, or for a partition its disk (one level up), says whether it rotates.
  const std::string dev = fmt::format("{}/sys/dev/block/{}:{}", o.root, major_id, minor_id);
  std::string text;
  for (const std::string& file : {dev + "/queue/rotational", dev + "/../queue/rotational"}) {
    if (read(file, text)) {
      s.rotational.value = text.compare(0, 1, "1") == 0;
      s.rotational.source = file;
      break;
    }
  }
  if (!s.rotational.known() && major_id == 0) {
    s.rotational.source =
        fmt::format("{} is not on a block device (tmpfs, overlay, network)", o.path);
  }
  struct statfs fs;
  if (detail::posix::stat_filesystem(o.path.c_str(), fs)) {
    // NFS, SMB/CIFS (three magics), FUSE (sshfs, s3fs, gcsfuse...), Ceph, 9p, AFS, Lustre.
    constexpr long kNetwork[] = {0x6969,
                                 0x517B,
                                 static_cast<long>(0xFF534D42),
                                 static_cast<long>(0xFE534D42),
                                 0x65735546,
                                 0x00C36400,
                                 0x01021997,
                                 0x5346414F,
                                 0x0BD00BD0};
    bool network = false;
    for (const long magic : kNetwork) network = network || static_cast<long>(fs.f_type) == magic;
    s.network_filesystem.value = network;
    s.network_filesystem.source =
        fmt::format("statfs({}).f_type = {:#x}", o.path, static_cast<unsigned long>(fs.f_type));
  }
}

}  // namespace

std::optional<std::uint64_t> SystemInfo::usable_memory() const noexcept {
  std::optional<std::uint64_t> usable = mem_available.value;
  if (cgroup_limit.value) {
    const std::uint64_t used = cgroup_usage.value.value_or(0);
    const std::uint64_t left = *cgroup_limit.value > used ? *cgroup_limit.value - used : 0;
    usable = usable ? std::min(*usable, left) : left;
  }
  return usable;
}

namespace detail {

SystemInfo probe_memory_limits(const ProbeOptions& options) {
  SystemInfo s;
  probe_memory(options, s);
  return s;
}

}  // namespace detail

SystemInfo probe_system(const ProbeOptions& options) {
  SystemInfo s;
  probe_memory(options, s);
  probe_cpu_quota(options, s);
  probe_limits(options, s);
  probe_storage(options, s);
  const detail::TopologyCounts t = detail::count_topology();
  s.physical_cores.value = t.physical_cores;
  s.logical_cpus.value = t.logical_cpus;
  s.numa_nodes.value = t.numa_nodes;
  s.physical_cores.source = s.logical_cpus.source = s.numa_nodes.source = t.source;
  if (t.physical_cores == 0) s.physical_cores.value.reset();
  if (t.numa_nodes == 0) s.numa_nodes.value.reset();
  return s;
}

}  // namespace stoker
