// Small text helpers for messages: byte sizes and durations as people read them.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace stoker::detail {

std::string format_bytes(std::size_t bytes);              // "512 B", "9.2 MiB", "1.0 GiB"
std::string format_duration(std::chrono::nanoseconds d);  // "12.3 ms"
std::string format_count(double value);                   // "9,700" (rounded to a whole number)

}  // namespace stoker::detail
