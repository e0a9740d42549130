// libFuzzer target for the .npy header parser (build with clang: -DSTOKER_BUILD_FUZZ=ON).
//   build-fuzz/tests/fuzz/npy_header_fuzz -max_total_time=60
// Any input must be parsed consistently or rejected with NpyFormatError.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "stoker/npy_dataset.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const stoker::NpyArray a = stoker::parse_npy_header(bytes, "fuzz");
    if (a.data_offset > size || stoker::dtype_size(a.dtype) == 0) std::abort();
  } catch (const stoker::NpyFormatError&) {
  }
  return 0;
}
