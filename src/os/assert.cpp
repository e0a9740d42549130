#include "os/assert.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace stoker::detail {
namespace {

void put(const char* text) noexcept {
  std::size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<std::size_t>(n);
  }
}

}  // namespace

void assertion_failed(const char* rule, const char* condition, const char* file,
                      int line) noexcept {
  char number[16];
  std::size_t at = sizeof number - 1;
  number[at] = '\0';
  unsigned value = line > 0 ? static_cast<unsigned>(line) : 0U;
  do {
    number[--at] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0 && at > 0);
  put("stoker: internal invariant broken: ");
  put(rule);
  put(" (");
  put(condition);
  put(") at ");
  put(file);
  put(":");
  put(number + at);
  put("\n");
  std::abort();
}

}  // namespace stoker::detail
