// stoker-tune's figures about the machine: usable cores, CPU time and swap in use, read through
// the library's /proc module (src/os/proc.hpp); and the progress bar.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "os/proc.hpp"
#include "tune/tune.hpp"

namespace stoker::tune {

std::size_t usable_cores(const stoker::SystemInfo& system) {
  double cores = static_cast<double>(system.logical_cpus.value.value_or(0));
  if (cores <= 0) cores = static_cast<double>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  if (system.cpu_quota.value && *system.cpu_quota.value > 0) {
    cores = std::min(cores, std::ceil(*system.cpu_quota.value));
  }
  return static_cast<std::size_t>(std::max(1.0, cores));
}

CpuTimes cpu_times() {
  // total: user nice system idle iowait irq softirq steal (guest time is inside user already)
  const detail::CpuTimes t = detail::read_cpu_times().value_or(detail::CpuTimes{});
  return CpuTimes{t.total - t.idle - t.iowait, t.iowait, t.total};
}

std::int64_t swap_used_bytes() {
  return static_cast<std::int64_t>(detail::read_meminfo("SwapTotal").value_or(0)) -
         static_cast<std::int64_t>(detail::read_meminfo("SwapFree").value_or(0));
}

Progress::Progress() : enabled_(isatty(STDERR_FILENO) == 1) {}

void Progress::show(const std::string& label, double fraction) {
  if (!enabled_) return;
  const Clock::time_point now = Clock::now();
  if (now < next_) return;
  next_ = now + std::chrono::milliseconds(100);
  const int width = 24;
  const int filled = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * width);
  std::fprintf(stderr, "\r\033[K%s [%s%s] %3.0f%%", label.c_str(),
               std::string(static_cast<std::size_t>(filled), '#').c_str(),
               std::string(static_cast<std::size_t>(width - filled), '.').c_str(),
               std::clamp(fraction, 0.0, 1.0) * 100);
  std::fflush(stderr);
}

void Progress::clear() {
  if (!enabled_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  next_ = {};
}

}  // namespace stoker::tune
