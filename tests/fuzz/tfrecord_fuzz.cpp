// libFuzzer target for TFRecord framing (build with clang: -DSTOKER_BUILD_FUZZ=ON).
//   build-fuzz/tests/fuzz/tfrecord_fuzz -max_total_time=60
// Any bytes are indexed as a file and read as a stream: every record found lies inside the
// input, and a bad frame is a TFRecordError, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "datasets/records/compression.hpp"
#include "datasets/records/tfrecord.hpp"
#include "stoker/tfrecord_dataset.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stoker::detail;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  for (const bool verify : {true, false}) {
    const TFRecordIndex index = index_tfrecords(bytes, verify);
    for (std::size_t i = 0; i < index.entries.size(); ++i) {
      const std::uint64_t e = index.entries[i];
      if ((e & TFRecordIndex::kBadEntry) != 0) {
        const auto& region = index.bad_regions.at(e & ~TFRecordIndex::kBadEntry);
        if (region.resume > size || region.offset >= region.resume) std::abort();
        continue;
      }
      try {
        const auto record = tfrecord_data(bytes, e, verify, "fuzz", i);
        if (record.data() < bytes.data() || record.data() + record.size() > bytes.data() + size) {
          std::abort();
        }
      } catch (const stoker::TFRecordError&) {
      }
    }
    TFRecordStream stream(memory_source(bytes), "fuzz", verify, 0, 0, 1 << 20);
    for (std::size_t n = 0; n < size + 2; ++n) {
      try {
        if (!stream.next()) break;
      } catch (const stoker::TFRecordError&) {
      }
    }
  }
  return 0;
}
