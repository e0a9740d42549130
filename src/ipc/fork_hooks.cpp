// The fork-hook registry (stoker/fork_hooks.hpp) and ForkGuard (ipc/fork_hooks.hpp). The
// registry is a short list behind a mutex; a fork copies it first, so the mutex is never held
// across fork() (a child could not unlock it) and a removal during a fork cannot pull hooks
// from under it.
#include "ipc/fork_hooks.hpp"

#include <cstddef>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "data/error_text.hpp"
#include "os/log.hpp"

namespace stoker {
namespace {

struct Registry {
  std::mutex mutex;
  std::size_t next_id = 1;
  std::vector<std::pair<std::size_t, std::shared_ptr<const ForkHooks>>> entries;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: a late fork may still read it
  return *r;
}

}  // namespace

std::size_t add_fork_hooks(ForkHooks hooks) {
  if (!hooks.prepare && !hooks.parent && !hooks.child) {
    throw std::invalid_argument(
        "add_fork_hooks: all three hooks (prepare, parent, child) are empty; give at least one");
  }
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  const std::size_t id = r.next_id++;
  r.entries.emplace_back(id, std::make_shared<const ForkHooks>(std::move(hooks)));
  return id;
}

void remove_fork_hooks(std::size_t id) noexcept {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  for (auto it = r.entries.begin(); it != r.entries.end(); ++it) {
    if (it->first == id) {
      r.entries.erase(it);
      return;
    }
  }
}

namespace detail {

ForkGuard::ForkGuard() {
  {
    Registry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mutex);
    hooks_.reserve(r.entries.size());
    for (const auto& entry : r.entries) hooks_.push_back(entry.second);
  }
  // Last registered first, as pthread_atfork runs its prepare handlers.
  for (std::size_t i = hooks_.size(); i > 0; --i) {
    if (!hooks_[i - 1]->prepare) continue;
    try {
      hooks_[i - 1]->prepare();
    } catch (...) {
      // Those prepared (i .. end) are undone; the rest never ran.
      hooks_.erase(hooks_.begin(), hooks_.begin() + static_cast<std::ptrdiff_t>(i));
      in_parent();
      throw;
    }
  }
}

ForkGuard::~ForkGuard() {
  if (!done_) in_parent();
}

void ForkGuard::in_parent() noexcept {
  done_ = true;
  for (const auto& hooks : hooks_) {
    if (!hooks->parent) continue;
    try {
      hooks->parent();
    } catch (...) {
      try {
        const CaughtException caught = describe_current_exception();
        logger().error("stoker: a fork hook's `parent` step threw {}: {}", caught.type_name,
                       caught.message);
      } catch (...) {
      }
    }
  }
}

void ForkGuard::in_child() {
  done_ = true;
  for (const auto& hooks : hooks_) {
    if (hooks->child) hooks->child();
  }
}

}  // namespace detail
}  // namespace stoker
