// ForkGuard: the fork hooks (stoker/fork_hooks.hpp) of one fork(), as they were registered
// when it was made. The loader's two forking sites (WorkerProcess::spawn and the size probe)
// make one just before fork() and call in_parent() or in_child() after it.
#pragma once

#include <memory>
#include <vector>

#include "stoker/fork_hooks.hpp"

namespace stoker::detail {

class ForkGuard {
 public:
  // Main process. Takes the registrations and runs their `prepare` hooks, last registered
  // first. Throws what a `prepare` hook threw, after running the `parent` hooks of those
  // already prepared.
  ForkGuard();
  // Runs the `parent` hooks if neither in_parent() nor in_child() did (fork() never ran).
  ~ForkGuard();
  ForkGuard(const ForkGuard&) = delete;
  ForkGuard& operator=(const ForkGuard&) = delete;

  // In the parent after fork(): the `parent` hooks in order. Never throws (an exception is
  // logged and the next hook still runs).
  void in_parent() noexcept;
  // In the child after fork(): the `child` hooks in order. Throws what one threw (the
  // remaining ones do not run).
  void in_child();

  bool empty() const noexcept { return hooks_.empty(); }

 private:
  std::vector<std::shared_ptr<const ForkHooks>> hooks_;
  bool done_ = false;
};

}  // namespace stoker::detail
