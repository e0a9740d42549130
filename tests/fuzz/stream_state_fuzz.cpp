// libFuzzer target for the stream resume-state parser behind ShardedStream::load_state()
// (src/datasets/shards/stream_state.hpp; build with clang: -DSTOKER_BUILD_FUZZ=ON).
//   build/fuzz/tests/fuzz/stream_state_fuzz -max_total_time=60
// Any text must be rejected with std::invalid_argument or parse to a state whose
// format_stream_state() text parses back to the same state (and formats to the same text).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "datasets/shards/stream_state.hpp"

namespace {

using stoker::detail::StreamState;

bool same(const StreamState& a, const StreamState& b) {
  return a.epoch == b.epoch && a.seed == b.seed && a.total == b.total && a.shards == b.shards &&
         a.world == b.world && a.rank == b.rank && a.workers == b.workers && a.policy == b.policy &&
         a.batches == b.batches && a.delivered == b.delivered;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  StreamState parsed;
  try {
    parsed = stoker::detail::parse_stream_state(text);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  if (parsed.rank >= parsed.world) std::abort();
  if (parsed.delivered.size() != (parsed.workers == 0 ? 1 : parsed.workers)) std::abort();
  if (parsed.policy != "pad" && parsed.policy != "drop") std::abort();
  const std::string formatted = stoker::detail::format_stream_state(parsed);
  const StreamState again = stoker::detail::parse_stream_state(formatted);  // must not throw
  if (!same(parsed, again)) std::abort();
  if (stoker::detail::format_stream_state(again) != formatted) std::abort();
  return 0;
}
