// StreamState: ShardedStream::state() as text and back (include/stoker/shards.hpp), pure. One
// line of words: the magic and version, then key=value pairs, `delivered` a comma-separated
// list with one count per worker stream of the rank:
//
//   stoker-stream 1 epoch=2 seed=7 total=142 shards=5 world=3 rank=1 workers=2 policy=pad
//   batches=4 delivered=15,10
//
// (DataLoader::state() has its own grammar, in src/loader/loader_state.hpp.)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/shards.hpp"

namespace stoker::detail {

struct StreamState {
  std::uint64_t epoch = 0;
  std::uint64_t seed = 0;
  std::uint64_t total = 0;
  std::uint64_t shards = 0;
  std::uint64_t world = 1;
  std::uint64_t rank = 0;
  std::uint64_t workers = 0;
  std::string policy;                    // "pad" or "drop"
  std::uint64_t batches = 0;             // batches the consumer had received
  std::vector<std::uint64_t> delivered;  // records of each worker's stream of this rank
};

std::string_view policy_name(EqualBatches p);

// A whole decimal number (no sign, no blanks); false when `text` is anything else or overflows.
bool parse_u64(std::string_view text, std::uint64_t& out);

std::string format_stream_state(const StreamState& state);

// Throws std::invalid_argument ("ShardedStream::load_state: not a stream state (...)") for a
// wrong magic or version, a word that is not key=value, an unknown key, a value that is not a
// number, a missing key, or counts that disagree (delivered's length, rank >= world).
StreamState parse_stream_state(std::string_view text);

}  // namespace stoker::detail
