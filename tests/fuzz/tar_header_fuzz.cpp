// libFuzzer target for the WebDataset tar parser (build with clang: -DSTOKER_BUILD_FUZZ=ON).
//   build-fuzz/tests/fuzz/tar_header_fuzz -max_total_time=60
// Any bytes: one header block, pax records, and the whole input as a tar stream grouped into
// samples (data read), then indexed, the index serialised and parsed back. Nothing may crash
// or read outside the input, and what comes back must lie within it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "datasets/shards/byte_source.hpp"
#include "datasets/shards/tar_index.hpp"
#include "datasets/shards/tar_reader.hpp"

using namespace stoker::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  if (size >= kTarBlock) {
    TarHeader header;
    TarProblem problem = TarProblem::kNone;
    (void)parse_tar_header(bytes.first<kTarBlock>(), header, problem);
  }
  PaxOverrides pax;
  (void)parse_pax_records(bytes, pax);

  auto source = memory_source(bytes);
  TarSampleReader reader(
      *source, 0, [](const void*, std::string_view) { return true; }, nullptr);
  TarSample sample;
  std::uint64_t previous = 0;
  int samples = 0;
  while (reader.next(sample) && ++samples < 100000) {
    if (sample.offset < previous || sample.offset > size) std::abort();
    previous = sample.offset;
    if (sample.damage) continue;  // a bad record: its members are not used
    for (const TarSample::Member& m : sample.members) {
      if (m.data_offset > size || m.size > size - m.data_offset) std::abort();
      if (m.stored &&
          (m.stored_at > sample.storage.size() || m.size > sample.storage.size() - m.stored_at)) {
        std::abort();
      }
    }
  }
  auto again = memory_source(bytes);
  const TarIndex index = build_tar_index(*again);
  const auto parsed = parse_tar_index(serialize_tar_index(index), size);
  if (!parsed || parsed->records.size() != index.records.size()) std::abort();
  (void)parse_tar_index(bytes, size);  // the input as an index payload
  return 0;
}
