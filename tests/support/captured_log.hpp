// Routes stoker's logger into a string for a scope (and, optionally, sets its level), and
// counts occurrences in captured text. Tests link libstoker's spdlog, so they share its logger.
#pragma once

#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/sinks/ostream_sink.h>

#include "os/log.hpp"

namespace stoker::test {

class CapturedLog {
 public:
  explicit CapturedLog(std::optional<spdlog::level::level_enum> level = std::nullopt)
      : previous_sinks_(detail::logger().sinks()), previous_level_(detail::logger().level()) {
    detail::logger().sinks() = {std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)};
    if (level) detail::logger().set_level(*level);
  }
  ~CapturedLog() {
    detail::logger().sinks() = previous_sinks_;
    detail::logger().set_level(previous_level_);
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::vector<spdlog::sink_ptr> previous_sinks_;
  spdlog::level::level_enum previous_level_;
};

// How many times `what` occurs in `text` (overlapping occurrences count).
inline std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

}  // namespace stoker::test
