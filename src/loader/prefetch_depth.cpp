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
}

void PrefetchDepth::set_limit(std::size_t limit) noexcept {
  if (!adaptive_) return;
  limit_ = std::max(limit, minimum_);
  depth_ = std::min(depth_, limit_);
}

void PrefetchDepth::on_delivery(std::uint64_t waited_ns, std::uint64_t blocked_total_ns,
                                std::size_t workers, std::uint64_t now_ns) noexcept {
  if (!adaptive_ || workers == 0) return;
  if (window_start_ns_ == 0 || now_ns < window_start_ns_) {
    window_start_ns_ = now_ns;
    window_waited_ns_ = 0;
    window_batches_ = 0;
    blocked_at_start_ns_ = blocked_total_ns;
    return;
  }
  window_waited_ns_ += waited_ns;
  ++window_batches_;
  const std::uint64_t span = now_ns - window_start_ns_;
  if (span < kWindowNs || window_batches_ < kWindowBatches) return;
  const double wait = static_cast<double>(window_waited_ns_) / static_cast<double>(span);
  const std::uint64_t blocked_ns =
      blocked_total_ns >= blocked_at_start_ns_ ? blocked_total_ns - blocked_at_start_ns_ : 0;
  const double blocked =
      static_cast<double>(blocked_ns) / (static_cast<double>(span) * static_cast<double>(workers));
  at_limit_ = false;
  if (wait >= kRaiseWait && blocked >= kRaiseBlocked) {
    calm_windows_ = 0;
    if (depth_ < limit_) {
      depth_ = std::min(depth_ * 2, limit_);  // 2, 4, 8, 16, 32: the deep end in a few windows
    } else {
      at_limit_ = true;
    }
  } else if (wait < kCalmWait && blocked > kCalmBlocked) {
    if (++calm_windows_ >= kCalmWindows && depth_ > minimum_) {
      --depth_;
      calm_windows_ = 0;
    }
  } else {
    calm_windows_ = 0;
  }
  window_start_ns_ = now_ns;
  window_waited_ns_ = 0;
  window_batches_ = 0;
  blocked_at_start_ns_ = blocked_total_ns;
}

}  // namespace stoker::detail
