// The text of stoker's worker errors (WorkerCrashed, WorkerException, LoaderTimeout), and the
// facts it is built from: signal names, the likely cause of a death, the demangled type of an
// in-flight exception and the form in which a worker sends it across the process boundary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "stoker/errors.hpp"

namespace stoker::detail {

std::string describe_crash(const WorkerCrashed::Details& details);
std::string describe_exception(const WorkerException::Details& details);
std::string describe_timeout(const LoaderTimeout::Details& details);

// "SIGKILL"; "signal 77" for an unknown number.
std::string signal_name(int signal);
// The likely cause of a worker's death and what to do, from the signal or exit code alone.
std::string likely_cause(int signal, int exit_code);

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
