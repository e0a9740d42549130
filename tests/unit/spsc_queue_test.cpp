// ipc/ring.hpp's SpscQueue without shared memory or fork: FIFO order, full at kQueueCapacity
// (INV-QUEUE-1), empty, wraparound of the cell index over many cycles, reset(), and a producer
// and a consumer thread passing a few hundred thousand messages.
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "ipc/ring.hpp"

using namespace stoker::detail;

namespace {

std::unique_ptr<SpscQueue> make_queue() {
  auto queue = std::make_unique<SpscQueue>();
  queue->reset();  // the queue lives in shared memory: reset() is its constructor
  return queue;
}

Message batch(std::uint32_t slot) { return Message{MessageKind::kBatch, slot}; }

}  // namespace

TEST_CASE("SpscQueue: messages come out in the order they went in", "[spsc]") {
  auto q = make_queue();
  REQUIRE(q->empty_approx());
  REQUIRE(q->try_push(batch(7)));
  REQUIRE(q->try_push(Message{MessageKind::kStop, 0}));
  REQUIRE(q->try_push(batch(3)));
  REQUIRE_FALSE(q->empty_approx());
  Message m{};
  REQUIRE(q->try_pop(m));
  CHECK(m.kind == MessageKind::kBatch);
  CHECK(m.slot == 7);
  REQUIRE(q->try_pop(m));
  CHECK(m.kind == MessageKind::kStop);
  REQUIRE(q->try_pop(m));
  CHECK(m.slot == 3);
  CHECK(q->empty_approx());
}

TEST_CASE("SpscQueue: an empty queue pops nothing and leaves the message untouched", "[spsc]") {
  auto q = make_queue();
  Message m{MessageKind::kStop, 99};
  REQUIRE_FALSE(q->try_pop(m));
  CHECK(m.kind == MessageKind::kStop);
  CHECK(m.slot == 99);
  REQUIRE(q->try_push(batch(1)));
  REQUIRE(q->try_pop(m));
  REQUIRE_FALSE(q->try_pop(m));  // emptied again
  CHECK(m.slot == 1);
}

TEST_CASE("SpscQueue: full at kQueueCapacity (INV-QUEUE-1), and a pop makes one cell of room",
          "[spsc]") {
  auto q = make_queue();
  for (std::uint32_t i = 0; i < kQueueCapacity; ++i) REQUIRE(q->try_push(batch(i)));
  REQUIRE_FALSE(q->try_push(batch(1000)));
  REQUIRE_FALSE(q->try_push(batch(1001)));  // still full: a refused push changes nothing
  Message m{};
  REQUIRE(q->try_pop(m));
  CHECK(m.slot == 0);
  REQUIRE(q->try_push(batch(kQueueCapacity)));
  REQUIRE_FALSE(q->try_push(batch(1002)));
  for (std::uint32_t i = 1; i <= kQueueCapacity; ++i) {
    REQUIRE(q->try_pop(m));
    REQUIRE(m.slot == i);
  }
  REQUIRE_FALSE(q->try_pop(m));
}

TEST_CASE("SpscQueue: order holds as the cell index wraps around many times", "[spsc]") {
  auto q = make_queue();
  // Batches of a size that does not divide the capacity, so each cycle starts at another cell.
  constexpr std::uint32_t kChunk = 37;
  static_assert(kQueueCapacity % kChunk != 0);
  std::uint32_t pushed = 0;
  std::uint32_t popped = 0;
  for (int cycle = 0; cycle < 200; ++cycle) {
    for (std::uint32_t i = 0; i < kChunk; ++i) REQUIRE(q->try_push(batch(pushed++)));
    Message m{};
    for (std::uint32_t i = 0; i < kChunk; ++i) {
      REQUIRE(q->try_pop(m));
      REQUIRE(m.slot == popped++);
    }
    REQUIRE(q->empty_approx());
  }
  CHECK(pushed == 200 * kChunk);
  CHECK(pushed > 50 * kQueueCapacity);
  // A full queue after many wraps is still full at exactly kQueueCapacity.
  for (std::size_t i = 0; i < kQueueCapacity; ++i) REQUIRE(q->try_push(batch(pushed++)));
  CHECK_FALSE(q->try_push(batch(pushed)));
}

TEST_CASE("SpscQueue: reset() empties a queue with messages in it", "[spsc]") {
  auto q = make_queue();
  for (std::uint32_t i = 0; i < 10; ++i) REQUIRE(q->try_push(batch(i)));
  q->reset();
  CHECK(q->empty_approx());
  Message m{};
  CHECK_FALSE(q->try_pop(m));
  // And holds kQueueCapacity again.
  for (std::uint32_t i = 0; i < kQueueCapacity; ++i) REQUIRE(q->try_push(batch(100 + i)));
  CHECK_FALSE(q->try_push(batch(0)));
  REQUIRE(q->try_pop(m));
  CHECK(m.slot == 100);
}

TEST_CASE(
    "SpscQueue: a producer and a consumer thread pass 300000 messages, none lost or "
    "reordered",
    "[spsc]") {
  auto q = make_queue();
  constexpr std::uint32_t kMessages = 300'000;
  std::thread producer([&] {
    for (std::uint32_t i = 0; i < kMessages; ++i) {
      const Message m{i % 1000 == 999 ? MessageKind::kStop : MessageKind::kBatch, i};
      while (!q->try_push(m)) std::this_thread::yield();  // full: the consumer is behind
    }
  });
  std::uint32_t expected = 0;
  std::uint32_t out_of_order = 0;
  std::uint32_t wrong_kind = 0;
  Message m{};
  while (expected < kMessages) {
    if (!q->try_pop(m)) {
      std::this_thread::yield();
      continue;
    }
    if (m.slot != expected) ++out_of_order;
    const MessageKind kind = expected % 1000 == 999 ? MessageKind::kStop : MessageKind::kBatch;
    if (m.kind != kind) ++wrong_kind;
    expected = m.slot + 1;
  }
  producer.join();
  CHECK(out_of_order == 0);
  CHECK(wrong_kind == 0);
  CHECK(expected == kMessages);
  CHECK_FALSE(q->try_pop(m));  // nothing beyond the last
}
