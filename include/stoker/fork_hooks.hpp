// Fork hooks: code that runs around every fork() a DataLoader makes (its workers, their
// respawns and replacements, the size-probe child), on the thread that forks. An embedded
// interpreter needs them: CPython must take its locks before a fork and repair its state in the
// child (PyOS_BeforeFork / PyOS_AfterFork_Parent / PyOS_AfterFork_Child), or a worker forked
// while another thread held the GIL deadlocks. pthread_atfork() is not the place for that: it
// would also run around forks the program makes itself, which such a runtime already handles.
#pragma once

#include <cstddef>
#include <functional>

namespace stoker {

struct ForkHooks {
  std::function<void()> prepare;  // in the parent, just before fork()
  std::function<void()> parent;   // in the parent, just after fork(), whether or not it worked
  std::function<void()> child;    // in the child, before the worker's own set-up
};

// Either process (normally at start-up); never blocks on a fork. Adds hooks to every later
// fork of every loader in this process. As with pthread_atfork(), `prepare` hooks run in the
// reverse order of their registration and `parent` / `child` hooks in that order. Returns an
// id for remove_fork_hooks(). Throws std::invalid_argument when all three are empty.
//
// What each may throw: an exception from `prepare` cancels the fork (the `parent` hooks of the
// ones already prepared run, then it propagates out of begin() or the fetch that forked);
// `parent` must not throw (an exception is logged and dropped); an exception from `child` ends
// that worker, which main reports as a WorkerException whose where() is "fork hook".
std::size_t add_fork_hooks(ForkHooks hooks);
// Removes the hooks of add_fork_hooks(id); an unknown id is ignored. A fork already past its
// `prepare` step still runs that registration's `parent` and `child` hooks.
void remove_fork_hooks(std::size_t id) noexcept;

}  // namespace stoker
