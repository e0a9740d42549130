// PrefetchDepth: the adaptive prefetch depth's decisions on synthetic windows of deliveries.
#include <catch2/catch.hpp>

#include "loader/prefetch_depth.hpp"

using stoker::detail::PrefetchDepth;

namespace {

constexpr std::uint64_t kMs = 1'000'000;

// Feeds `windows` windows of 100 ms, `batches` deliveries each (the delivered rate), with the
// consumer waiting `wait` of each and the workers blocked `blocked` of theirs (2 workers);
// `blocked_total` carries over.
void feed(PrefetchDepth& d, int windows, double wait, double blocked, std::uint64_t& now,
          std::uint64_t& blocked_total, int batches = 10) {
  const auto n = static_cast<std::uint64_t>(batches);
  for (int w = 0; w < windows; ++w) {
    const std::uint64_t start = now;  // the last delivery lands exactly 100 ms on
    for (std::uint64_t i = 1; i <= n; ++i) {
      const std::uint64_t step = start + i * 100 * kMs / n - now;
      now += step;
      blocked_total += static_cast<std::uint64_t>(blocked * 2 * static_cast<double>(step));
      d.on_delivery(static_cast<std::uint64_t>(wait * static_cast<double>(step)), blocked_total, 2,
                    now);
    }
  }
}

// Windows whose rate rises by a quarter each time, so every doubling pays.
void feed_rising(PrefetchDepth& d, int windows, std::uint64_t& now, std::uint64_t& blocked_total,
                 int& batches) {
  for (int w = 0; w < windows; ++w) {
    batches += batches / 4;
    feed(d, 1, 0.10, 0.20, now, blocked_total, batches);
  }
}

// An adaptive depth from `start` up to `limit`, its clock and its workers' blocked time, with
// the first window opened.
struct Adaptive {
  Adaptive(std::size_t start, std::size_t limit) {
    d.configure(true, start, limit);
    d.on_delivery(0, 0, 2, now);
  }
  PrefetchDepth d;
  std::uint64_t now = 1;
  std::uint64_t blocked = 0;
};

}  // namespace

TEST_CASE("PrefetchDepth: a fixed depth never moves", "[prefetch_depth]") {
  PrefetchDepth d;
  d.configure(false, 3, 8);
  std::uint64_t now = 1;
  std::uint64_t blocked = 0;
  feed(d, 10, 0.5, 0.5, now, blocked);
  CHECK(d.depth() == 3);
  CHECK(d.limit() == 3);
  CHECK_FALSE(d.grow_for_held());
}

TEST_CASE(
    "PrefetchDepth: waits with blocked workers raise it while the rate rises, up to the "
    "limit",
    "[prefetch_depth]") {
  Adaptive a(2, 12);
  auto& [d, now, blocked] = a;
  int batches = 16;
  feed(d, 1, 0.10, 0.20, now, blocked, batches);
  CHECK(d.depth() == 4);  // doubled, on trial
  feed_rising(d, 1, now, blocked, batches);
  CHECK(d.depth() == 4);  // the trial window delivered faster: kept
  feed_rising(d, 1, now, blocked, batches);
  CHECK(d.depth() == 8);  // the next doubling, on trial
  feed_rising(d, 2, now, blocked, batches);
  CHECK(d.depth() == 12);  // kept, then the limit, not 16
  CHECK_FALSE(d.at_limit());
  feed_rising(d, 2, now, blocked, batches);
  CHECK(d.depth() == 12);
  CHECK(d.at_limit());
  CHECK(d.trials() == 3);
  CHECK(d.trials_given_back() == 0);
}

TEST_CASE(
    "PrefetchDepth: a doubling that does not raise the rate is given back, and tried "
    "again later, less and less often",
    "[prefetch_depth]") {
  Adaptive a(2, 32);
  auto& [d, now, blocked] = a;
  // Bound elsewhere (memory bandwidth, the workers' CPU): the rate stays at 10 per window.
  feed(d, 1, 0.10, 0.20, now, blocked);
  REQUIRE(d.depth() == 4);
  feed(d, 1, 0.10, 0.20, now, blocked);
  CHECK(d.depth() == 2);  // given back
  CHECK(d.trials_given_back() == 1);
  feed(d, static_cast<int>(PrefetchDepth::kRetryWindows) - 1, 0.10, 0.20, now, blocked);
  CHECK(d.depth() == 2);  // not tried during the cool-down
  CHECK(d.trials() == 1);
  feed(d, 2, 0.10, 0.20, now, blocked);
  CHECK(d.trials() == 2);  // tried again once it ended
  CHECK(d.depth() == 2);   // and given back again
  feed(d, 2 * static_cast<int>(PrefetchDepth::kRetryWindows) - 1, 0.10, 0.20, now, blocked);
  CHECK(d.trials() == 2);  // twice as long a cool-down after a second failure in a row
  feed(d, 2, 0.10, 0.20, now, blocked);
  CHECK(d.trials() == 3);
  // A rate that drops with depth (more slots, more cold pages) is given back the same way.
  feed(d, static_cast<int>(PrefetchDepth::kMaxRetryWindows), 0.10, 0.20, now, blocked);
  const std::size_t before = d.trials_given_back();
  while (d.depth() == 2) feed(d, 1, 0.10, 0.20, now, blocked);
  feed(d, 1, 0.10, 0.20, now, blocked, 8);
  CHECK(d.depth() == 2);
  CHECK(d.trials_given_back() == before + 1);
}

TEST_CASE("PrefetchDepth: a rise of less than kMinGain does not keep a doubling",
          "[prefetch_depth]") {
  Adaptive a(2, 8);
  auto& [d, now, blocked] = a;
  feed(d, 1, 0.10, 0.20, now, blocked, 100);
  REQUIRE(d.depth() == 4);
  feed(d, 1, 0.10, 0.20, now, blocked, 103);  // +3%
  CHECK(d.depth() == 2);
  feed(d, static_cast<int>(PrefetchDepth::kRetryWindows), 0.10, 0.20, now, blocked, 100);
  REQUIRE(d.depth() == 4);
  feed(d, 1, 0.10, 0.20, now, blocked, 106);  // +6%
  CHECK(d.depth() == 4);
}

TEST_CASE("PrefetchDepth: waits alone (workers busy) or blocked workers alone change nothing",
          "[prefetch_depth]") {
  Adaptive a(2, 8);
  auto& [d, now, blocked] = a;
  feed(d, 3, 0.5, 0.0, now, blocked);  // data-bound with busy workers: more depth cannot help
  CHECK(d.depth() == 2);
  feed(d, 3, 0.0, 0.3, now, blocked);  // workers ahead, consumer never waits
  CHECK(d.depth() == 2);
}

TEST_CASE("PrefetchDepth: a long calm with idle workers lowers it back, not below the minimum",
          "[prefetch_depth]") {
  Adaptive a(2, 8);
  auto& [d, now, blocked] = a;
  int batches = 16;
  feed_rising(d, 4, now, blocked, batches);
  REQUIRE(d.depth() == 8);
  feed(d, PrefetchDepth::kCalmWindows - 1, 0.0, 0.9, now, blocked);
  CHECK(d.depth() == 8);
  feed(d, 1, 0.0, 0.9, now, blocked);
  CHECK(d.depth() == 7);  // back by one
  feed(d, 40, 0.0, 0.9, now, blocked);
  CHECK(d.depth() == 2);
}

TEST_CASE("PrefetchDepth: a held batch grows it to the limit, and a lower limit caps it",
          "[prefetch_depth]") {
  PrefetchDepth d;
  d.configure(true, 2, 4);
  CHECK(d.grow_for_held());
  CHECK(d.grow_for_held());
  CHECK(d.depth() == 4);
  CHECK_FALSE(d.grow_for_held());
  d.set_limit(3);
  CHECK(d.depth() == 3);
  CHECK(d.limit() == 3);
  d.set_limit(1);  // never below the minimum
  CHECK(d.limit() == 2);
}
