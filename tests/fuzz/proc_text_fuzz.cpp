// libFuzzer target for the /proc text parsers of the tree memory reader (src/os/proc.hpp: the
// shared-memory lines of maps, statm, smaps_rollup's kB fields; build with clang:
// -DSTOKER_BUILD_FUZZ=ON).
//   build/fuzz/tests/fuzz/proc_text_fuzz -max_total_time=60
// Any text must parse without reading outside it: each mapping found is a range that ends
// after it starts, named by a non-empty view inside the text that starts like shared memory,
// and found again when its own line is parsed alone; statm's shared pages never exceed the
// resident ones.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "os/proc.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const stoker::detail::ShmemMapping& m : stoker::detail::parse_shmem_mappings(text)) {
    if (m.end <= m.start || m.name.empty()) std::abort();
    if (m.name.data() < text.data() || m.name.data() + m.name.size() > text.data() + text.size()) {
      std::abort();
    }
    if (m.name.front() != '/' || m.name.find('\n') != std::string_view::npos) std::abort();
    // The line it came from, alone, gives the same mapping.
    const std::size_t from =
        text.rfind('\n', static_cast<std::size_t>(m.name.data() - text.data()));
    const std::size_t line_start = from == std::string_view::npos ? 0 : from + 1;
    const std::string line(text.substr(
        line_start,
        static_cast<std::size_t>(m.name.data() + m.name.size() - (text.data() + line_start))));
    const auto again = stoker::detail::parse_shmem_mappings(line);
    if (again.size() != 1 || again[0].start != m.start || again[0].end != m.end ||
        again[0].inode != m.inode || again[0].device != m.device || again[0].name != m.name) {
      std::abort();
    }
  }
  if (const auto pages = stoker::detail::parse_statm(text)) {
    if (pages->shared > pages->resident) std::abort();
  }
  (void)stoker::detail::parse_kb_field(text, "Pss_Anon");
  (void)stoker::detail::parse_process_memory(text);
  return 0;
}
