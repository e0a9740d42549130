// The clean-state checker: what a test snapshots before it creates a loader and requires again
// after destroying it. No child process (running or zombie), the same number of open file
// descriptors, no stoker memfd (batch ring or sample cache) still mapped, and this process's
// resident shared memory (RssShmem) back to where it was. The process tests also check it
// around every TEST_CASE (support/clean_state_listener.cpp).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

namespace stoker::test {

struct ProcessState {
  std::size_t open_fds = 0;
  std::vector<pid_t> children;    // any state, zombies included
  std::size_t ring_mappings = 0;  // lines of /proc/self/maps naming a memfd:stoker-* region
  std::size_t shmem_kib = 0;      // RssShmem of /proc/self/status
};

ProcessState process_state();
std::vector<pid_t> child_pids();
std::size_t open_fd_count();
std::size_t thread_count();  // threads of this process (/proc/self/task)
std::size_t ring_mapping_count();
std::size_t rss_shmem_kib();
// Everything that differs from `baseline`, as text; empty when the state is clean.
std::string differences(const ProcessState& baseline, const ProcessState& now);

// A test program whose library keeps something open on purpose (the remote tests: the HTTP
// client's cached connections) lets go of it in a hook, called before each TEST_CASE's snapshot
// and before its check; it returns what it could not let go of, or "".
using SettleHook = std::string (*)();
void set_settle_hook(SettleHook hook);
SettleHook settle_hook();

// CPU time (user + system) of a live process, in seconds; -1 when it is gone.
double process_cpu_seconds(pid_t pid);
bool process_alive(pid_t pid);  // exists and is not a zombie

}  // namespace stoker::test

// Requires the process to be back at `baseline`; children get up to 5 s to be reaped.
#define STOKER_REQUIRE_CLEAN(baseline)                                            \
  do {                                                                            \
    const std::string stoker_diff_ =                                              \
        ::stoker::test::differences((baseline), ::stoker::test::process_state()); \
    INFO(stoker_diff_);                                                           \
    REQUIRE(stoker_diff_.empty());                                                \
  } while (false)
