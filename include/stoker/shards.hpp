// Record shards, the part every shard format shares: fields decoded by name (FieldDecoders,
// FieldSpec), the options of a sharded dataset (ShardOptions) and of its stream
// (StreamOptions), the split of an epoch across (rank, worker) with the equal-batches policy
// (EqualBatches, plan_stream_split), the map-style ShardedDataset and the iterable
// ShardedStream. WebDatasetShards (webdataset.hpp) and the TFRecord and MDS readers are built on
// it. A new record format plugs in by implementing detail::ShardFormat
// (src/datasets/shards/shard_format.hpp says how) and deriving its public class from
// ShardedDataset; ShardedStream then streams it with no format-specific code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoker/remote.hpp"
#include "stoker/sample.hpp"
#include "stoker/tensor.hpp"

namespace stoker {

namespace detail {
class ShardFormat;
class FieldPlan;
struct MapReaderState;
struct StreamReaderState;
}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Fields by name

// Turns one field's bytes into a tensor. `source` names the record for messages ("a.tar: sample
// 17 'img0017' field 'jpg'"). Runs in the loading process; throws (stoker::Error preferred) for
// bytes it cannot decode, which the loader then reports, or skips under OnSampleError::kSkip.
using FieldDecoder =
    std::function<Tensor(std::span<const std::uint8_t> bytes, std::string_view source)>;

// The built-in decoders. Either process; each throws stoker::Error naming `source`.
// uint8 [n]: the bytes as they are (ragged across a batch: collate with collate_ragged).
Tensor decode_raw_field(std::span<const std::uint8_t> bytes, std::string_view source);
// int64 scalar from ASCII decimal ("7", " -3\n"): WebDataset's .cls convention.
Tensor decode_int_field(std::span<const std::uint8_t> bytes, std::string_view source);
// A .npy file (parse_npy_header, npy_dataset.hpp): its array, byte-swapped when big-endian.
Tensor decode_npy_field(std::span<const std::uint8_t> bytes, std::string_view source);
// Image bytes through anything callable as `Tensor(std::span<const std::uint8_t>,
// std::string_view)`, such as a stoker::vision::Pipeline (copied into the decoder).
template <class ImagePipeline>
FieldDecoder image_field(ImagePipeline pipeline) {
  return
      [pipeline = std::move(pipeline)](std::span<const std::uint8_t> bytes,
                                       std::string_view source) { return pipeline(bytes, source); };
}

// The decoder of each field name. A record's field "seg.png" is looked up as "seg.png", then by
// its last extension "png"; a name with no entry is decoded as raw bytes.
class FieldDecoders {
 public:
  // No entries: every field is raw bytes.
  FieldDecoders() = default;
  // "cls", "cls2", "class", "count", "index", "inx", "id" -> decode_int_field; "npy" ->
  // decode_npy_field; "jpg", "jpeg", "png", "webp" -> a default vision::Pipeline (the decoded
  // image, uint8 CHW; images() sets another); everything else raw bytes.
  static FieldDecoders defaults();

  // Adds or replaces the decoder of `name` (a whole field name or an extension). Returns *this.
  FieldDecoders& set(std::string name, FieldDecoder decoder);
  // Sets the decoder of the image extensions ("jpg", "jpeg", "png", "webp").
  FieldDecoders& images(FieldDecoder decoder);
  // The decoder for `field` by the rule above; nullptr for raw bytes.
  const FieldDecoder* find(std::string_view field) const noexcept;

 private:
  std::vector<std::pair<std::string, FieldDecoder>> entries_;
};

// One field of the Sample a record becomes.
struct FieldSpec {
  // The record's field: "jpg", or alternatives separated by ';' ("jpg;png;webp"): the first
  // one the record has is used. A record with none of them is an error naming it.
  std::string name;
  // The Sample's field name; empty: the first alternative of `name`.
  std::string as;
  // Empty: the ShardOptions::decoders entry of the matched field name.
  FieldDecoder decoder;
};

// ---------------------------------------------------------------------------------------------
// Options

struct ShardOptions {
  // The Sample's fields, in this order; empty: every field of each record, in record order.
  std::vector<FieldSpec> fields;
  FieldDecoders decoders = FieldDecoders::defaults();
  // Shard indexes (record offsets, sample counts) are built once per shard in the main process
  // and cached in a file beside it ("<shard>.idx"), or in `index_dir` when set, validated by the
  // shard's size and modification time. Where that cannot be written, or with write_index
  // false, the index stays in memory for the dataset's lifetime.
  std::string index_dir;
  bool write_index = true;
  // Open shard files per process (an LRU; the dataset opens them lazily in each worker).
  std::size_t max_open_shards = 64;
  // Shards named by URLs (s3://, http(s)://): where they are cached, how they are downloaded
  // and retried, and how far a stream reads ahead (remote.hpp, docs/remote.md).
  RemoteOptions remote;
};

// How a stream makes every rank's epoch the same length, so no rank waits in a collective for
// one that has finished. The epoch's T records (shards in their epoch order, concatenated) are
// cut into S = world_size x num_workers streams of N records each, stream s taking records
// [s N, s N + N):
enum class EqualBatches : std::uint8_t {
  kPad,   // N = ceil(T / S); the last streams wrap round to the epoch's first records, which
          // are then seen twice (as DistributedSampler pads)
  kDrop,  // N = floor(T / S); the epoch's last T - S N records are not seen this epoch
};

struct StreamOptions {
  // A new order every epoch, a function of (seed, epoch) only: the shards' order, and draws from
  // a buffer of `shuffle_buffer` records (0 or 1: records in shard order). The buffer holds
  // encoded records, about shuffle_buffer x record bytes per worker.
  bool shuffle = true;
  std::size_t shuffle_buffer = 1000;
  std::uint64_t seed = 0;
  // This process's place among the ranks (detect_launch() in distributed.hpp reads it from the
  // launcher). Every rank must use the same shards, num_workers and batch_size.
  std::size_t rank = 0;
  std::size_t world_size = 1;
  EqualBatches equal_batches = EqualBatches::kPad;
  // Records per shard (one entry per shard), used for the shards that have no index: pipes,
  // and compressed shards without a valid cached index. Empty: each such shard is counted by
  // one pass in the main process when the stream is made (compressed ones then cache it).
  std::vector<std::uint64_t> sample_counts;
};

// The split of one epoch (pure arithmetic; see EqualBatches).
struct StreamSplit {
  std::uint64_t total = 0;       // T: records in the epoch
  std::size_t streams = 1;       // S: world_size x max(num_workers, 1)
  std::uint64_t per_stream = 0;  // N: records each stream delivers
  std::uint64_t repeated = 0;    // kPad: S N - T records seen twice
  std::uint64_t dropped = 0;     // kDrop: T - S N records not seen
  // The first record (in the epoch's concatenated order) of stream s: s x per_stream, modulo T.
  std::uint64_t first(std::size_t stream) const noexcept;
  // Batches each stream delivers, and so each rank (x num_workers), for a loader's batch_size
  // and drop_last.
  std::uint64_t batches_per_stream(std::size_t batch_size, bool drop_last) const noexcept;
};
// Throws std::invalid_argument for world_size == 0, rank >= world_size or num_workers < 0.
StreamSplit plan_stream_split(std::uint64_t total, std::size_t world_size, int num_workers,
                              EqualBatches policy);

// "data-{000..099}.tar" -> data-000.tar ... data-099.tar (WebDataset's brace notation: ranges
// keep the width of their first bound; several groups multiply); a name without braces is
// itself. Throws std::invalid_argument for an unbalanced brace or a bad range.
std::vector<std::string> expand_shards(std::string_view pattern);

// ---------------------------------------------------------------------------------------------
// Datasets

class ShardedStream;

// Map-style over the shards' indexes: index i is record i of the shards concatenated in the
// order given. Copies share the (read-only) indexes; each copy opens its own files, lazily, so
// a worker never uses a descriptor of the main process. Use with any sampler; with
// DistributedSampler every rank gets num_samples() indices (drop_last false pads by repeating
// samples, true drops to the minimum: EqualBatches for map-style), so the same batch count.
class ShardedDataset {
 public:
  ShardedDataset(const ShardedDataset& other);
  ShardedDataset& operator=(const ShardedDataset& other);
  ShardedDataset(ShardedDataset&&) noexcept;
  ShardedDataset& operator=(ShardedDataset&&) noexcept;
  ~ShardedDataset();

  std::size_t size() const noexcept;
  // Either process. Reads the record with one positioned read into a buffer this copy reuses
  // (or from a mapping of the file, for TFRecord and MDS), then decodes its fields. Throws
  // std::out_of_range for index >= size(); stoker::ShardError (errors.hpp; the format's own
  // type derives from it) naming the shard, the record and its offset for a record that cannot
  // be read: damaged, cut short, or in a file that shrank while it was read; stoker::Error for
  // one whose fields cannot be decoded.
  Sample get(std::size_t index);

  std::size_t num_shards() const noexcept;
  const std::string& shard_name(std::size_t shard) const;
  std::uint64_t shard_size(std::size_t shard) const;  // records in that shard
  // (shard, record within it) of a dataset index, O(log num_shards). Throws std::out_of_range.
  std::pair<std::size_t, std::uint64_t> locate(std::size_t index) const;
  // Records the indexes found unreadable (a bad header, a truncated member): get() throws for
  // each, so OnSampleError::kSkip skips and counts them.
  std::uint64_t bad_records() const noexcept;

  // The same records as an iterable stream (no re-indexing). Main process.
  ShardedStream stream(StreamOptions options = {}) const;

  // Remote shards (URLs): the downloads of every process that reads this dataset and its
  // copies, since it was made (all zero when every shard is local). What DataLoader::stats()
  // reports and diagnose() reads. Either process; never blocks.
  RemoteStats remote_stats() const noexcept;
  // The memory each process reading this dataset uses for its downloads (0 when every shard is
  // local): what the loader's memory estimate adds per loading process.
  std::size_t remote_download_buffer_bytes() const noexcept;

 protected:
  // For the formats' public classes: `format` is fully indexed (main process).
  ShardedDataset(std::shared_ptr<const detail::ShardFormat> format, const ShardOptions& options);

 private:
  std::shared_ptr<const detail::ShardFormat> format_;
  std::shared_ptr<const detail::FieldPlan> plan_;
  std::shared_ptr<const std::vector<std::uint64_t>> first_index_;  // of each shard, and size()
  std::size_t max_open_shards_ = 64;
  std::unique_ptr<detail::MapReaderState> reader_;  // this copy's files and buffer
};

// An iterable dataset (next()) over shards read front to back: for compressed shards, pipes,
// or storage where random reads are slow. Each epoch (start_epoch, called by the DataLoader),
// shards are ordered by (seed, epoch), the epoch is split across (rank, worker) jointly by
// plan_stream_split, and each worker reads its stream through the shuffle buffer. sample_rng()
// inside a record's decoding is seeded by the record's dataset index (as map-style get() of
// that index is), so augmentation does not depend on num_workers; the delivery order depends on
// (seed, epoch, world_size, num_workers). A record that cannot be read (a stoker::ShardError) or
// decoded (a stoker::Error) throws from next() (the loader reports it, or skips it under kSkip)
// and the stream reads one record more, so every stream still delivers exactly per_stream good
// records.
class ShardedStream {
 public:
  ShardedStream(const ShardedStream& other);
  ShardedStream& operator=(const ShardedStream& other);
  ShardedStream(ShardedStream&&) noexcept;
  ShardedStream& operator=(ShardedStream&&) noexcept;
  ~ShardedStream();

  // The loading process (a worker, or the main process when num_workers == 0).
  void start_epoch(std::uint64_t epoch);
  std::optional<Sample> next();

  std::uint64_t total_samples() const noexcept;  // T
  std::size_t num_shards() const noexcept;
  // As ShardedDataset::remote_stats() and remote_download_buffer_bytes().
  RemoteStats remote_stats() const noexcept;
  std::size_t remote_download_buffer_bytes() const noexcept;
  const StreamOptions& options() const noexcept;
  // The split a loader with `num_workers` gets (its rank's batches: split.batches_per_stream(
  // batch_size, drop_last) x max(num_workers, 1)). Throws as plan_stream_split.
  StreamSplit split(int num_workers) const;

  // Resume. DataLoader::state() refuses iterable datasets, so a stream keeps its own: state()
  // is where this rank's streams stand after the consumer has received `batches` batches of
  // `epoch` (the one being processed included) from a loader with `loader_options` (batch_size,
  // drop_last, num_workers; in_order must be true). Save it with the checkpoint. load_state()
  // on a stream over the same shards with the same options, before the loader's first
  // begin() (or any begin() without persistent workers), makes the next run of that epoch
  // deliver exactly the records that would have come next. Main process. state() throws
  // std::invalid_argument for num_workers == kAuto or in_order false; load_state() for a
  // malformed state; the epoch's start_epoch() does when the state was saved with other shards,
  // seed, world_size or num_workers.
  // (`Options` is LoaderOptions, stoker/options.hpp: a template so that this layer does not
  // depend on the loader's header.)
  template <class Options>
  std::string state(std::uint64_t epoch, std::uint64_t batches,
                    const Options& loader_options) const {
    return state_for(epoch, batches, loader_options.batch_size, loader_options.num_workers,
                     loader_options.in_order);
  }
  void load_state(std::string_view state);

  // For the formats' stream factories: `format` knows every shard's record count. Throws
  // std::invalid_argument for bad options (world_size 0, rank >= world_size).
  ShardedStream(std::shared_ptr<const detail::ShardFormat> format, const ShardOptions& options,
                StreamOptions stream_options);

 private:
  friend class ShardedDataset;
  std::string state_for(std::uint64_t epoch, std::uint64_t batches, std::size_t batch_size,
                        int num_workers, bool in_order) const;
  ShardedStream(std::shared_ptr<const detail::ShardFormat> format,
                std::shared_ptr<const detail::FieldPlan> plan, std::size_t max_open_shards,
                StreamOptions stream_options);

  std::shared_ptr<const detail::ShardFormat> format_;
  std::shared_ptr<const detail::FieldPlan> plan_;
  // Dataset index of each shard's first record (as ShardedDataset numbers them), then T.
  std::shared_ptr<const std::vector<std::uint64_t>> first_index_;
  std::size_t max_open_shards_ = 64;
  StreamOptions options_;
  std::string pending_state_;  // load_state(), applied by the start_epoch() of its epoch
  std::unique_ptr<detail::StreamReaderState> reader_;  // this copy's position and buffer
};

}  // namespace stoker
