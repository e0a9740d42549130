// PrefetchDepth: how many batches each worker may have in flight (issued, ready or held) — the
// loader's prefetch depth. A prefetch_factor the user set is a fixed depth. The default
// (kAdaptivePrefetch) starts at 2 and adapts, and a deeper ring must pay for itself:
// - when, over a window of deliveries, the consumer waited while workers sat with nothing to
//   load (their slots all full: "bubbles" where the consumer, time-sliced with them, had not
//   yet released one), the depth doubles, up to the limit the memory check allows, on trial;
// - the window after a doubling compares the rate of delivered batches with the window before
//   it: unless it rose by kMinGain, the depth goes back and that depth is not tried again for
//   kRetryWindows windows (twice as many after each trial that failed in a row), so a loader
//   that is bound by memory bandwidth or by its workers' CPU does not hold slots it cannot use;
// - when the consumer never waits and the workers idle most of the time (they are far ahead
//   anyway), it falls back by one after several such windows.
// Pure arithmetic on what the loader measures; main process only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker::detail {

class PrefetchDepth {
 public:
  // A window closes after this long and at least kWindowBatches deliveries.
  static constexpr std::uint64_t kWindowNs = 100'000'000;
  static constexpr std::uint64_t kWindowBatches = 8;
  // Raise when the consumer waited at least this share of a window while the workers were
  // blocked at least this share of theirs.
  static constexpr double kRaiseWait = 0.02;
  static constexpr double kRaiseBlocked = 0.05;
  // A doubling is kept when the next window delivered batches at least this much faster.
  static constexpr double kMinGain = 0.05;
  // After a doubling that did not pay, windows before that depth is tried again (doubling
  // with each failure in a row, up to kMaxRetryWindows).
  static constexpr std::size_t kRetryWindows = 20;
  static constexpr std::size_t kMaxRetryWindows = 640;
  // Lower after kCalmWindows windows in a row with (almost) no wait and mostly idle workers.
  static constexpr double kCalmWait = 0.001;
  static constexpr double kCalmBlocked = 0.5;
  static constexpr std::size_t kCalmWindows = 5;

  // `adaptive`: the depth moves within [minimum, limit]; otherwise it stays at `minimum`.
  void configure(bool adaptive, std::size_t minimum, std::size_t limit) noexcept;
  // The most the memory check allows (never below the minimum).
  void set_limit(std::size_t limit) noexcept;

  std::size_t depth() const noexcept { return depth_; }
  std::size_t limit() const noexcept { return limit_; }
  bool adaptive() const noexcept { return adaptive_; }
  // The last window ended wanting more depth than the limit allows.
  bool at_limit() const noexcept { return at_limit_; }
  // Doublings tried, and how many of them were given back because they did not pay.
  std::size_t trials() const noexcept { return trials_; }
  std::size_t trials_given_back() const noexcept { return given_back_; }

  // The consumer holds every slot the depth allows and so blocks the next batch: one more, if
  // the limit allows (adaptive only). True when it grew.
  bool grow_for_held() noexcept {
    if (!adaptive_ || depth_ >= limit_) return false;
    ++depth_;
    return true;
  }
  // After each delivery: the consumer's wait for it, the workers' blocked time so far (summed
  // over workers, cumulative), how many workers there are, and the time now.
  void on_delivery(std::uint64_t waited_ns, std::uint64_t blocked_total_ns, std::size_t workers,
                   std::uint64_t now_ns) noexcept;

 private:
  void start_window(std::uint64_t now_ns, std::uint64_t blocked_total_ns) noexcept;
  // The window that ran at a depth on trial: keep it or give it back.
  void judge_trial(double rate) noexcept;

  bool adaptive_ = false;
  std::size_t minimum_ = 2;
  std::size_t limit_ = 2;
  std::size_t depth_ = 2;
  bool at_limit_ = false;
  std::uint64_t window_start_ns_ = 0;
  std::uint64_t window_waited_ns_ = 0;
  std::uint64_t window_batches_ = 0;
  std::uint64_t blocked_at_start_ns_ = 0;
  std::size_t calm_windows_ = 0;
  // A doubling on trial: the depth it came from (0: none) and the rate before it.
  std::size_t trial_from_ = 0;
  double rate_before_ = 0;
  // The depth a failed trial reached, not to be tried again for `cooldown_` windows.
  std::size_t refused_depth_ = 0;
  std::size_t cooldown_ = 0;
  std::size_t failures_in_a_row_ = 0;
  std::size_t trials_ = 0;
  std::size_t given_back_ = 0;
};

}  // namespace stoker::detail
