// libFuzzer target for the resume-state parser behind DataLoader::load_state()
// (src/loader/loader_state.hpp; build with clang: -DSTOKER_BUILD_FUZZ=ON).
//   build/fuzz/tests/fuzz/loader_state_fuzz -max_total_time=60
// Any text must be rejected with std::invalid_argument or parse to a state whose format_state()
// text parses back to the same state (and formats to the same text); world and rank travel
// only with an order key. check_order() against an empty and a keyed order must either pass or
// throw std::invalid_argument.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "loader/loader_state.hpp"

namespace {

using stoker::detail::LoaderState;

bool same(const LoaderState& a, const LoaderState& b) {
  return a.epoch == b.epoch && a.seed == b.seed && a.dataset_size == b.dataset_size &&
         a.num_batches == b.num_batches && a.position == b.position &&
         a.extra_done == b.extra_done && a.skipped == b.skipped && a.order == b.order &&
         (a.order.empty() || (a.world_size == b.world_size && a.rank == b.rank));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  LoaderState parsed;
  try {
    parsed = stoker::detail::parse_loader_state(text);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  if (parsed.position > parsed.num_batches) std::abort();
  if (parsed.rank >= parsed.world_size) std::abort();
  if (parsed.order.find('\n') != std::string::npos) std::abort();
  for (const std::size_t k : parsed.extra_done) {
    if (k < parsed.position || k >= parsed.num_batches) std::abort();
  }
  const std::string formatted = stoker::detail::format_state(parsed);
  const LoaderState again = stoker::detail::parse_loader_state(formatted);  // must not throw
  if (!same(parsed, again)) std::abort();
  if (stoker::detail::format_state(again) != formatted) std::abort();
  for (const stoker::OrderInfo& here :
       {stoker::OrderInfo{}, stoker::OrderInfo{parsed.order, 4, 1}}) {
    try {
      stoker::detail::check_order(parsed, here);
    } catch (const std::invalid_argument&) {
    }
  }
  return 0;
}
