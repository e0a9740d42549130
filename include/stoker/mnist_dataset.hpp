// MnistDataset: MNIST and the datasets published in its IDX format (Fashion-MNIST, KMNIST),
// read from the four files of the download, plain or gzip-compressed, as libtorch's
// torch::data::datasets::MNIST reads them: train or test mode, images [1, rows, cols] (float32
// in [0, 1] by default, or the file's uint8 bytes) and int64 labels. Also the IDX header
// parser it is built on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/errors.hpp"
#include "stoker/sample.hpp"
#include "stoker/tensor.hpp"

namespace stoker {
namespace detail {
class MappedFile;
}

// An IDX file's header: 0, 0, a type code, the number of dimensions, then each dimension as a
// big-endian uint32; the data follows, big-endian, row-major.
struct IdxHeader {
  std::uint8_t type_code = 0;  // 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32,
                               // 0x0E float64
  DType dtype = DType::kUInt8;
  std::vector<std::uint64_t> dims;
  std::size_t data_offset = 0;  // 4 + 4 x dims.size()
  std::size_t data_bytes = 0;   // the product of dims x the element size
};

class IdxFormatError : public Error {
 public:
  using Error::Error;
};

// Parses the header at the start of `bytes` (the data need not follow: data_bytes says how
// much should). Either process; pure. Throws IdxFormatError naming `source` for a bad magic
// number, an unknown type code, a header cut short, or a data size past SIZE_MAX.
IdxHeader parse_idx_header(std::span<const std::byte> bytes, std::string_view source = "<memory>");

struct MnistOptions {
  // kFloat32: each pixel / 255, in [0, 1], as libtorch's MNIST gives them; kUInt8: the file's
  // bytes (a quarter of the batch memory, and no conversion).
  DType image_dtype = DType::kFloat32;
};

class MnistDataset {
 public:
  enum class Mode { kTrain, kTest };

  // Reads `root`/train-images-idx3-ubyte and train-labels-idx1-ubyte (kTrain) or
  // t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (kTest), each as it is or with ".gz"
  // (also the "train-images.idx3-ubyte" spelling). Plain files are memory-mapped; compressed
  // ones are decompressed into memory that the workers share (copy-on-write). Main process,
  // before the loader forks; blocks while it reads the files. Throws stoker::Error naming the file
  // when one is missing or unreadable, IdxFormatError when a file is not IDX, is not uint8 images
  // [N, rows, cols] / labels [N], is cut short or has bytes after its data, or when the image and
  // label files hold different counts; std::invalid_argument for an image dtype other than kFloat32
  // or kUInt8.
  explicit MnistDataset(const std::string& root, Mode mode = Mode::kTrain,
                        MnistOptions options = {});

  std::size_t size() const noexcept { return size_; }
  // "image": [1, rows, cols] of options.image_dtype (uint8: a view of the file's bytes);
  // "label": an int64 scalar. Either process. Throws std::out_of_range for i >= size();
  // stoker::ShardError naming the images file when it has shrunk since it was opened.
  Sample get(std::size_t i) const;

  bool is_train() const noexcept { return mode_ == Mode::kTrain; }
  // Every image, uint8 [N, 1, rows, cols], and every label, int64 [N] (read-only views).
  const Tensor& images() const noexcept { return images_; }
  const Tensor& labels() const noexcept { return labels_; }
  const std::string& images_path() const noexcept { return images_path_; }
  const std::string& labels_path() const noexcept { return labels_path_; }

 private:
  Mode mode_;
  MnistOptions options_;
  std::size_t size_ = 0;
  Tensor images_;
  Tensor labels_;
  std::shared_ptr<const detail::MappedFile> images_file_;  // plain files: the mapping images_ views
  std::string images_path_;
  std::string labels_path_;
};

}  // namespace stoker
