// ipc/ring.hpp's Doorbell and ring_doorbell() with a real eventfd: no write(2) while the sleeper
// is awake, one when it said it sleeps, and two threads following the protocol of the Doorbell
// comment (sleeper: flag, fence E, re-check, poll; waker: publish, fence F, look at the flag)
// without ever losing a wake-up. Every poll has a bounded timeout, so a bug fails the test
// instead of hanging it.
#include <poll.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include <catch2/catch.hpp>

#include "ipc/ring.hpp"
#include "os/posix.hpp"

using namespace stoker::detail;

namespace {

// An eventfd closed at the end of the test.
struct EventFd {
  int fd = posix::make_eventfd();
  EventFd() { REQUIRE(fd >= 0); }
  ~EventFd() { posix::close_fd(fd); }
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;

  // Whether the eventfd is readable within `timeout_ms`.
  bool readable(int timeout_ms) const {
    pollfd p{fd, POLLIN, 0};
    return posix::poll_fds(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
  }
  // The counter's value (and resets it to 0); 0 when it was not readable.
  std::uint64_t take() const {
    std::uint64_t value = 0;
    if (posix::read_full(fd, &value, sizeof value) != static_cast<ssize_t>(sizeof value)) return 0;
    return value;
  }
};

}  // namespace

TEST_CASE("ring_doorbell: no write while the sleeper's flag is 0", "[doorbell]") {
  EventFd efd;
  Doorbell bell{};
  bell.sleeping.store(0);
  ring_doorbell(bell, efd.fd);
  ring_doorbell(bell, efd.fd);
  CHECK_FALSE(efd.readable(0));
}

TEST_CASE("ring_doorbell: a write when the sleeper's flag is 1, one per ring", "[doorbell]") {
  EventFd efd;
  Doorbell bell{};
  bell.sleeping.store(1);
  ring_doorbell(bell, efd.fd);
  REQUIRE(efd.readable(0));
  CHECK(efd.take() == 1);
  CHECK_FALSE(efd.readable(0));  // the read reset it
  ring_doorbell(bell, efd.fd);
  ring_doorbell(bell, efd.fd);
  CHECK(efd.take() == 2);
  posix::eventfd_drain(efd.fd);  // draining an empty eventfd neither blocks nor fails
  CHECK_FALSE(efd.readable(0));
}

TEST_CASE("Doorbell: a sleeper and a waker thread never lose a wake-up", "[doorbell]") {
  // Ping-pong: the waker publishes message i (a queue push), rings, and waits until the sleeper
  // has taken it; the sleeper finds the queue empty nearly every time and goes to sleep. A
  // lost wake-up is a poll that times out while a message the waker had already rung for sits
  // in the queue.
  constexpr std::uint32_t kRounds = 10000;
  constexpr int kPollMs = 2000;
  EventFd efd;
  auto queue = std::make_unique<SpscQueue>();
  queue->reset();
  Doorbell bell{};
  bell.sleeping.store(0);
  std::atomic<std::uint32_t> rung{0};   // messages the waker has finished ringing for
  std::atomic<std::uint32_t> taken{0};  // messages the sleeper has popped
  std::atomic<bool> stop{false};        // the sleeper gave up (a failure): stop waiting on it

  std::thread waker([&] {
    for (std::uint32_t i = 0; i < kRounds && !stop.load(); ++i) {
      while (!queue->try_push(Message{MessageKind::kBatch, i})) std::this_thread::yield();
      ring_doorbell(bell, efd.fd);  // F, then the flag
      rung.store(i + 1, std::memory_order_release);
      while (taken.load(std::memory_order_acquire) <= i && !stop.load()) {
        std::this_thread::yield();
      }
    }
  });

  std::uint32_t sleeps = 0;
  std::uint32_t lost = 0;
  std::uint32_t out_of_order = 0;
  std::uint32_t stalls = 0;  // polls that timed out with nothing published: the waker was slow
  for (std::uint32_t next = 0; next < kRounds && lost == 0 && stalls < 5;) {
    Message m{};
    if (queue->try_pop(m)) {
      if (m.slot != next) ++out_of_order;
      next = m.slot + 1;
      taken.store(next, std::memory_order_release);
      continue;
    }
    bell.sleeping.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // E
    if (queue->empty_approx()) {
      ++sleeps;
      if (!efd.readable(kPollMs)) {
        // Timed out. Only a failure when the waker had rung for a message we have not seen.
        if (rung.load(std::memory_order_acquire) > next && !queue->empty_approx()) {
          ++lost;
        } else {
          ++stalls;
        }
      }
    }
    bell.sleeping.store(0, std::memory_order_relaxed);
    posix::eventfd_drain(efd.fd);
  }
  stop.store(true);
  waker.join();
  CHECK(lost == 0);
  CHECK(stalls < 5);
  CHECK(out_of_order == 0);
  CHECK(taken.load() == kRounds);
  CHECK(sleeps > 0);  // the protocol was exercised, not only the busy path
}
