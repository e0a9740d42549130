// WebDatasetShards: samples stored as WebDataset tar shards. A sample is a run of consecutive
// members sharing a key (the member's path up to the first '.' after its last '/'); each member
// is a field named by the rest ("img0017.jpg" + "img0017.cls": fields "jpg" and "cls"). Plain
// .tar shards are read map-style through an index of member offsets; .tar.gz / .tar.zst shards
// and "pipe:<command>" shards stream (ShardedStream). WebDatasetWriter and write_webdataset() write
// shards and their indexes (what the stoker-shard tool uses).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoker/dataset.hpp"
#include "stoker/sample.hpp"
#include "stoker/shards.hpp"

namespace stoker {

// ShardOptions (the fields to keep, their decoders, the index cache) and WebDataset's own.
struct WebDatasetOptions : ShardOptions {
  WebDatasetOptions() = default;
  // From the shared options (what WebDatasetShards took before it had options of its own).
  WebDatasetOptions(ShardOptions shard_options)  // NOLINT(google-explicit-constructor)
      : ShardOptions(std::move(shard_options)) {}

  // Field names lower-cased (ASCII), as WebDataset groups members by default: "a.JPG" and
  // "a.Seg.PNG" are fields "jpg" and "seg.png", so the default decoders find them; a sample
  // with both "a.jpg" and "a.JPG" then has one field twice, a bad record. False: names as
  // they are in the tar ("JPG"). Keys keep their case either way.
  bool lowercase_fields = true;
};

class WebDatasetShards : public ShardedDataset {
 public:
  // Both spellings: ds.stream(stream_options) streams this dataset's shards (ShardedDataset's),
  // and the static WebDatasetShards::stream(files, ...) below makes a stream from files.
  using ShardedDataset::stream;

  // Main process: indexes each shard (ustar, pax and GNU tar; once: the index is cached, see
  // ShardOptions) in the order given; expand_shards() turns "data-{000..099}.tar" into the
  // list. Throws std::invalid_argument for no shards, or a compressed or pipe shard (those
  // cannot be read at random: use stream()); stoker::Error naming the shard when one cannot be
  // opened, is empty (0 bytes: GNU tar and Python's tarfile refuse it too) or holds no tar
  // data. Damaged members do not throw here: each becomes a bad record
  // (bad_records()) whose get() throws, so OnSampleError::kSkip skips it.
  explicit WebDatasetShards(std::vector<std::string> shards, WebDatasetOptions options = {});

  // Main process: a stream over any shards: plain .tar (indexed as above), .tar.gz, .tar.zst
  // and other compressed tars (needs libarchive; record counts from a cached index or one
  // counting pass), "pipe:<command>" (counts from stream_options.sample_counts, or a counting
  // pass that runs the command once more). Throws as the constructor, and
  // std::invalid_argument when sample_counts has the wrong length.
  static ShardedStream stream(std::vector<std::string> shards, StreamOptions stream_options = {},
                              WebDatasetOptions options = {});
};

// The writers, one family (WebDatasetWriter here, TFRecordWriter in tfrecord_dataset.hpp):
// <Format>Writer, constructed with what to write to, write() one sample, close() to finish and
// get every file written (the destructor closes too, without reporting errors),
// samples_written().
//
// WebDatasetWriter writes WebDataset tar shards: ustar headers (pax records for paths over 100
// bytes), members in the order written, a new shard when the next sample would take the
// current one past max_shard_bytes, and each shard's index beside it (what WebDatasetShards
// would build).
struct WebDatasetWriterOptions {
  // Shard paths: a printf pattern with one integer conversion, "out/train-%06d.tar".
  std::string pattern = "shard-%06d.tar";
  std::uint64_t max_shard_bytes = std::uint64_t{1} << 30;
  std::size_t max_samples_per_shard = 0;  // 0: no limit
  bool write_index = true;
};

class WebDatasetWriter {
 public:
  // Throws std::invalid_argument for a pattern without exactly one integer conversion, or a
  // zero max_shard_bytes.
  explicit WebDatasetWriter(WebDatasetWriterOptions options);
  // Finishes the current shard; errors there are not reported (call close()).
  ~WebDatasetWriter();
  WebDatasetWriter(const WebDatasetWriter&) = delete;
  WebDatasetWriter& operator=(const WebDatasetWriter&) = delete;

  // One sample: members "<key>.<field>" with these bytes. Throws std::invalid_argument for a
  // key containing '.' or empty, or a field name empty or repeated; stoker::Error naming the
  // shard when it cannot be written.
  void write(std::string_view key,
             std::span<const std::pair<std::string, std::span<const std::byte>>> fields);
  // A Sample's tensors as fields: a uint8 1-D tensor as its bytes ("<key>.<name>"), an integer
  // scalar whose name FieldDecoders::defaults() reads as an integer ("cls", "index", ...) as
  // ASCII decimal, any other tensor as a .npy file ("<key>.<name>.npy", or "<key>.<name>"
  // when the name already ends in "npy").
  void write(std::string_view key, const Sample& sample);
  // Closes the last shard and writes its index; returns every shard's path (again, when
  // called twice). Throws stoker::Error when a file cannot be written.
  std::vector<std::string> close();
  [[deprecated("WebDatasetWriter::finish() is now close()")]] std::vector<std::string> finish() {
    return close();
  }

  std::uint64_t samples_written() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The names before the writers were one family; kept for a release.
using ShardWriter [[deprecated("ShardWriter is now WebDatasetWriter")]] = WebDatasetWriter;
using ShardWriterOptions [[deprecated("ShardWriterOptions is now WebDatasetWriterOptions")]] =
    WebDatasetWriterOptions;

namespace detail {
// write_webdataset's loop: get(i) for i in [0, n), with sample_rng() seeded for each i.
std::vector<std::string> write_webdataset_samples(std::size_t n,
                                                  const std::function<Sample(std::size_t)>& get,
                                                  WebDatasetWriterOptions options);
}  // namespace detail

// Every sample of a map-style dataset, in index order, keyed by its index ("000000017"),
// through a WebDatasetWriter; returns the shards' paths. sample_rng() in get() draws as for (seed
// 0, epoch 0, index). Main process; throws what the dataset and the writer throw.
template <MapDataset D>
std::vector<std::string> write_webdataset(D& dataset, WebDatasetWriterOptions options) {
  return detail::write_webdataset_samples(
      static_cast<std::size_t>(dataset.size()),
      [&dataset](std::size_t i) { return Sample(dataset.get(i)); }, std::move(options));
}

}  // namespace stoker
