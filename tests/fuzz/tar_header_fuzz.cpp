// libFuzzer target for the WebDataset tar parser (build with clang: -DSTOKER_BUILD_FUZZ=ON).
//   build-fuzz/tests/fuzz/tar_header_fuzz -max_total_time=60
// Any bytes: one header block, pax records, and the whole input as a tar stream grouped into
// samples (data read), then indexed (field names as they are, and lower-cased), the index
// serialised and parsed back. Nothing may crash or read outside the input, and what comes back
// must lie within it. Lower-casing never changes how members group into samples. The input cut
// short never yields a good sample with fewer members than the whole input's sample at that
// offset, for cuts past a block's type field (byte 156): a cut at a block boundary looks like a
// tar without its end blocks, and a header cut before its type is read is taken for a regular
// member's, though it could be a link's or a directory's.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <span>
#include <vector>

#include "datasets/shards/byte_source.hpp"
#include "datasets/shards/tar_index.hpp"
#include "datasets/shards/tar_reader.hpp"

using namespace stoker::detail;

namespace {

struct Seen {
  std::size_t members = 0;
  std::uint64_t last_end = 0;  // the last member's data end
};

// The good samples of `bytes` by offset, and how many records there were.
std::size_t good_samples(std::span<const std::byte> bytes, bool lowercase,
                         std::map<std::uint64_t, Seen>& out) {
  auto source = memory_source(bytes);
  TarSampleReader reader(*source, 0, nullptr, nullptr, lowercase);
  TarSample sample;
  std::size_t records = 0;
  while (reader.next(sample, false) && ++records < 100000) {
    if (sample.damage || sample.members.empty()) continue;
    const TarSample::Member& last = sample.members.back();
    out[sample.offset] = Seen{sample.members.size(), last.data_offset + last.size};
  }
  return records;
}

}  // namespace

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

  std::map<std::uint64_t, Seen> whole;
  std::map<std::uint64_t, Seen> lowered;
  const std::size_t records = good_samples(bytes, false, whole);
  if (good_samples(bytes, true, lowered) != records) std::abort();
  auto lower_source = memory_source(bytes);
  if (build_tar_index(*lower_source, true).records.size() != records) std::abort();
  for (const std::size_t cut : {size / 3, size / 2, size - size / 5, size - 1}) {
    if (cut == 0 || cut >= size || cut % kTarBlock <= 156) continue;
    std::map<std::uint64_t, Seen> part;
    good_samples(bytes.first(cut), false, part);
    for (const auto& [offset, seen] : part) {
      const auto it = whole.find(offset);
      if (it == whole.end()) continue;  // damage grouped otherwise in the whole input
      // A good sample of the cut input that the whole input has longer must have lost a
      // member to the cut: it should have been a bad record.
      if (seen.members < it->second.members && seen.last_end <= cut) std::abort();
    }
  }
  return 0;
}
