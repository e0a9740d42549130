// datasets/shards/stream_state.hpp: ShardedStream::state() text. The documented line parses and
// formats back to itself; every rejection of parse_stream_state() names its reason.
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>

#include "datasets/shards/stream_state.hpp"
#include "support/error_message.hpp"

using namespace stoker::detail;
using stoker::test::message_of;

namespace {

constexpr const char* kDocumented =
    "stoker-stream 1 epoch=2 seed=7 total=142 shards=5 world=3 rank=1 workers=2 policy=pad "
    "batches=4 delivered=15,10";

std::string rejection(const std::string& text) {
  return message_of<std::invalid_argument>([&] { (void)parse_stream_state(text); });
}

std::string reason(const std::string& text) {
  const std::string m = rejection(text);
  const std::size_t open = m.find('(');
  return m.substr(open + 1, m.find("): ") - open - 1);
}

}  // namespace

TEST_CASE("stream state: the documented line parses and formats back", "[stream_state]") {
  const StreamState s = parse_stream_state(kDocumented);
  CHECK(s.epoch == 2);
  CHECK(s.seed == 7);
  CHECK(s.total == 142);
  CHECK(s.shards == 5);
  CHECK(s.world == 3);
  CHECK(s.rank == 1);
  CHECK(s.workers == 2);
  CHECK(s.policy == "pad");
  CHECK(s.batches == 4);
  CHECK(s.delivered == std::vector<std::uint64_t>{15, 10});
  CHECK(format_stream_state(s) == kDocumented);
  CHECK(policy_name(stoker::EqualBatches::kDrop) == "drop");
}

TEST_CASE("stream state: each rejection says why", "[stream_state]") {
  CHECK(rejection("stoker-loader-state 1\nepoch 3") ==
        "ShardedStream::load_state: not a stream state (it does not start with stoker-stream): "
        "\"stoker-loader-state 1\nepoch 3\"; pass the text ShardedStream::state() returned");
  CHECK(reason("stoker-stream 2 epoch=1") == "an unknown version");
  CHECK(reason("stoker-stream 1 epoch") == "'epoch' is not key=value");
  CHECK(reason("stoker-stream 1 epoch=-1") == "epoch is not a number");
  CHECK(reason("stoker-stream 1 colour=red") == "unknown key 'colour'");
  CHECK(reason("stoker-stream 1 policy=wrap") == "policy is neither pad nor drop");
  CHECK(reason("stoker-stream 1 delivered=1,,2") == "delivered is not a number list");
  CHECK(reason("stoker-stream 1 epoch=1") == "a key is missing");
  std::string two_workers = kDocumented;
  two_workers.replace(two_workers.find("workers=2"), 9, "workers=3");
  CHECK(reason(two_workers) == "its counts do not agree");
  std::string bad_rank = kDocumented;
  bad_rank.replace(bad_rank.find("rank=1"), 6, "rank=3");
  CHECK(reason(bad_rank) == "its counts do not agree");
  bool ok = false;
  std::uint64_t v = 0;
  ok = parse_u64("18446744073709551616", v);  // 2^64
  CHECK_FALSE(ok);
  CHECK_FALSE(parse_u64("+1", v));
  CHECK_FALSE(parse_u64("", v));
  CHECK(parse_u64("18446744073709551615", v));
}
