// ThreadRule: the thread rule of a DataLoader and its iterators (data_loader.hpp), kept at every
// public call: one thread at a time inside a loader, any number of threads one after another.
// A call that finds another thread inside raises std::logic_error at once, naming both threads
// and the call in progress; a call nested inside another on the same thread is let in. Cheap:
// one compare-and-swap in and one store out, no system call. Main process.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>

namespace stoker::detail {

class ThreadRule {
 public:
  // Enters the rule for a call named `call` (a string literal, e.g. "DataLoader::begin").
  // Throws std::logic_error naming both threads when another thread is inside.
  void enter(const char* call);
  // As enter(), but never throws: false (and nothing entered) when another thread is inside.
  bool try_enter(const char* call) noexcept;
  // Leaves a call entered by enter() or a successful try_enter().
  void leave() noexcept;
  // True inside the outermost call of the owning thread (not a nested one).
  bool outermost() const noexcept { return depth_ == 1; }

  // An iterator's end of epoch that could not run because another thread was inside
  // (finish() is noexcept, so it cannot raise): kept here, run by the next outermost call.
  // Generations only grow and the running epoch has the highest, so the largest one deferred
  // is the only one that can still name it.
  void defer_finish(std::uint64_t generation) noexcept;
  // The deferred generation, once (0: none). Relaxed loads and stores throughout: the value is
  // a number, and the epoch it names is ended by the thread that owns the rule then; one
  // deferred while a call runs is taken by a later call.
  std::uint64_t take_deferred_finish() noexcept {
    if (deferred_finish_.load(std::memory_order_relaxed) == 0) return 0;
    return deferred_finish_.exchange(0, std::memory_order_relaxed);
  }

 private:
  bool acquire(std::thread::id self, std::thread::id& holder) noexcept;

  // The thread inside a call, or a default-constructed id when none is. Set by compare-and-swap
  // (acquire) on the outermost entry and cleared by a release store on the last leave: the
  // pair orders everything one owner wrote before whatever the next owner reads, which is all
  // that handing a loader from thread to thread needs.
  std::atomic<std::thread::id> owner_{};
  static_assert(std::atomic<std::thread::id>::is_always_lock_free);
  // The owner's outermost call, for the message another thread raises. Written by the owner
  // (relaxed) after it owns the rule, read by the thread that was refused (relaxed): a hint,
  // possibly a call that has just ended.
  std::atomic<const char*> owner_call_{nullptr};
  std::size_t depth_ = 0;  // the owner's nested calls; only the owner reads or writes it
  std::atomic<std::uint64_t> deferred_finish_{0};
};

// Holds the rule for one call's scope (enter() in the constructor, leave() in the destructor).
class ThreadRuleScope {
 public:
  ThreadRuleScope(ThreadRule& rule, const char* call) : rule_(rule) { rule_.enter(call); }
  ~ThreadRuleScope() { rule_.leave(); }
  ThreadRuleScope(const ThreadRuleScope&) = delete;
  ThreadRuleScope& operator=(const ThreadRuleScope&) = delete;

 private:
  ThreadRule& rule_;
};

}  // namespace stoker::detail
