// The text of stoker's worker errors, and the facts it is built from: signal names, the likely
// cause of a death, the demangled type of an in-flight exception.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "os/cgroup.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {

std::string describe_crash(const WorkerCrashed::Details& details);
std::string describe_exception(const WorkerException::Details& details);
std::string describe_timeout(const LoaderTimeout::Details& details);

// "SIGKILL"; "signal 77" for an unknown number.
std::string signal_name(int signal);
// The likely cause of a worker's death and what to do, from the signal or exit code alone.
std::string likely_cause(int signal, int exit_code);

// The cause of a SIGKILL, from the OOM-kill counter read when the worker started and after it
// died (either may be missing when no counter is readable).
// `estimate` is the loader's memory estimate, appended when the OOM killer is to blame.
std::string sigkill_cause(const std::optional<OomCount>& before,
                          const std::optional<OomCount>& after, const std::string& estimate = "");
// The cause of a SIGBUS, with the ring's committed bytes and the memory the system has left.
std::string sigbus_cause(std::size_t ring_committed, std::optional<std::uint64_t> mem_available);
// MemAvailable from /proc/meminfo, in bytes.
std::optional<std::uint64_t> mem_available_bytes(const std::string& root = "");

// Inside a catch block: the demangled type of the exception being handled.
std::string current_exception_type_name();

// Inside a catch block: the exception being handled, as the text that crosses the process
// boundary. `message` is its what() ("" when it is not a std::exception); `is_collate_error`
// tells a CollateError. Never throws (out of memory leaves the fields as far as they got).
struct CaughtException {
  std::string type_name;
  std::string message;
  bool is_collate_error = false;
};
CaughtException describe_current_exception() noexcept;

}  // namespace stoker::detail
