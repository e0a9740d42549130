#include "os/log.hpp"

#include <cstdlib>
#include <memory>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace stoker::detail {

spdlog::logger& logger() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    std::shared_ptr<spdlog::logger> l = spdlog::get("stoker");
    if (!l) l = spdlog::stderr_color_mt("stoker");
    const char* level = std::getenv("STOKER_LOG");
    l->set_level(level != nullptr ? spdlog::level::from_str(level) : spdlog::level::warn);
    return l;
  }();
  return *logger;
}

}  // namespace stoker::detail
