// Busy-waiting, briefly: the first microseconds of a wait are spent polling a condition, because
// a cross-process wake-up costs ~20 us on these machines and a spin check ~0.6 us. Callers then
// sleep (see Doorbell) so that a waiting process never steals a core for long.
#pragma once

#include <chrono>

namespace stoker::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls `ready` until it returns true (returns true) or `budget` has passed (returns false).
template <class Ready>
bool spin_until(Ready&& ready, std::chrono::nanoseconds budget) {
  const auto start = std::chrono::steady_clock::now();
  for (unsigned i = 0;; ++i) {
    if (ready()) return true;
    cpu_relax();
    if ((i & 31U) == 31U && std::chrono::steady_clock::now() - start > budget) return false;
  }
}

}  // namespace stoker::detail
