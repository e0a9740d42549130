// libFuzzer target for MDS index.json parsing (build with clang: -DSTOKER_BUILD_FUZZ=ON).
//   build-fuzz/tests/fuzz/mds_index_fuzz -max_total_time=60
// Any text parses into a checked index or raises MdsError.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "datasets/records/mds_index.hpp"
#include "stoker/mds_dataset.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stoker::detail;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const MdsIndex index = parse_mds_index(text, "fuzz");
    for (const MdsShardInfo& s : index.shards) {
      if (s.columns.empty() || s.raw.bytes >= (std::uint64_t{1} << 32)) std::abort();
      for (const MdsColumn& c : s.columns) {
        if (c.size.has_value() != c.encoding.size.has_value()) std::abort();
      }
    }
  } catch (const stoker::MdsError&) {
  }
  return 0;
}
