#include "loader/thread_rule.hpp"

#include <sstream>
#include <stdexcept>
#include <string>

namespace stoker::detail {
namespace {

std::string describe(std::thread::id id) {
  std::ostringstream out;
  out << id;
  return out.str();
}

}  // namespace

bool ThreadRule::acquire(std::thread::id self, std::thread::id& holder) noexcept {
  holder = std::thread::id{};
  if (owner_.compare_exchange_strong(holder, self, std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
    return true;  // pairs with the release store in leave() of the previous owner
  }
  return holder == self;  // a nested call on the owning thread
}

void ThreadRule::enter(const char* call) {
  const std::thread::id self = std::this_thread::get_id();
  std::thread::id holder;
  if (!acquire(self, holder)) {
    const char* other = owner_call_.load(std::memory_order_relaxed);
    throw std::logic_error(
        std::string(call) + ": another thread is inside this DataLoader (thread " +
        describe(holder) + " in " + (other != nullptr ? other : "a call") + "; this is thread " +
        describe(self) +
        "); a DataLoader and its iterators are used by one thread at a time: hand them from "
        "thread to thread between calls (join, or a mutex around each call), or give each "
        "thread a loader of its own");
  }
  if (depth_++ == 0) owner_call_.store(call, std::memory_order_relaxed);
}

bool ThreadRule::try_enter(const char* call) noexcept {
  std::thread::id holder;
  if (!acquire(std::this_thread::get_id(), holder)) return false;
  if (depth_++ == 0) owner_call_.store(call, std::memory_order_relaxed);
  return true;
}

void ThreadRule::defer_finish(std::uint64_t generation) noexcept {
  std::uint64_t seen = deferred_finish_.load(std::memory_order_relaxed);
  while (seen < generation &&
         !deferred_finish_.compare_exchange_weak(seen, generation, std::memory_order_relaxed)) {
  }
}

void ThreadRule::leave() noexcept {
  if (--depth_ == 0) owner_.store(std::thread::id{}, std::memory_order_release);
}

}  // namespace stoker::detail
