#include "os/assert.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "os/posix.hpp"

namespace stoker::detail {
namespace {

void put(const char* text) noexcept {
  (void)posix::write_all(STDERR_FILENO, text, std::strlen(text));
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
