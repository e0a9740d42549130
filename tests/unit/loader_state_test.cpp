// loader/loader_state.hpp: DataLoader::state() text. A round trip through capture_state,
// format_state, parse_state and apply_state, every rejection of parse_loader_state() with its
// message, and apply_state()'s checks (another epoch size, a 'done' batch listed twice).
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "loader/epoch_plan.hpp"
#include "loader/loader_state.hpp"
#include "support/error_message.hpp"

using namespace stoker;
using namespace stoker::detail;
using stoker::test::message_of;

namespace {

// A plan of 100 samples in batches of 8 (13 batches, the last of 4).
EpochPlan plan_of(std::uint64_t epoch, std::size_t samples = 100, std::size_t batch_size = 8) {
  LoaderOptions options;
  options.batch_size = batch_size;
  options.shuffle = true;
  options.seed = 5;
  return make_plan(options, false, 2, 1, epoch, samples);
}

// A valid state's text with line `key` replaced by `line` (or removed when `line` is empty).
std::string state_with(const std::string& key, const std::string& line) {
  const std::vector<std::pair<std::string, std::string>> lines{{"magic", "stoker-loader-state 1"},
                                                               {"epoch", "epoch 3"},
                                                               {"seed", "seed 42"},
                                                               {"samples", "samples 1000"},
                                                               {"batches", "batches 32"},
                                                               {"position", "position 7"},
                                                               {"done", "done 9 12"},
                                                               {"skipped", "skipped 0"}};
  std::string text;
  for (const auto& [k, l] : lines) {
    const std::string& chosen = k == key ? line : l;
    if (!chosen.empty()) text += chosen + "\n";
  }
  return text;
}

std::string rejection(const std::string& text) {
  return message_of<std::invalid_argument>([&] { (void)parse_loader_state(text); });
}

constexpr const char* kNotAState =
    "DataLoader::load_state: this is not a state saved by DataLoader::state() (version 1)";

}  // namespace

TEST_CASE("loader state: the documented text parses", "[loader_state]") {
  const LoaderState s = parse_loader_state(state_with("", ""));
  CHECK(s.epoch == 3);
  CHECK(s.seed == 42);
  CHECK(s.dataset_size == 1000);
  CHECK(s.num_batches == 32);
  CHECK(s.position == 7);
  CHECK(s.extra_done == std::vector<std::size_t>{9, 12});
  CHECK(s.skipped == 0);
  CHECK(format_state(s) == state_with("", ""));
}

TEST_CASE("loader state: capture, format, parse and apply give back the plan's progress",
          "[loader_state]") {
  EpochPlan plan = plan_of(4);
  REQUIRE(plan.num_batches == 13);
  // Delivered: 0..4 in order, and 7 and 10 out of order.
  for (const std::size_t k : {0U, 1U, 2U, 3U, 4U, 7U, 10U}) plan.mark_delivered(k);
  const LoaderState captured = capture_state(plan, 5, 3);
  CHECK(captured.epoch == 4);
  CHECK(captured.seed == 5);
  CHECK(captured.dataset_size == 100);
  CHECK(captured.num_batches == 13);
  CHECK(captured.position == 5);
  CHECK(captured.extra_done == std::vector<std::size_t>{7, 10});
  CHECK(captured.skipped == 3);

  const std::string text = format_state(captured);
  const LoaderState parsed = parse_loader_state(text);
  CHECK(parsed.epoch == captured.epoch);
  CHECK(parsed.seed == captured.seed);
  CHECK(parsed.dataset_size == captured.dataset_size);
  CHECK(parsed.num_batches == captured.num_batches);
  CHECK(parsed.position == captured.position);
  CHECK(parsed.extra_done == captured.extra_done);
  CHECK(parsed.skipped == captured.skipped);
  CHECK(format_state(parsed) == text);

  EpochPlan fresh = plan_of(4);
  apply_state(parsed, fresh);
  CHECK(fresh.done == plan.done);
  CHECK(fresh.delivered == 7);
  CHECK(fresh.next_in_order == 5);
  CHECK(fresh.issued == 5);
  // And the fresh plan captures to the same state.
  const LoaderState again = capture_state(fresh, 5, 3);
  CHECK(format_state(again) == text);
}

TEST_CASE("loader state: a fresh epoch and a finished one", "[loader_state]") {
  EpochPlan plan = plan_of(0);
  const LoaderState start = capture_state(plan, 5, 0);
  CHECK(start.position == 0);
  CHECK(start.extra_done.empty());
  CHECK(format_state(start).find("\ndone\n") != std::string::npos);  // an empty 'done' line
  CHECK(parse_loader_state(format_state(start)).extra_done.empty());

  for (std::size_t k = 0; k < plan.num_batches; ++k) plan.mark_delivered(k);
  const LoaderState end = parse_loader_state(format_state(capture_state(plan, 5, 0)));
  CHECK(end.position == plan.num_batches);
  CHECK(end.extra_done.empty());
}

TEST_CASE("loader state: lines in another order, blanks between fields, an unknown line",
          "[loader_state]") {
  const LoaderState s = parse_loader_state(
      "stoker-loader-state 1\nposition 2\ndone 5\nbatches 6\nsamples 40\n"
      "seed   9\nepoch\t1\nnote written by a newer version\n");
  CHECK(s.epoch == 1);
  CHECK(s.seed == 9);
  CHECK(s.dataset_size == 40);
  CHECK(s.num_batches == 6);
  CHECK(s.position == 2);
  CHECK(s.extra_done == std::vector<std::size_t>{5});
  CHECK(s.skipped == 0);  // optional
}

TEST_CASE("loader state: rejects text that is not a state", "[loader_state]") {
  CHECK(rejection(state_with("magic", "stoker-loader-stat 1")) == kNotAState);
  CHECK(rejection(state_with("magic", "")) == kNotAState);
  CHECK(rejection("") == kNotAState);
  CHECK(rejection("{\"epoch\": 3}") == kNotAState);
}

TEST_CASE("loader state: rejects another version", "[loader_state]") {
  CHECK(rejection(state_with("magic", "stoker-loader-state 2")) == kNotAState);
  CHECK(rejection(state_with("magic", "stoker-loader-state 0")) == kNotAState);
  CHECK(rejection(state_with("magic", "stoker-loader-state one")) == kNotAState);
}

TEST_CASE("loader state: rejects a line it cannot read", "[loader_state]") {
  CHECK(rejection(state_with("epoch", "epoch three")) ==
        "DataLoader::load_state: cannot read the line 'epoch three'");
  CHECK(rejection(state_with("seed", "seed")) ==
        "DataLoader::load_state: cannot read the line 'seed'");
  CHECK(rejection(state_with("samples", "samples -")) ==
        "DataLoader::load_state: cannot read the line 'samples -'");
  CHECK(rejection(state_with("batches", "batches x32")) ==
        "DataLoader::load_state: cannot read the line 'batches x32'");
  CHECK(rejection(state_with("position", "position 99999999999999999999999")) ==
        "DataLoader::load_state: cannot read the line 'position 99999999999999999999999'");
  CHECK(rejection(state_with("skipped", "skipped ?")) ==
        "DataLoader::load_state: cannot read the line 'skipped ?'");
  CHECK(rejection(state_with("skipped", "skipped 0\n\nskipped 1")) ==
        "DataLoader::load_state: cannot read the line ''");  // an empty line
}

TEST_CASE("loader state: rejects junk on the 'done' line", "[loader_state]") {
  CHECK(rejection(state_with("done", "done 9 x 12")) ==
        "DataLoader::load_state: cannot read the line 'done 9 x 12'");
  CHECK(rejection(state_with("done", "done 9 12,")) ==
        "DataLoader::load_state: cannot read the line 'done 9 12,'");
  CHECK(rejection(state_with("done", "done nine")) ==
        "DataLoader::load_state: cannot read the line 'done nine'");
}

TEST_CASE("loader state: rejects a state without a required line", "[loader_state]") {
  for (const char* key : {"epoch", "seed", "samples", "batches", "position"}) {
    INFO("without '" << key << "'");
    CHECK(rejection(state_with(key, "")) ==
          std::string("DataLoader::load_state: the state has no '") + key + "' line");
  }
  // 'done' and 'skipped' may be left out.
  CHECK(parse_loader_state(state_with("done", "")).extra_done.empty());
  CHECK(parse_loader_state(state_with("skipped", "")).skipped == 0);
}

TEST_CASE("loader state: rejects a position past the batches", "[loader_state]") {
  CHECK(rejection(state_with("position", "position 33")) ==
        "DataLoader::load_state: position 33 is past the epoch's 32 batches");
  // At the end is a finished epoch, not an error.
  CHECK(parse_loader_state("stoker-loader-state 1\nepoch 3\nseed 42\nsamples 1000\nbatches 32\n"
                           "position 32\n")
            .position == 32);
}

TEST_CASE("loader state: rejects a 'done' batch out of place", "[loader_state]") {
  SECTION("below the position: already inside the in-order prefix") {
    CHECK(rejection(state_with("done", "done 9 6")) ==
          "DataLoader::load_state: batch 6 in 'done' is out of place");
  }
  SECTION("at the epoch's batch count") {
    CHECK(rejection(state_with("done", "done 32")) ==
          "DataLoader::load_state: batch 32 in 'done' is out of place");
  }
  SECTION("after it") {
    CHECK(rejection(state_with("done", "done 9 1000")) ==
          "DataLoader::load_state: batch 1000 in 'done' is out of place");
  }
  // The position itself and the last batch are in place.
  CHECK(parse_loader_state(state_with("done", "done 7 31")).extra_done ==
        std::vector<std::size_t>{7, 31});
}

TEST_CASE("loader state: apply_state refuses another epoch size", "[loader_state]") {
  EpochPlan plan = plan_of(3);  // 100 samples in 13 batches
  LoaderState other_batches = capture_state(plan, 5, 0);
  other_batches.num_batches = 12;
  CHECK(message_of<std::invalid_argument>([&] { apply_state(other_batches, plan); }) ==
        "DataLoader::load_state: the state was saved for 100 samples in 12 batches, but epoch 3 "
        "here has 100 samples in 13 batches; resume with the same dataset, batch_size, drop_last "
        "and sampler");
  LoaderState other_samples = capture_state(plan, 5, 0);
  other_samples.dataset_size = 99;
  CHECK(message_of<std::invalid_argument>([&] { apply_state(other_samples, plan); }) ==
        "DataLoader::load_state: the state was saved for 99 samples in 13 batches, but epoch 3 "
        "here has 100 samples in 13 batches; resume with the same dataset, batch_size, drop_last "
        "and sampler");
  // Nothing was marked by the refused states.
  CHECK(plan.delivered == 0);
  CHECK(std::count(plan.done.begin(), plan.done.end(), 1) == 0);
}

TEST_CASE("loader state: a 'done' batch listed twice counts once", "[loader_state]") {
  const LoaderState s = parse_loader_state(
      "stoker-loader-state 1\nepoch 0\nseed 5\nsamples 100\nbatches 13\n"
      "position 2\ndone 6 9 6\ndone 9\n");
  CHECK(s.extra_done == std::vector<std::size_t>{6, 9, 6, 9});
  EpochPlan plan = plan_of(0);
  apply_state(s, plan);
  CHECK(plan.delivered == 4);  // 0, 1, 6, 9
  CHECK(plan.next_in_order == 2);
  CHECK(plan.issued == 2);
  std::vector<std::uint8_t> want(13, 0);
  for (const std::size_t k : {0U, 1U, 6U, 9U}) want[k] = 1;
  CHECK(plan.done == want);
}

TEST_CASE("loader state: a sampler's order key, world size and rank travel with the state",
          "[loader_state]") {
  EpochPlan plan = plan_of(2);
  for (const std::size_t k : {0U, 1U, 2U}) plan.mark_delivered(k);
  const OrderInfo order{"shard-shuffle/1 seed=7 partitions=4", 4, 1};
  const std::string text = format_state(capture_state(plan, 5, 0, order));
  CHECK(text.find("\norder shard-shuffle/1 seed=7 partitions=4\nworld 4\nrank 1\n") !=
        std::string::npos);
  const LoaderState parsed = parse_loader_state(text);
  CHECK(parsed.order == order.key);
  CHECK(parsed.world_size == 4);
  CHECK(parsed.rank == 1);
  CHECK(format_state(parsed) == text);
  // Without a key, none of the three lines is written.
  const std::string plain = format_state(capture_state(plan, 5, 0));
  CHECK(plain.find("order") == std::string::npos);
  CHECK(plain.find("world") == std::string::npos);
  // Blanks after the key are not part of it.
  CHECK(parse_loader_state(state_with("skipped", "order a b \t\r")).order == "a b");
}

TEST_CASE("loader state: rejects an empty order key and a rank not below the world size",
          "[loader_state]") {
  CHECK(rejection(state_with("skipped", "order ")) ==
        "DataLoader::load_state: cannot read the line 'order '");
  CHECK(rejection(state_with("skipped", "order x\nworld 4\nrank 4")) ==
        "DataLoader::load_state: rank 4 is not below the world size 4");
  CHECK(rejection(state_with("skipped", "order x\nworld 0")) ==
        "DataLoader::load_state: rank 0 is not below the world size 0");
  CHECK(rejection(state_with("skipped", "world two")) ==
        "DataLoader::load_state: cannot read the line 'world two'");
}

TEST_CASE("loader state: check_order refuses another order and out-of-order batches elsewhere",
          "[loader_state]") {
  LoaderState saved =
      parse_loader_state(state_with("done", "done") + "order shard-shuffle/1 a\nworld 4\nrank 0\n");
  // Another world size and rank: fine for an in-order state.
  CHECK_NOTHROW(check_order(saved, OrderInfo{"shard-shuffle/1 a", 2, 1}));
  CHECK(message_of<std::invalid_argument>([&] {
          check_order(saved, OrderInfo{"shard-shuffle/1 b", 4, 0});
        }) ==
        "DataLoader::load_state: the state was saved under the order 'shard-shuffle/1 a', but "
        "this loader's sampler gives 'shard-shuffle/1 b'; resume with the sampler built as it "
        "was (the same shards, seed and options; with ShardShuffle only the world size may "
        "change)");
  CHECK(message_of<std::invalid_argument>([&] { check_order(saved, OrderInfo{}); }) ==
        "DataLoader::load_state: the state was saved under the order 'shard-shuffle/1 a', but "
        "this loader's sampler gives '(none)'; resume with the sampler built as it was (the "
        "same shards, seed and options; with ShardShuffle only the world size may change)");
  saved.extra_done = {9, 12};
  CHECK_NOTHROW(check_order(saved, OrderInfo{"shard-shuffle/1 a", 4, 0}));
  CHECK(message_of<std::invalid_argument>([&] {
          check_order(saved, OrderInfo{"shard-shuffle/1 a", 2, 0});
        }) ==
        "DataLoader::load_state: the state has 2 batches handed out of order (in_order = "
        "false) by rank 0 of 4, which other ranks may not have had; this is rank 0 of 2: "
        "resume each rank from its own state on the same world size, or save states with "
        "in_order = true");
  CHECK_THROWS_AS(check_order(saved, OrderInfo{"shard-shuffle/1 a", 4, 3}), std::invalid_argument);
  // A state without an 'order' line (saved before keys, or without a keyed sampler) is not
  // checked.
  const LoaderState old = parse_loader_state(state_with("", ""));
  CHECK_NOTHROW(check_order(old, OrderInfo{"distributed/1 replicas=4", 4, 2}));
}

TEST_CASE("loader state: in order, delivery steps past batches the state marked done",
          "[loader_state]") {
  // A state saved out of order (batch 8 handed out before 6 and 7) resumed by a loader that
  // delivers in order: after batch 7 comes 9, not a wait for 8, which is never loaded again.
  EpochPlan plan = plan_of(0);
  apply_state(parse_loader_state("stoker-loader-state 1\nepoch 0\nseed 5\nsamples 100\n"
                                 "batches 13\nposition 7\ndone 8\n"),
              plan);
  REQUIRE(plan.next_in_order == 7);
  plan.mark_delivered(7);
  CHECK(plan.next_in_order == 9);
  plan.mark_delivered(9);
  CHECK(plan.next_in_order == 10);
}
