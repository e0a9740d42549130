#include "data/error_text.hpp"

#include <cxxabi.h>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <typeinfo>

#include <fmt/format.h>


namespace stoker::detail {
namespace {

std::string at_what(const std::optional<std::size_t>& sample,
                    const std::optional<std::uint64_t>& batch) {
  if (sample && batch) return fmt::format(" while loading sample {} of batch {}", *sample, *batch);
  if (sample) return fmt::format(" while loading sample {}", *sample);
  if (batch) return fmt::format(" while loading batch {}", *batch);
  return " while idle";
}

}  // namespace

std::string signal_name(int signal) {
  if (const char* abbrev = sigabbrev_np(signal)) return std::string("SIG") + abbrev;
  return fmt::format("signal {}", signal);
}

std::string likely_cause(int signal, int exit_code) {
  switch (signal) {
    case 0:
      return fmt::format(
          "user code in the worker called exit({0}) or _exit({0}); a worker must return from "
          "get() or throw, never exit",
          exit_code);
    case SIGKILL:
      return "something outside the worker killed it; most often the kernel's OOM killer (see "
             "`dmesg`): peak memory is about (num_workers + 1) x batch_size x bytes per sample, "
             "so lower num_workers or batch_size";
    case SIGBUS:
      return "a memory access could not be backed: shared memory is exhausted, or a "
             "memory-mapped file the dataset reads was truncated; free memory or lower "
             "batch_size, num_workers or prefetch_factor";
    case SIGSEGV:
    case SIGABRT:
    case SIGFPE:
    case SIGILL:
      return "a crash in user code (the dataset's get(), the collate function or worker_init) "
             "at that sample; reproduce it with num_workers = 0 under a debugger";
    case SIGTERM:
    case SIGINT:
    case SIGHUP:
    case SIGQUIT:
      return "another process sent it this signal; the loader itself never does while a batch "
             "is being loaded";
    default:
      return "the worker received a signal it does not handle";
  }
}

std::string describe_crash(const WorkerCrashed::Details& d) {
  const std::string how =
      d.signal != 0 ? fmt::format("was killed by signal {} ({})", d.signal, signal_name(d.signal))
                    : fmt::format("exited unexpectedly with exit code {}", d.exit_code);
  const std::string cause = d.cause.empty() ? likely_cause(d.signal, d.exit_code) : d.cause;
  return fmt::format("DataLoader worker {} (pid {}) {}{}: {}", d.worker_id, d.pid, how,
                     at_what(d.sample_index, d.batch), cause);
}

std::string describe_exception(const WorkerException::Details& d) {
  const std::string who = d.worker_id
                              ? fmt::format("DataLoader worker {} (pid {})", *d.worker_id, d.pid)
                              : std::string("DataLoader (in the main process)");
  const std::string what = d.message.empty() ? std::string() : fmt::format(": {}", d.message);
  const std::string where = d.where.empty() ? std::string() : fmt::format(" in {}", d.where);
  // Outside a batch (a failed worker start-up) the worker is gone and the epoch ended with it.
  const bool in_batch = d.batch.has_value();
  const char* next =
      !in_batch ? "the worker exited and the epoch ended: fix the error, then start a new epoch"
      : d.where == "worker_init"
          ? "every batch this worker is given fails the same way until it is forked again; the "
            "loader is still usable: the next fetch returns the next batch"
          : "the loader is still usable: the next fetch returns the next batch";
  return fmt::format("{} caught {}{}{}{}; {}", who, d.type_name, where,
                     in_batch ? at_what(d.sample_index, d.batch) : std::string(), what, next);
}

std::string describe_timeout(const LoaderTimeout::Details& d) {
  const std::string who = d.worker_id ? fmt::format("worker {} (pid {})", *d.worker_id, d.pid)
                                      : std::string("the loader");
  const std::string doing =
      d.sample_index ? fmt::format(", and was loading sample {}", *d.sample_index) : std::string();
  return fmt::format(
      "DataLoader: no batch within {} ms (LoaderOptions::timeout; waited {} ms): {} owes batch "
      "{}{}; the workers were stopped. If loading is merely slow, raise timeout; if get() "
      "hangs, find where (num_workers = 0 under a debugger)",
      d.timeout.count(), d.waited.count(), who, d.batch, doing);
}

CaughtException describe_current_exception() noexcept {
  CaughtException caught;
  try {
    caught.type_name = current_exception_type_name();
    try {
      throw;
    } catch (const CollateError& e) {
      caught.is_collate_error = true;
      caught.message = e.what();
    } catch (const std::exception& e) {
      caught.message = e.what();
    } catch (...) {
    }
  } catch (...) {
  }
  return caught;
}

std::string current_exception_type_name() {
  const std::type_info* type = abi::__cxa_current_exception_type();
  if (type == nullptr) return "unknown exception";
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(type->name(), nullptr, nullptr, &status), &std::free);
  return status == 0 && demangled ? std::string(demangled.get()) : std::string(type->name());
}

}  // namespace stoker::detail
