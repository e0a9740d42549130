#include "datasets/shards/stream_state.hpp"

#include <algorithm>
#include <charconv>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace stoker::detail {
namespace {

constexpr std::string_view kStateMagic = "stoker-stream";
constexpr int kStateVersion = 1;

}  // namespace

std::string_view policy_name(EqualBatches p) { return p == EqualBatches::kPad ? "pad" : "drop"; }

bool parse_u64(std::string_view text, std::uint64_t& out) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

StreamState parse_stream_state(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return std::invalid_argument(
        fmt::format("ShardedStream::load_state: not a stream state ({}): \"{}\"; pass the text "
                    "ShardedStream::state() returned",
                    why, text.substr(0, 200)));
  };
  StreamState s;
  std::size_t pos = 0;
  int field = 0;
  bool have[10] = {};  // the keys below, then policy and delivered
  while (pos < text.size()) {
    const std::size_t space = text.find(' ', pos);
    const std::string_view word =
        text.substr(pos, space == std::string_view::npos ? std::string_view::npos : space - pos);
    pos = space == std::string_view::npos ? text.size() : space + 1;
    if (word.empty()) continue;
    if (field == 0) {
      if (word != kStateMagic) throw bad("it does not start with stoker-stream");
    } else if (field == 1) {
      if (word != std::to_string(kStateVersion)) throw bad("an unknown version");
    } else {
      const std::size_t eq = word.find('=');
      if (eq == std::string_view::npos) throw bad(fmt::format("'{}' is not key=value", word));
      const std::string_view key = word.substr(0, eq);
      const std::string_view value = word.substr(eq + 1);
      const std::pair<std::string_view, std::uint64_t*> numbers[] = {
          {"epoch", &s.epoch}, {"seed", &s.seed}, {"total", &s.total},     {"shards", &s.shards},
          {"world", &s.world}, {"rank", &s.rank}, {"workers", &s.workers}, {"batches", &s.batches}};
      bool known = false;
      for (std::size_t i = 0; i < std::size(numbers); ++i) {
        if (key != numbers[i].first) continue;
        if (!parse_u64(value, *numbers[i].second))
          throw bad(fmt::format("{} is not a number", key));
        have[i] = known = true;
      }
      if (key == "policy") {
        if (value != "pad" && value != "drop") throw bad("policy is neither pad nor drop");
        s.policy = std::string(value);
        have[8] = known = true;
      } else if (key == "delivered") {
        std::string_view rest = value;
        while (!rest.empty()) {
          const std::size_t comma = rest.find(',');
          std::uint64_t v = 0;
          if (!parse_u64(rest.substr(0, comma), v)) throw bad("delivered is not a number list");
          s.delivered.push_back(v);
          if (comma == std::string_view::npos) break;
          rest.remove_prefix(comma + 1);
        }
        have[9] = known = true;
      }
      if (!known) throw bad(fmt::format("unknown key '{}'", key));
    }
    ++field;
  }
  for (const bool h : have) {
    if (!h) throw bad("a key is missing");
  }
  if (s.delivered.size() != std::max<std::uint64_t>(s.workers, 1) || s.rank >= s.world) {
    throw bad("its counts do not agree");
  }
  return s;
}

std::string format_stream_state(const StreamState& s) {
  std::string delivered;
  for (std::size_t w = 0; w < s.delivered.size(); ++w) {
    delivered += fmt::format("{}{}", w == 0 ? "" : ",", s.delivered[w]);
  }
  return fmt::format(
      "{} {} epoch={} seed={} total={} shards={} world={} rank={} workers={} policy={} "
      "batches={} delivered={}",
      kStateMagic, kStateVersion, s.epoch, s.seed, s.total, s.shards, s.world, s.rank, s.workers,
      s.policy, s.batches, delivered);
}

}  // namespace stoker::detail
