// stoker's logger: spdlog, named "stoker", on stderr. Quiet beyond warnings unless the
// environment variable STOKER_LOG names a level (trace, debug, info, warn, error, off), so a
// program's own logging is left alone. Main process only: workers never log (a lock another
// thread held at fork() could hang them).
#pragma once

#include <spdlog/logger.h>

namespace stoker::detail {

spdlog::logger& logger();

}  // namespace stoker::detail
