// libFuzzer target for the IDX header parser behind MnistDataset (build with clang:
// -DSTOKER_BUILD_FUZZ=ON).
//   build-fuzz/tests/fuzz/idx_header_fuzz -max_total_time=60
// Any input must be parsed consistently or rejected with IdxFormatError.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "stoker/mnist_dataset.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const stoker::IdxHeader h = stoker::parse_idx_header(bytes, "fuzz");
    // The header fits in the input, its dimensions are the ones declared, and the data size
    // is their product times the element size, without overflow.
    if (h.data_offset > size || h.data_offset != 4 + 4 * h.dims.size()) std::abort();
    std::size_t expected = stoker::dtype_size(h.dtype);
    for (const std::uint64_t d : h.dims) expected *= static_cast<std::size_t>(d);
    if (expected != h.data_bytes || h.data_bytes > SIZE_MAX - h.data_offset) std::abort();
  } catch (const stoker::IdxFormatError&) {
  }
  return 0;
}
