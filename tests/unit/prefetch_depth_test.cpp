// PrefetchDepth: the adaptive prefetch depth's decisions on synthetic windows of deliveries.
#include <catch2/catch.hpp>

#include "loader/prefetch_depth.hpp"

using stoker::detail::PrefetchDepth;

namespace {

constexpr std::uint64_t kMs = 1'000'000;

// Feeds `windows` windows (10 deliveries over 100 ms each) with the consumer waiting `wait` of each
// and the workers blocked `blocked` of theirs (2 workers); `blocked_total` carries over.
void feed(PrefetchDepth& d, int windows, double wait, double blocked, std::uint64_t& now,
          std::uint64_t& blocked_total) {
  for (int w = 0; w < windows; ++w) {
    for (int i = 0; i < 10; ++i) {
      now += 10 * kMs;
      blocked_total += static_cast<std::uint64_t>(blocked * 2 * 10 * kMs);
      d.on_delivery(static_cast<std::uint64_t>(wait * 10 * kMs), blocked_total, 2, now);
    }
  }
}

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

TEST_CASE("PrefetchDepth: waits with blocked workers raise it, up to the limit",
          "[prefetch_depth]") {
  PrefetchDepth d;
  d.configure(true, 2, 12);
  std::uint64_t now = 1;
  std::uint64_t blocked = 0;
  d.on_delivery(0, 0, 2, now);  // opens the first window
  feed(d, 1, 0.10, 0.20, now, blocked);
  CHECK(d.depth() == 4);  // doubled
  feed(d, 1, 0.10, 0.20, now, blocked);
  CHECK(d.depth() == 8);
  feed(d, 1, 0.10, 0.20, now, blocked);
  CHECK(d.depth() == 12);  // the limit, not 16
  CHECK_FALSE(d.at_limit());
  feed(d, 1, 0.10, 0.20, now, blocked);
  CHECK(d.depth() == 12);
  CHECK(d.at_limit());
}

TEST_CASE("PrefetchDepth: waits alone (workers busy) or blocked workers alone change nothing",
          "[prefetch_depth]") {
  PrefetchDepth d;
  d.configure(true, 2, 8);
  std::uint64_t now = 1;
  std::uint64_t blocked = 0;
  d.on_delivery(0, 0, 2, now);
  feed(d, 3, 0.5, 0.0, now, blocked);  // data-bound with busy workers: more depth cannot help
  CHECK(d.depth() == 2);
  feed(d, 3, 0.0, 0.3, now, blocked);  // workers ahead, consumer never waits
  CHECK(d.depth() == 2);
}

TEST_CASE("PrefetchDepth: a long calm with idle workers lowers it back, not below the minimum",
          "[prefetch_depth]") {
  PrefetchDepth d;
  d.configure(true, 2, 8);
  std::uint64_t now = 1;
  std::uint64_t blocked = 0;
  d.on_delivery(0, 0, 2, now);
  feed(d, 2, 0.10, 0.20, now, blocked);
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
