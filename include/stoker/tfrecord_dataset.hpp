// TFRecordDataset: records of TensorFlow's TFRecord files, each a tf.train.Example whose
// features become a Sample's named tensors (int64_list -> int64 [n], float_list -> float32 [n],
// bytes_list -> uint8 [len], decoded by name through ShardOptions::decoders). Map-style over an
// index of record offsets built once in the main process (workers inherit it), or streaming
// (stream()) for gzip/zlib files and pipes. Also: TFRecordError, what a damaged file raises, and
// TFRecordWriter, which writes such files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoker/errors.hpp"
#include "stoker/sample.hpp"
#include "stoker/shards.hpp"

namespace stoker {

// A record that cannot be read: a bad checksum, a corrupt header, a truncated file, a file that
// shrank while it was read. what() is "TFRecordDataset: <file>: record <n> at byte <offset>:
// <what was wrong>; <what to do>"; offset() is the record's byte offset in the file (in the
// decompressed stream, for gzip and zlib files).
class TFRecordError : public ShardError {
 public:
  using ShardError::ShardError;
};

// ShardOptions (the fields to keep, their decoders, the index cache) and TFRecord's own.
struct TFRecordOptions : ShardOptions {
  // Check each record's two masked CRC32Cs (of its length, when indexing; of its data, when
  // reading). Off, only lengths are checked against the file: a corrupt byte goes unnoticed.
  bool verify_crc = true;
  // Features served as 0-d tensors (a batch of them stacks to [B]) instead of [1]: each must
  // hold exactly one int64 or float value, or the record is an error. {"label"}, typically.
  std::vector<std::string> scalar_features;
};

class TFRecordDataset : public ShardedDataset {
 public:
  // Both spellings: ds.stream(stream_options) streams this dataset's shards (ShardedDataset's),
  // and the static TFRecordDataset::stream(files, ...) below makes a stream from files.
  using ShardedDataset::stream;

  // Main process: indexes each file (once: the index is cached beside it, see ShardOptions),
  // in the order given (expand_shards() expands "train-{00000..00099}.tfrecord"). Throws
  // std::invalid_argument for no files, or a gzip/zlib file or pipe (they cannot be read at
  // random: use stream()); stoker::Error naming the file when one cannot be opened. Damaged
  // records do not throw here: each becomes a bad record (bad_records()) whose get() throws a
  // TFRecordError, so OnSampleError::kSkip skips it and the rest of the file is read.
  explicit TFRecordDataset(std::vector<std::string> files, TFRecordOptions options = {});

  // Main process: a stream over any files: plain (indexed as above), gzip or zlib (detected
  // from their bytes; record counts from a cached count or one counting pass), and
  // "pipe:<command>" (counts from stream_options.sample_counts, or a pass that runs the command
  // once more). Throws as the constructor, and std::invalid_argument when sample_counts has
  // the wrong length.
  static ShardedStream stream(std::vector<std::string> files, StreamOptions stream_options = {},
                              TFRecordOptions options = {});
};

// Writes a TFRecord file (plain, as TensorFlow's TFRecordWriter without compression), one of
// the writers' family (webdataset.hpp). Main or worker process; one thread.
class TFRecordWriter {
 public:
  // Creates or truncates `path`. Throws stoker::Error naming it when it cannot be opened.
  explicit TFRecordWriter(const std::string& path);
  // Closes the file; an error there is not reported (call close()).
  ~TFRecordWriter();
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  // One record of any bytes, framed with its length and both masked CRC32Cs. Throws
  // stoker::Error naming the file when the write fails.
  void write(std::span<const std::byte> record);
  // One tf.train.Example of the sample's fields, each the feature of its name: integer and
  // bool tensors become int64_list, float32 and float64 float_list (float64 rounded to float),
  // uint8 tensors bytes_list with one value (their bytes); all values in row-major order.
  // Throws std::invalid_argument for a field of another dtype (float16, bfloat16), and as
  // write().
  void write_example(const Sample& features);
  // The writers' spelling of write_example (webdataset.hpp describes the family).
  void write(const Sample& sample) { write_example(sample); }
  // Flushes and closes; returns the file written ({path}; again when called twice). Throws
  // stoker::Error naming the file when that fails.
  std::vector<std::string> close();
  std::size_t records() const noexcept { return records_; }
  std::uint64_t samples_written() const noexcept { return records_; }

 private:
  void flush();
  std::string path_;
  int fd_ = -1;
  std::vector<std::byte> pending_;  // framed records not yet written
  std::size_t records_ = 0;
};

}  // namespace stoker
