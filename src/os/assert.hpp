// STOKER_ASSERT(condition, rule): an executable invariant. On in debug builds and in the
// sanitizer build (STOKER_ASSERTIONS, set by STOKER_SANITIZE), compiled out otherwise. A failed
// assertion writes the rule it names, the condition and where, with write(2) (safe in a worker
// process and in a signal-unsafe moment), then aborts: a worker's abort reaches the main process
// as a crash with SIGABRT.
#pragma once

namespace stoker::detail {

[[noreturn]] void assertion_failed(const char* rule, const char* condition, const char* file,
                                   int line) noexcept;

#if defined(STOKER_ASSERTIONS) || !defined(NDEBUG)
inline constexpr bool kAssertionsEnabled = true;
#else
inline constexpr bool kAssertionsEnabled = false;
#endif

}  // namespace stoker::detail

#if defined(STOKER_ASSERTIONS) || !defined(NDEBUG)
#define STOKER_ASSERT(condition, rule) \
  ((condition) ? static_cast<void>(0)  \
               : ::stoker::detail::assertion_failed(rule, #condition, __FILE__, __LINE__))
#else
#define STOKER_ASSERT(condition, rule) static_cast<void>(sizeof(!(condition)))
#endif
