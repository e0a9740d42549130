// libFuzzer target for the tf.train.Example reader (build with clang: -DSTOKER_BUILD_FUZZ=ON).
//   build-fuzz/tests/fuzz/example_proto_fuzz -max_total_time=60
// Any bytes parse or raise ExampleFormatError; what parses can be read out in full, with every
// view inside the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "datasets/records/example_proto.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stoker::detail;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  ParsedExample ex;
  try {
    ex.parse(bytes);
  } catch (const ExampleFormatError&) {
    return 0;
  }
  std::vector<std::int64_t> ints;
  std::vector<float> floats;
  std::vector<std::span<const std::byte>> views;
  for (const ExampleFeature& f : ex.features()) {
    if (ex.find(f.name) == nullptr) std::abort();
    if (f.kind == FeatureKind::kInt64) {
      ints.resize(f.values);
      ex.copy_int64(f, ints.data());
    } else if (f.kind == FeatureKind::kFloat) {
      floats.resize(f.values);
      ex.copy_float(f, floats.data());
    } else if (f.kind == FeatureKind::kBytes) {
      views.clear();
      ex.bytes_values(f, views);
      if (views.size() != f.values) std::abort();
      for (const auto v : views) {
        if (v.data() < bytes.data() || v.data() + v.size() > bytes.data() + size) std::abort();
      }
    }
  }
  return 0;
}
