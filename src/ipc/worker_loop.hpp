// The worker process's main loop (worker_loop.cpp), and the signal set-up every forked child
// of a loader (worker or size probe) makes first.
#pragma once

#include <sys/types.h>

#include "ipc/worker_process.hpp"

namespace stoker::detail {

// In a freshly forked worker: never returns; the worker leaves with _exit().
[[noreturn]] void worker_main(const WorkerLaunch& launch, pid_t parent) noexcept;

// In a forked child: default dispositions for the signals a crash or a stop sends (whatever
// handlers the parent installed), SIGINT ignored (the main process decides), nothing blocked.
void reset_signals_in_child() noexcept;

}  // namespace stoker::detail
