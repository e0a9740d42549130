#include "loader/prefetch_depth.hpp"

#include <algorithm>

namespace stoker::detail {

void PrefetchDepth::configure(bool adaptive, std::size_t minimum, std::size_t limit) noexcept {
  adaptive_ = adaptive;
  minimum_ = std::max<std::size_t>(minimum, 1);
  limit_ = adaptive ? std::max(limit, minimum_) : minimum_;
  depth_ = minimum_;
  at_limit_ = false;
  window_start_ns_ = 0;
  calm_windows_ = 0;
  trial_from_ = 0;
  refused_depth_ = 0;
  cooldown_ = 0;
  failures_in_a_row_ = 0;
}

void PrefetchDepth::set_limit(std::size_t limit) noexcept {
  if (!adaptive_) return;
  limit_ = std::max(limit, minimum_);
  depth_ = std::min(depth_, limit_);
  if (trial_from_ >= depth_) trial_from_ = 0;  // the trial's depth is gone with the limit
}

void PrefetchDepth::start_window(std::uint64_t now_ns, std::uint64_t blocked_total_ns) noexcept {
  window_start_ns_ = now_ns;
  window_waited_ns_ = 0;
  window_batches_ = 0;
  blocked_at_start_ns_ = blocked_total_ns;
}

void PrefetchDepth::judge_trial(double rate) noexcept {
  if (rate >= rate_before_ * (1 + kMinGain)) {
    failures_in_a_row_ = 0;  // it paid: keep it
  } else {
    refused_depth_ = depth_;
    depth_ = trial_from_;
    ++given_back_;
    cooldown_ =
        std::min(kRetryWindows << std::min<std::size_t>(failures_in_a_row_, 5), kMaxRetryWindows);
    ++failures_in_a_row_;
  }
  trial_from_ = 0;
}

void PrefetchDepth::on_delivery(std::uint64_t waited_ns, std::uint64_t blocked_total_ns,
                                std::size_t workers, std::uint64_t now_ns) noexcept {
  if (!adaptive_ || workers == 0) return;
  if (window_start_ns_ == 0 || now_ns < window_start_ns_) {
    start_window(now_ns, blocked_total_ns);
    return;
  }
  window_waited_ns_ += waited_ns;
  ++window_batches_;
  const std::uint64_t span = now_ns - window_start_ns_;
  if (span < kWindowNs || window_batches_ < kWindowBatches) return;
  const double rate = static_cast<double>(window_batches_) / static_cast<double>(span);
  const double wait = static_cast<double>(window_waited_ns_) / static_cast<double>(span);
  const std::uint64_t blocked_ns =
      blocked_total_ns >= blocked_at_start_ns_ ? blocked_total_ns - blocked_at_start_ns_ : 0;
  const double blocked =
      static_cast<double>(blocked_ns) / (static_cast<double>(span) * static_cast<double>(workers));
  start_window(now_ns, blocked_total_ns);
  if (cooldown_ > 0 && --cooldown_ == 0) refused_depth_ = 0;
  if (trial_from_ != 0) {
    judge_trial(rate);
    return;
  }
  at_limit_ = false;
  if (wait >= kRaiseWait && blocked >= kRaiseBlocked) {
    calm_windows_ = 0;
    const std::size_t deeper = std::min(depth_ * 2, limit_);  // 2, 4, 8, 16, 32
    if (depth_ >= limit_) {
      at_limit_ = true;
    } else if (refused_depth_ == 0 || deeper < refused_depth_) {
      trial_from_ = depth_;
      rate_before_ = rate;
      depth_ = deeper;
      ++trials_;
    }
  } else if (wait < kCalmWait && blocked > kCalmBlocked) {
    if (++calm_windows_ >= kCalmWindows && depth_ > minimum_) {
      --depth_;
      calm_windows_ = 0;
    }
  } else {
    calm_windows_ = 0;
  }
}

}  // namespace stoker::detail
