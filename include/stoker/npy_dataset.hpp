// NpyDataset: samples from NumPy .npy files, memory-mapped, so a file larger than RAM is served
// without being read whole: only the pages of the samples a worker loads are read. Each file is
// a field and its first dimension indexes the samples (images.npy + labels.npy). Little-endian
// data reaches the batch with one copy (from the mapping into the slot); big-endian data is
// byte-swapped on the way. Also: the .npy header parser and writer it is built on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoker/errors.hpp"
#include "stoker/sample.hpp"
#include "stoker/tensor.hpp"

namespace stoker {
namespace detail {
class MappedFile;
}

// What a .npy header says (format versions 1.0, 2.0 and 3.0).
struct NpyArray {
  int major_version = 1;
  int minor_version = 0;
  DType dtype = DType::kUInt8;
  bool big_endian = false;
  std::vector<std::int64_t> shape;  // () for a 0-d array
  std::size_t data_offset = 0;      // where the data starts in the file
  std::size_t data_bytes = 0;       // product(shape) x element size
};

// A malformed or unsupported .npy file: the message names the file and what is wrong.
class NpyFormatError : public Error {
 public:
  using Error::Error;
};

// Parses the header at the start of `bytes` (the file's first bytes; more is fine). Never
// reads past `bytes`. Throws NpyFormatError naming `source` for a bad magic, an unsupported
// version, a malformed header dictionary, Fortran order, or a dtype stoker cannot carry
// (object, string, structured, complex, datetime).
NpyArray parse_npy_header(std::span<const std::byte> bytes, std::string_view source = "<memory>");

// The header of a little-endian, C-order .npy file (version 1.0, or 2.0 when the header needs
// more than 64 KiB), padded so the data is 64-byte aligned. Write the data after it.
std::vector<std::byte> make_npy_header(DType dtype, std::span<const std::int64_t> shape);

class NpyDataset {
 public:
  // One field per file. Throws NpyFormatError for a bad file, stoker::Error when a file cannot
  // be opened or mapped (naming it and the reason), std::invalid_argument when the files'
  // first dimensions differ, a file is 0-d, or a sample would have more than 7 dimensions.
  explicit NpyDataset(std::vector<std::pair<std::string, std::string>> field_files);
  // A single file, as the field `field`.
  explicit NpyDataset(const std::string& path, const std::string& field = "data")
      : NpyDataset(std::vector<std::pair<std::string, std::string>>{{field, path}}) {}

  std::size_t size() const noexcept { return size_; }
  // Either process. Little-endian fields are views into the mapping; big-endian ones are
  // swapped copies. Throws std::out_of_range for i >= size(); stoker::ShardError naming the file
  // and the row's offset when the file has shrunk since it was opened (no SIGBUS: see
  // docs/datasets.md).
  Sample get(std::size_t i) const;
  // The header of a field's file. Throws std::out_of_range for an unknown field.
  const NpyArray& array(std::string_view field) const;

 private:
  struct FieldFile {
    std::string name;
    std::string path;
    NpyArray array;
    Shape sample_shape;
    std::size_t sample_bytes = 0;
    std::shared_ptr<const detail::MappedFile> mapping;
  };
  [[noreturn]] void throw_shrunk(const FieldFile& field, std::size_t i, std::size_t at) const;
  std::vector<FieldFile> fields_;
  std::size_t size_ = 0;
};

}  // namespace stoker
