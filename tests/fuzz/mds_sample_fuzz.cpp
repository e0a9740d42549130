// libFuzzer target for MDS shards and samples (build with clang: -DSTOKER_BUILD_FUZZ=ON).
//   build-fuzz/tests/fuzz/mds_sample_fuzz -max_total_time=60
// The input's first byte picks a column layout; the rest is checked as a whole shard and cut
// and decoded as one sample. Bad bytes raise MdsError, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "datasets/records/mds_index.hpp"
#include "datasets/records/mds_shard.hpp"
#include "stoker/mds_dataset.hpp"

namespace {

using namespace stoker::detail;

std::vector<MdsColumn> layout(std::uint8_t pick) {
  static const char* const kEncodings[] = {
      "bytes",   "str",       "int",     "uint16",        "float64",
      "str_int", "str_float", "ndarray", "ndarray:int32", "ndarray:uint8:2,3",
      "pil",     "json"};
  constexpr std::size_t kCount = sizeof(kEncodings) / sizeof(kEncodings[0]);
  std::vector<MdsColumn> columns;
  for (std::size_t c = 0; c < 3; ++c) {
    MdsColumn column;
    column.name = "c" + std::to_string(c);
    column.encoding = parse_mds_encoding(kEncodings[(pick + 5 * c) % kCount]);
    if (column.encoding.size) column.size = static_cast<std::uint32_t>(*column.encoding.size);
    columns.push_back(std::move(column));
  }
  return columns;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data) + 1, size - 1);
  MdsShardInfo info;
  info.columns = layout(data[0]);
  info.raw.bytes = bytes.size();
  info.samples = bytes.size() >= 4 ? static_cast<std::uint8_t>(bytes[0]) : 0;
  try {
    check_mds_shard(bytes, info, "fuzz", "fuzz");
  } catch (const stoker::MdsError&) {
  }
  for (std::uint64_t k = 0; k < info.samples && 4 + 4 * k + 8 <= bytes.size(); ++k) {
    try {
      mds_sample_range(bytes.subspan(4 + 4 * k, 8), k, info, "fuzz", "fuzz");
    } catch (const stoker::MdsError&) {
    }
  }
  std::vector<MdsCell> cells;
  try {
    split_mds_sample(bytes, info.columns, cells, "fuzz", "fuzz");
    for (std::size_t c = 0; c < cells.size(); ++c) {
      if (cells[c].offset + cells[c].size > bytes.size()) std::abort();
      try {
        decode_mds_value(info.columns[c].encoding, bytes.subspan(cells[c].offset, cells[c].size),
                         "fuzz", "fuzz");
      } catch (const stoker::MdsError&) {
      }
    }
  } catch (const stoker::MdsError&) {
  }
  return 0;
}
