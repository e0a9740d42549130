// The shard engine's plug-in interface: what a record format (WebDataset tar, TFRecord, MDS)
// implements so that ShardedDataset (map-style) and ShardedStream (iterable) of
// include/stoker/shards.hpp read it with no format-specific code.
//
// How a new format plugs in:
//   1. Derive from ShardFormat. Build it in the main process: index every shard there (or read
//      the cached index with index_cache.hpp), so every worker inherits the index by fork().
//      After construction it is read-only: copies of the dataset in every process share it.
//   2. num_shards(), shard_name(), shard_records(): from the index. A record is one sample.
//   3. read(shard, k, plan, files, out): record k of the shard, for map-style access (only
//      when random_access()). Fill `out` (its buffers are reused between records: no
//      per-record allocation once warm) reading through `files`, this process's LRU of open
//      shard files and its read window (files are opened lazily in each worker, never
//      inherited). plan.wants(field) says which fields the Sample needs; others may be left out.
//   4. open(shard, first, plan, files): a RecordCursor reading the shard front to back from
//      record `first`, for streaming (compressed shards, pipes). A record the cursor cannot
//      read comes back with RawRecord::error set and the cursor past it (resynchronised, or at
//      the end). Records must be numbered as the index numbers them.
//   5. decode(): a record's fields into the Sample. The default gives RawRecord::fields to the
//      FieldPlan (selection, renaming, decoding of bytes by field name); a format whose fields
//      are typed (TFRecord's Example features) sets RawField::value instead of bytes, or
//      overrides decode() and calls FieldPlan::assemble itself.
//   6. Its public class (include/stoker/<format>.hpp) derives from ShardedDataset through the
//      protected constructor, and offers `static ShardedStream stream(...)` returning
//      ShardedStream(format, shard_options, stream_options).
// Errors: stoker::ShardError (or the format's own, derived from it) for bytes that cannot be
// read as records, "<Format>: <shard>: record <k> at byte <offset>: <what>; <what to do>"
// (RecordRef::describe builds the first part). A format that reads through mappings
// (MappedShards) sets RawRecord::mapping; the engine checks it after decoding (check_mapping),
// and read() checks it before reporting an error of its own (zeros where the file was cut).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "os/mapped_file.hpp"
#include "stoker/sample.hpp"
#include "stoker/shards.hpp"
#include "stoker/tensor.hpp"

namespace stoker::detail {

class ShardFiles;

// One named field of a record: bytes [offset, offset + size) of RawRecord::bytes(), or, when
// `value` is defined, an already typed tensor (the bytes are then unused).
struct RawField {
  std::string name;
  std::size_t offset = 0;
  std::size_t size = 0;
  Tensor value;
};

// One record, not yet decoded: what read() and cursors produce and the shuffle buffer holds.
struct RawRecord {
  std::size_t shard = 0;
  std::uint64_t ordinal = 0;  // record number within the shard
  std::uint64_t offset = 0;   // byte offset in the shard (in the decompressed stream)
  std::string key;            // the record's name, when the format has one (WebDataset's key)
  std::string error;          // non-empty: the record could not be read; the whole message
  std::vector<RawField> fields;

  // The bytes the fields point into: storage (owned), or a window of ShardFiles (map-style:
  // valid until that ShardFiles' next read), or of `mapping`.
  std::span<const std::byte> bytes() const noexcept { return data; }
  void set_borrowed(std::span<const std::byte> window) noexcept { data = window; }
  // Makes `n` bytes of owned storage the record's bytes and returns them for filling.
  std::span<std::byte> own(std::size_t n);
  // Empties the record, keeping its buffers' capacity.
  void clear() noexcept;

  std::vector<std::byte> storage;
  std::span<const std::byte> data;
  // A map-style read from a mapped file (MappedShards): the mapping `data` points into, kept
  // alive while the record is, and checked (MappedFile::intact) once the record is decoded.
  std::shared_ptr<const MappedFile> mapping;
};

// Names a record in messages: "<format>: <shard>: record <k> ('<key>') at byte <offset>".
struct RecordRef {
  std::string_view format;
  std::string_view shard;
  std::uint64_t ordinal = 0;
  std::uint64_t offset = 0;
  std::string_view key;
  std::string describe() const;
};

// Reads one shard front to back. Single owner, one process.
class RecordCursor {
 public:
  virtual ~RecordCursor() = default;
  // The next record into `out` (cleared first); false at the shard's end. Its bytes must be
  // owned (RawRecord::own or storage): the shuffle buffer keeps records while the cursor
  // reads on. A record that cannot be read returns true with out.error set, the cursor past it.
  // Throws stoker::Error only when the shard cannot be read any further at all (it could not be
  // opened: a missing file).
  virtual bool next(RawRecord& out) = 0;
  // Moves past the next record without producing it; false at the end. For a start mid-shard.
  virtual bool skip() = 0;
};

// The compiled ShardOptions::fields + decoders: which fields a Sample keeps, under which
// names, decoded how. Shared read-only by every copy of a dataset.
class FieldPlan {
 public:
  explicit FieldPlan(const ShardOptions& options);

  // True when the Sample needs the record field `name` (a reader may skip the others' bytes).
  bool wants(std::string_view name) const noexcept;
  // The Sample of `record`'s fields: the selected ones in ShardOptions::fields order (or all of
  // them, in record order), decoded by name. Throws stoker::Error naming `where` when a
  // selected field is missing, a field repeats, or a decoder throws (its message kept).
  Sample assemble(const RawRecord& record, const RecordRef& where) const;

 private:
  struct Selected {
    std::vector<std::string> alternatives;
    std::string output;
    FieldDecoder decoder;  // empty: by name from decoders_
  };
  Tensor decode(const RawField& field, std::span<const std::byte> bytes,
                const FieldDecoder* decoder, const RecordRef& where) const;
  std::vector<Selected> selected_;  // empty: every field
  FieldDecoders decoders_;
};

// True for field names FieldDecoders::defaults() decodes as integers ("cls", "x.index").
bool is_int_field_name(std::string_view name) noexcept;

class RemoteSource;

class ShardFormat {
 public:
  virtual ~ShardFormat() = default;

  // The dataset's source of remote shards (URLs: datasets/remote/remote_source.hpp), given to
  // the readers' ShardFiles; nullptr when every shard is local.
  const RemoteSource* remote() const noexcept { return remote_.get(); }

  // The public class's name, first word of messages ("WebDatasetShards").
  virtual std::string_view format_name() const noexcept = 0;
  virtual std::size_t num_shards() const noexcept = 0;
  virtual const std::string& shard_name(std::size_t shard) const = 0;
  virtual std::uint64_t shard_records(std::size_t shard) const = 0;
  // Records the index found unreadable (each read()/cursor reports as a bad record).
  virtual std::uint64_t bad_records() const noexcept { return 0; }
  // Whether read() works for every shard (plain files with an index of offsets).
  virtual bool random_access() const noexcept = 0;

  // Map-style: record k of `shard` into `out`. Either process. Throws stoker::Error (naming
  // the shard, record and offset) for a record that cannot be read.
  virtual void read(std::size_t shard, std::uint64_t k, const FieldPlan& plan, ShardFiles& files,
                    RawRecord& out) const = 0;
  // Streaming: a cursor at record `first` of `shard`. Throws stoker::Error when the shard
  // cannot be opened.
  virtual std::unique_ptr<RecordCursor> open(std::size_t shard, std::uint64_t first,
                                             const FieldPlan& plan, ShardFiles& files) const = 0;
  // The Sample of a record that was read without error.
  virtual Sample decode(const RawRecord& record, const FieldPlan& plan) const;
  // A record read from a mapping that shrank while it was read: throws the format's ShardError
  // (the default: ShardError) naming the record. Either process.
  [[noreturn]] virtual void throw_shrunk(const RawRecord& record) const;
  // After a record from a mapping was used: throws as throw_shrunk() when the mapping is no
  // longer intact. No system call.
  void check_mapping(const RawRecord& record) const {
    if (record.mapping && !record.mapping->intact()) throw_shrunk(record);
  }

  RecordRef ref(const RawRecord& record) const {
    return RecordRef{format_name(), shard_name(record.shard), record.ordinal, record.offset,
                     record.key};
  }

 protected:
  explicit ShardFormat(std::shared_ptr<RemoteSource> remote = nullptr)
      : remote_(std::move(remote)) {}

 private:
  std::shared_ptr<RemoteSource> remote_;
};

// The shard list of a format whose shards each carry `name`, `records`, `seekable` and an
// `index` (TFRecord, WebDataset): the bookkeeping of ShardFormat once, for both. `bad` counts
// the records an index found unreadable.
template <class Shard>
class ShardListFormat : public ShardFormat {
 public:
  std::size_t num_shards() const noexcept override { return shards_.size(); }
  const std::string& shard_name(std::size_t shard) const override { return shards_[shard].name; }
  std::uint64_t shard_records(std::size_t shard) const override { return shards_[shard].records; }
  std::uint64_t bad_records() const noexcept override { return bad_; }
  bool random_access() const noexcept override { return random_access_; }

 protected:
  template <class CountBad>
  ShardListFormat(std::vector<Shard> shards, CountBad count_bad,
                  std::shared_ptr<RemoteSource> remote = nullptr)
      : ShardFormat(std::move(remote)), shards_(std::move(shards)) {
    for (const Shard& s : shards_) {
      if (s.index) bad_ += count_bad(*s.index);
      random_access_ = random_access_ && s.seekable;
    }
  }

  std::vector<Shard> shards_;

 private:
  std::uint64_t bad_ = 0;
  bool random_access_ = true;
};

}  // namespace stoker::detail
