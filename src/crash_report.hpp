// The text of stoker's worker errors, and the facts it is built from: signal names, the likely
// cause of a death, the demangled type of an in-flight exception.
#pragma once

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

}  // namespace stoker::detail
