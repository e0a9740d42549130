// TFRecordDataset: records of TensorFlow's TFRecord files (plain, gzip or zlib), each a
// tf.train.Example whose features become a Sample's named tensors. Map-style over an index of
// record offsets built once in the main process (workers inherit it), or streaming for
// compressed files and pipes. Also: TFRecordError, what a corrupt or truncated file raises.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "stoker/errors.hpp"

namespace stoker {

// A record that cannot be read: a bad checksum, a corrupt header, a truncated file. what() is
// "TFRecord: <file>: record <n> at byte <offset>: <what was wrong>; <what to do>".
class TFRecordError : public Error {
 public:
  TFRecordError(std::string message, std::string path, std::uint64_t offset)
      : Error(std::move(message)), path_(std::move(path)), offset_(offset) {}
  const std::string& path() const noexcept { return path_; }
  // The record's byte offset in the file (in the decompressed stream, for gzip and zlib files).
  std::uint64_t offset() const noexcept { return offset_; }

 private:
  std::string path_;
  std::uint64_t offset_ = 0;
};

}  // namespace stoker
