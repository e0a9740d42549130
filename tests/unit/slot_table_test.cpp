// loader/slot_table.hpp: the slot life cycle (kFree -> kIssued -> kReady -> kHeld -> kFree and
// the early returns to kFree), the per-channel queries, reclaim() against the held flags, what a
// dead worker's channel gives back, in-order and any-order delivery. When assertions are
// compiled in (debug and sanitizer builds), a phase change that breaks INV-SLOT-1 aborts: a
// forked child shows it (the only fork in this file).
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "loader/slot_table.hpp"
#include "os/assert.hpp"
#include "os/posix.hpp"

using namespace stoker::detail;

namespace {

// Held flags as the loader keeps them: one per slot, set while a Batch holds it.
std::unique_ptr<std::atomic<bool>[]> held_flags(std::size_t n) {
  auto held = std::make_unique<std::atomic<bool>[]>(n);
  for (std::size_t s = 0; s < n; ++s) held[s].store(false);
  return held;
}

// Issue, load and deliver slot s (batch k of `plan`) up to `phase`.
void advance(SlotTable& t, std::size_t s, std::uint64_t plan, std::uint64_t k, Phase phase) {
  t.issue(s, plan, k);
  if (phase == Phase::kIssued) return;
  t.set_phase(s, Phase::kIssued, Phase::kReady);
  if (phase == Phase::kReady) return;
  t.set_phase(s, Phase::kReady, Phase::kHeld);
}

}  // namespace

TEST_CASE("SlotTable: a fresh table is all free, in whole channels", "[slot_table]") {
  const SlotTable t(6, 2);
  CHECK(t.size() == 6);
  CHECK(t.per_channel() == 2);
  CHECK(t.channel_of(0) == 0);
  CHECK(t.channel_of(1) == 0);
  CHECK(t.channel_of(2) == 1);
  CHECK(t.channel_of(5) == 2);
  CHECK(t.count(Phase::kFree) == 6);
  CHECK(t.count(Phase::kIssued) == 0);
  for (std::size_t s = 0; s < t.size(); ++s) CHECK(t[s].phase == Phase::kFree);
}

TEST_CASE("SlotTable: a slot goes round the life cycle", "[slot_table]") {
  SlotTable t(4, 2);
  auto held = held_flags(4);
  t.issue(1, 7, 3);
  CHECK(t[1].phase == Phase::kIssued);
  CHECK(t[1].plan == 7);
  CHECK(t[1].batch == 3);
  CHECK(t.pending(7));
  CHECK_FALSE(t.pending(8));
  t.set_phase(1, Phase::kIssued, Phase::kReady);
  CHECK(t[1].phase == Phase::kReady);
  CHECK(t.pending(7));
  CHECK(t.count_ready(7) == 1);
  held[1].store(true);
  t.set_phase(1, Phase::kReady, Phase::kHeld);
  CHECK(t[1].phase == Phase::kHeld);
  CHECK_FALSE(t.pending(7));  // handed out: no longer the loader's to deliver
  CHECK(t.count_ready(7) == 0);
  CHECK_FALSE(t.reclaim(held.get()));  // the Batch still exists
  CHECK(t[1].phase == Phase::kHeld);
  held[1].store(false);  // the last copy of the Batch is gone
  CHECK(t.reclaim(held.get()));
  CHECK(t[1].phase == Phase::kFree);
  CHECK(t.count(Phase::kFree) == 4);
}

TEST_CASE("SlotTable: the early returns to kFree", "[slot_table]") {
  SlotTable t(2, 1);
  t.issue(0, 1, 0);
  t.set_phase(0, Phase::kIssued, Phase::kFree);  // a stale plan's result, or its worker died
  CHECK(t[0].phase == Phase::kFree);
  t.issue(0, 1, 1);
  t.set_phase(0, Phase::kIssued, Phase::kReady);
  t.set_phase(0, Phase::kReady, Phase::kFree);  // an error, or every sample skipped
  CHECK(t[0].phase == Phase::kFree);
  CHECK(t.count(Phase::kFree) == 2);
}

TEST_CASE("SlotTable: free_slot looks only at its own channel", "[slot_table]") {
  SlotTable t(6, 2);
  CHECK(t.free_slot(1) == std::optional<std::size_t>{2});
  t.issue(2, 1, 0);
  CHECK(t.free_slot(1) == std::optional<std::size_t>{3});
  t.issue(3, 1, 1);
  CHECK(t.free_slot(1) == std::nullopt);
  CHECK(t.free_slot(0) == std::optional<std::size_t>{0});
  CHECK(t.free_slot(2) == std::optional<std::size_t>{4});
  t.set_phase(2, Phase::kIssued, Phase::kFree);
  CHECK(t.free_slot(1) == std::optional<std::size_t>{2});
}

TEST_CASE("SlotTable: reclaim frees only the held slots whose flag is down", "[slot_table]") {
  SlotTable t(6, 3);
  auto held = held_flags(6);
  advance(t, 0, 1, 0, Phase::kHeld);
  advance(t, 1, 1, 1, Phase::kHeld);
  advance(t, 2, 1, 2, Phase::kReady);
  advance(t, 3, 1, 3, Phase::kIssued);
  held[0].store(true);
  // Slot 1's flag is down, slot 2's and 3's are down too but they are not kHeld.
  CHECK(t.reclaim(held.get()));
  CHECK(t[0].phase == Phase::kHeld);
  CHECK(t[1].phase == Phase::kFree);
  CHECK(t[2].phase == Phase::kReady);
  CHECK(t[3].phase == Phase::kIssued);
  CHECK_FALSE(t.reclaim(held.get()));  // nothing more to reclaim
  held[0].store(false);
  CHECK(t.reclaim(held.get()));
  CHECK(t.count(Phase::kHeld) == 0);
}

TEST_CASE("SlotTable: take_issued gives a channel's issued batches back in order", "[slot_table]") {
  SlotTable t(8, 4);
  advance(t, 4, 2, 9, Phase::kIssued);
  advance(t, 5, 2, 5, Phase::kReady);  // delivered by the worker before it died: kept
  advance(t, 6, 1, 30, Phase::kIssued);
  advance(t, 7, 2, 7, Phase::kIssued);
  advance(t, 0, 2, 8, Phase::kIssued);  // another channel's
  const std::vector<LostTask> lost = t.take_issued(1);
  REQUIRE(lost.size() == 3);
  CHECK((lost[0].plan == 1 && lost[0].batch == 30 && lost[0].part == kWholeBatch));
  CHECK((lost[1].plan == 2 && lost[1].batch == 7));
  CHECK((lost[2].plan == 2 && lost[2].batch == 9));
  CHECK(t[4].phase == Phase::kFree);
  CHECK(t[5].phase == Phase::kReady);
  CHECK(t[6].phase == Phase::kFree);
  CHECK(t[7].phase == Phase::kFree);
  CHECK(t[0].phase == Phase::kIssued);
  CHECK(t.take_issued(1).empty());
}

TEST_CASE("SlotTable: free_issued for one channel or all, drop_ready_unless by plan",
          "[slot_table]") {
  SlotTable t(4, 2);
  advance(t, 0, 1, 0, Phase::kIssued);
  advance(t, 1, 1, 1, Phase::kReady);
  advance(t, 2, 1, 2, Phase::kIssued);
  advance(t, 3, 2, 0, Phase::kReady);
  t.free_issued(1);
  CHECK(t[0].phase == Phase::kIssued);
  CHECK(t[2].phase == Phase::kFree);
  t.free_issued();
  CHECK(t[0].phase == Phase::kFree);
  CHECK(t[1].phase == Phase::kReady);  // not issued: kept
  t.drop_ready_unless([](std::uint64_t plan) { return plan == 2; });
  CHECK(t[1].phase == Phase::kFree);
  CHECK(t[3].phase == Phase::kReady);
  CHECK(t.count(Phase::kFree) == 3);
}

TEST_CASE(
    "SlotTable: deliverable in order waits for the next batch, out of order takes the "
    "lowest ready",
    "[slot_table]") {
  SlotTable t(6, 2);
  advance(t, 0, 1, 6, Phase::kReady);
  advance(t, 2, 1, 4, Phase::kReady);
  advance(t, 4, 1, 5, Phase::kIssued);
  advance(t, 1, 2, 0, Phase::kReady);                // another plan's
  CHECK(t.deliverable(1, true, 5) == std::nullopt);  // batch 5 is still loading
  CHECK(t.deliverable(1, true, 4) == std::optional<std::size_t>{2});
  CHECK(t.deliverable(1, true, 6) == std::optional<std::size_t>{0});
  CHECK(t.deliverable(1, false, 0) == std::optional<std::size_t>{2});
  CHECK(t.deliverable(2, true, 0) == std::optional<std::size_t>{1});
  CHECK(t.deliverable(3, false, 0) == std::nullopt);
  t.set_phase(2, Phase::kReady, Phase::kHeld);
  CHECK(t.deliverable(1, false, 0) == std::optional<std::size_t>{0});
  CHECK(t.count_ready(1) == 1);
  CHECK(t.count_ready(2) == 1);
}

TEST_CASE("SlotTable: oldest_issued is the plan's lowest batch still loading", "[slot_table]") {
  SlotTable t(6, 3);
  CHECK(t.oldest_issued(1) == std::nullopt);
  advance(t, 0, 1, 8, Phase::kIssued);
  advance(t, 3, 1, 3, Phase::kIssued);
  advance(t, 1, 1, 1, Phase::kReady);   // lower, but no longer loading
  advance(t, 4, 2, 0, Phase::kIssued);  // another plan's
  CHECK(t.oldest_issued(1) == std::optional<std::size_t>{3});
  CHECK(t.oldest_issued(2) == std::optional<std::size_t>{4});
  t.set_phase(3, Phase::kIssued, Phase::kReady);
  CHECK(t.oldest_issued(1) == std::optional<std::size_t>{0});
}

TEST_CASE("SlotTable: all_held and the phase counts", "[slot_table]") {
  SlotTable t(4, 2);
  CHECK_FALSE(t.all_held(0));
  advance(t, 0, 1, 0, Phase::kHeld);
  CHECK_FALSE(t.all_held(0));
  advance(t, 1, 1, 1, Phase::kHeld);
  CHECK(t.all_held(0));
  CHECK_FALSE(t.all_held(1));
  advance(t, 2, 1, 2, Phase::kIssued);
  advance(t, 3, 1, 3, Phase::kReady);
  CHECK(t.count(Phase::kHeld) == 2);
  CHECK(t.count(Phase::kIssued) == 1);
  CHECK(t.count(Phase::kReady) == 1);
  CHECK(t.count(Phase::kFree) == 0);
  // INV-SLOT-2: everything in flight fits the ring.
  CHECK(t.count(Phase::kIssued) + t.count(Phase::kReady) + t.count(Phase::kHeld) <= t.size());
}

TEST_CASE("SlotTable: a phase change from the wrong phase aborts naming INV-SLOT-1",
          "[slot_table]") {
  if (!kAssertionsEnabled) {
    WARN(
        "STOKER_ASSERT is compiled out in this build (release): the abort is checked only in "
        "debug and sanitizer builds");
    return;
  }
  struct Case {
    const char* what;
    Phase from;
    Phase to;
  };
  // Slot 0 is kFree.
  const Case c =
      GENERATE(Case{"a wrong `from`", Phase::kReady, Phase::kHeld},
               Case{"an arrow that is not in the life cycle", Phase::kFree, Phase::kReady});
  INFO(c.what);
  int err[2];
  REQUIRE(posix::make_pipe(err) == 0);
  const pid_t pid = posix::fork_process();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(err[1], STDERR_FILENO);
    posix::default_signal(SIGABRT);  // Catch's handler would report a failure from the child
    SlotTable t(2, 1);
    t.set_phase(0, c.from, c.to);
    ::_exit(0);  // not reached when the assertion works
  }
  posix::close_fd(err[1]);
  std::string text;
  char buffer[512];
  for (ssize_t n; (n = posix::read_full(err[0], buffer, sizeof buffer)) > 0;) {
    text.append(buffer, static_cast<std::size_t>(n));
  }
  posix::close_fd(err[0]);
  int status = 0;
  REQUIRE(posix::wait_pid(pid, &status, 0) == pid);
  INFO("the child's stderr: " << text);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  CHECK(text.find("stoker: internal invariant broken: INV-SLOT-1") != std::string::npos);
}
