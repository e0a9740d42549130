// TFRecordDataset: TFRecord files plugged into the shard engine (datasets/shards/shard_format.hpp).
#include "stoker/tfrecord_dataset.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "datasets/records/compression.hpp"
#include "datasets/records/example_proto.hpp"
#include "datasets/records/mapped_shards.hpp"
#include "datasets/records/tfrecord.hpp"
#include "datasets/remote/shard_access.hpp"
#include "datasets/shards/byte_source.hpp"
#include "datasets/shards/index_cache.hpp"
#include "datasets/shards/shard_files.hpp"
#include "datasets/shards/shard_format.hpp"
#include "os/log.hpp"
#include "os/mapped_file.hpp"
#include "os/net/url.hpp"
#include "os/posix.hpp"

namespace stoker {
namespace detail {
namespace {

constexpr std::string_view kWho = "TFRecordDataset";
constexpr std::string_view kIndexMagic = "STKTFRIX";
constexpr std::uint32_t kIndexVersion = 1;
constexpr std::uint8_t kOffsets = 0;  // payload kinds: a plain file's offsets, or a count
constexpr std::uint8_t kCount = 1;

// "<file>.stoker.idx": DALI's tfrecord2idx output is often named "<file>.idx", and must not be
// overwritten by ours.
constexpr std::string_view kIndexSuffix = ".stoker";

struct TfShard {
  std::string name;
  bool seekable = false;                       // a plain file with its index of offsets
  std::shared_ptr<const TFRecordIndex> index;  // seekable shards
  std::uint64_t bytes = 0;                     // seekable shards: the file's size
  std::uint64_t records = 0;
};

// ---- the cached index: kind u8 | verify u8 | then offsets and bad regions, or a count ----

std::vector<std::byte> serialize_index(const TFRecordIndex& index, bool verify) {
  IndexWriter w;
  w.u8(kOffsets);
  w.u8(verify ? 1 : 0);
  w.u64(index.entries.size());
  for (const std::uint64_t e : index.entries) w.u64(e);
  w.u64(index.bad_regions.size());
  for (const TFRecordIndex::BadRegion& b : index.bad_regions) {
    w.u64(b.offset);
    w.u64(b.resume);
    w.u8(static_cast<std::uint8_t>(b.check.status));
    w.u64(b.check.length);
    w.u32(b.check.stored_crc);
    w.u32(b.check.computed_crc);
  }
  return w.take();
}

// nullopt for a payload that is not a consistent index of a `size`-byte file.
std::optional<TFRecordIndex> parse_index(std::span<const std::byte> payload, bool verify,
                                         std::uint64_t size) {
  IndexReader r(payload);
  std::uint8_t kind = 0;
  std::uint8_t verified = 0;
  std::uint64_t n = 0;
  if (!r.u8(kind) || !r.u8(verified) || kind != kOffsets || (verified != 0) != verify ||
      !r.u64(n) || n > r.remaining() / 8) {
    return std::nullopt;
  }
  TFRecordIndex index;
  index.entries.resize(static_cast<std::size_t>(n));
  std::uint64_t bad = 0;
  for (std::uint64_t& e : index.entries) r.u64(e);
  if (!r.u64(bad) || bad > r.remaining() / 33) return std::nullopt;
  index.bad_regions.resize(static_cast<std::size_t>(bad));
  for (TFRecordIndex::BadRegion& b : index.bad_regions) {
    std::uint8_t status = 0;
    r.u64(b.offset);
    r.u64(b.resume);
    r.u8(status);
    r.u64(b.check.length);
    r.u32(b.check.stored_crc);
    r.u32(b.check.computed_crc);
    if (status > static_cast<std::uint8_t>(FrameStatus::kBadDataCrc)) return std::nullopt;
    b.check.status = static_cast<FrameStatus>(status);
    if (b.offset >= b.resume || b.resume > size) return std::nullopt;
  }
  if (!r.ok() || r.remaining() != 0) return std::nullopt;
  std::uint64_t previous = 0;
  std::uint64_t next_bad = 0;
  for (const std::uint64_t e : index.entries) {
    std::uint64_t at = e;
    if ((e & TFRecordIndex::kBadEntry) != 0) {
      if ((e & ~TFRecordIndex::kBadEntry) != next_bad) return std::nullopt;
      at = index.bad_regions[static_cast<std::size_t>(next_bad++)].offset;
    }
    if (at >= size || at < previous) return std::nullopt;
    previous = at + 1;
  }
  if (next_bad != bad) return std::nullopt;
  return index;
}

std::string bad_region_message(const TfShard& s, std::size_t k, const TFRecordIndex::BadRegion& b) {
  return fmt::format(
      "{}: {}: record {} at byte {}: {}; bytes {} to {} cannot be read as records. The file is "
      "damaged (re-create or re-copy it), or skip bad records with "
      "LoaderOptions::on_sample_error = OnSampleError::kSkip",
      kWho, s.name, k, b.offset, describe_frame(b.check, b.resume - b.offset), b.offset, b.resume);
}

// ---- reading ----

class TfCursor final : public RecordCursor {
 public:
  TfCursor(std::size_t shard, const TfShard& s, std::uint64_t first, bool verify, ShardFiles& files)
      : shard_(shard) {
    std::uint64_t start = 0;
    std::size_t start_record = 0;
    if (s.seekable && first < s.index->entries.size()) {
      const std::uint64_t e = s.index->entries[static_cast<std::size_t>(first)];
      start = (e & TFRecordIndex::kBadEntry) != 0
                  ? s.index->bad_regions[e & ~TFRecordIndex::kBadEntry].offset
                  : e;
      start_record = static_cast<std::size_t>(first);
    }
    auto raw = files.open_stream(shard, s.name, start, kWho);
    auto source = start == 0 ? tfrecord_source(std::move(raw), s.name) : std::move(raw);
    stream_.emplace(std::move(source), s.name, verify, start, start_record);
    while (stream_->next_record() < first && skip()) {
    }
  }

  bool next(RawRecord& out) override {
    out.clear();
    out.shard = shard_;
    out.ordinal = stream_->next_record();
    out.offset = stream_->offset();
    try {
      const auto data = stream_->next();
      if (!data) return false;
      std::memcpy(out.own(data->size()).data(), data->data(), data->size());
    } catch (const TFRecordError& e) {
      out.offset = e.offset();
      out.error = e.what();
    } catch (const Error& e) {  // the stream cannot be read on (corrupt compressed data)
      out.error = e.what();
    }
    return true;
  }

  bool skip() override {
    try {
      return stream_->next().has_value();
    } catch (const Error&) {
      return true;  // a bad record is a record too
    }
  }

 private:
  std::size_t shard_;
  std::optional<TFRecordStream> stream_;
};

// Scratch for decode(), one per process (the loader decodes on one thread).
struct DecodeScratch {
  ParsedExample example;
  RawRecord typed;
  std::vector<std::span<const std::byte>> values;
};

class TFRecordFormat final : public ShardListFormat<TfShard> {
 public:
  TFRecordFormat(std::vector<TfShard> shards, const TFRecordOptions& options,
                 std::shared_ptr<RemoteSource> remote)
      : ShardListFormat(
            std::move(shards), [](const TFRecordIndex& ix) { return ix.bad_regions.size(); },
            std::move(remote)),
        mapped_(options.max_open_shards, this->remote()),
        verify_(options.verify_crc),
        scalars_(options.scalar_features) {}

  std::string_view format_name() const noexcept override { return kWho; }

  // Through the mapping of the file (MappedShards), not ShardFiles: no system call per record.
  void read(std::size_t shard, std::uint64_t k, const FieldPlan&, ShardFiles&,
            RawRecord& out) const override {
    const TfShard& s = shards_[shard];
    const TFRecordIndex& ix = *s.index;
    const auto i = static_cast<std::size_t>(k);
    const std::uint64_t e = ix.entries[i];
    out.clear();
    out.shard = shard;
    out.ordinal = k;
    if ((e & TFRecordIndex::kBadEntry) != 0) {
      const auto& region = ix.bad_regions[e & ~TFRecordIndex::kBadEntry];
      out.offset = region.offset;
      throw TFRecordError(bad_region_message(s, i, region), s.name, region.offset);
    }
    out.offset = e;
    out.mapping = mapped_.get(shard, s.name, "TFRecordDataset");
    const MappedFile& file = *out.mapping;
    if (file.size() != s.bytes) {
      throw_tfrecord_error(s.name, e, i,
                           fmt::format("the file is {} bytes, its index was made for {}: it "
                                       "changed after it was indexed; delete its .idx file to "
                                       "rebuild it",
                                       file.size(), s.bytes));
    }
    try {
      out.set_borrowed(tfrecord_data(file.bytes(), e, verify_, s.name, i));
    } catch (const TFRecordError&) {
      check_mapping(out);  // a bad frame read from where the file was cut
      throw;
    }
  }

  void throw_shrunk(const RawRecord& record) const override {
    throw TFRecordError(record.mapping->shrink_message(ref(record).describe()),
                        record.mapping->path(), record.offset);
  }

  std::unique_ptr<RecordCursor> open(std::size_t shard, std::uint64_t first, const FieldPlan&,
                                     ShardFiles& files) const override {
    return std::make_unique<TfCursor>(shard, shards_[shard], first, verify_, files);
  }

  Sample decode(const RawRecord& record, const FieldPlan& plan) const override {
    static thread_local DecodeScratch scratch;
    const RecordRef where = ref(record);
    const std::span<const std::byte> bytes = record.bytes();
    try {
      scratch.example.parse(bytes);
    } catch (const ExampleFormatError& e) {
      throw TFRecordError(fmt::format("{}: {}; the record is damaged, or the file does not hold "
                                      "tf.train.Example records",
                                      where.describe(), e.what()),
                          std::string(where.shard), record.offset);
    }
    RawRecord& typed = scratch.typed;
    typed.fields.clear();
    typed.set_borrowed(bytes);
    for (const ExampleFeature& f : scratch.example.features()) {
      if (f.kind == FeatureKind::kNone || !plan.wants(f.name)) continue;
      RawField field;
      field.name = std::string(f.name);
      const bool scalar = std::find(scalars_.begin(), scalars_.end(), f.name) != scalars_.end();
      if (scalar && (f.values != 1 || f.kind == FeatureKind::kBytes)) {
        throw TFRecordError(
            fmt::format("{}: feature '{}' is a {} of {} values, but scalar_features lists it "
                        "(a scalar is one int64 or float value); remove it from "
                        "TFRecordOptions::scalar_features, or skip such records",
                        where.describe(), f.name, feature_kind_name(f.kind), f.values),
            std::string(where.shard), record.offset);
      }
      const Shape shape = scalar ? Shape{} : Shape{static_cast<std::int64_t>(f.values)};
      if (f.kind == FeatureKind::kInt64) {
        field.value = Tensor::empty(DType::kInt64, shape);
        scratch.example.copy_int64(f, field.value.data<std::int64_t>());
      } else if (f.kind == FeatureKind::kFloat) {
        field.value = Tensor::empty(DType::kFloat32, shape);
        scratch.example.copy_float(f, field.value.data<float>());
      } else {
        scratch.values.clear();
        scratch.example.bytes_values(f, scratch.values);
        bytes_field(scratch.values, bytes, field, where, record.offset);
      }
      typed.fields.push_back(std::move(field));
    }
    return plan.assemble(typed, where);
  }

 private:
  static std::uint64_t entry_start(const TFRecordIndex& ix, std::size_t i) noexcept {
    const std::uint64_t e = ix.entries[i];
    return (e & TFRecordIndex::kBadEntry) != 0
               ? ix.bad_regions[e & ~TFRecordIndex::kBadEntry].offset
               : e;
  }

  // One value: its bytes, decoded by the feature's name. None: uint8 [0]. Several of one
  // length: uint8 [n, length]; of different lengths: an error.
  static void bytes_field(const std::vector<std::span<const std::byte>>& values,
                          std::span<const std::byte> record, RawField& field,
                          const RecordRef& where, std::uint64_t offset) {
    if (values.size() == 1) {
      field.offset = static_cast<std::size_t>(values[0].data() - record.data());
      field.size = values[0].size();
      return;
    }
    const std::size_t length = values.empty() ? 0 : values[0].size();
    for (const auto v : values) {
      if (v.size() != length) {
        throw TFRecordError(
            fmt::format("{}: feature '{}' holds {} bytes values of different lengths ({} and "
                        "{}); stoker serves a bytes_list of one value, or of values of one "
                        "length as uint8 [n, length]: write one value per feature",
                        where.describe(), field.name, values.size(), length, v.size()),
            std::string(where.shard), offset);
      }
    }
    field.value = Tensor::empty(DType::kUInt8, values.size() == 0
                                                   ? Shape{0}
                                                   : Shape{static_cast<std::int64_t>(values.size()),
                                                           static_cast<std::int64_t>(length)});
    std::byte* out = field.value.raw_data();
    for (const auto v : values) {
      if (!v.empty()) std::memcpy(out, v.data(), v.size());
      out += v.size();
    }
  }

  MappedShards mapped_;  // this process's mappings of the files (map-style reads)
  bool verify_;
  std::vector<std::string> scalars_;
};

// ---- building the shards ----

bool is_stream_only(const std::string& name) {
  return is_pipe_shard(name) || is_compressed_shard(name);
}

// Whether a plain-named file holds gzip or zlib bytes (TensorFlow does not require a suffix).
// A remote file goes by its name: looking would start its download.
StreamCodec file_codec(const ShardAccess& access, const std::string& name) {
  if (net::is_remote(name)) return StreamCodec::kNone;
  StreamCodec codec = StreamCodec::kNone;
  tfrecord_source(access.open(name, 0, kWho), name, &codec);
  return codec;
}

TfShard plain_shard(const ShardAccess& access, const std::string& name,
                    const TFRecordOptions& options) {
  const ShardStat stat = access.stat(name, kWho);
  TfShard s;
  s.name = name;
  s.seekable = true;
  s.bytes = stat.size;
  if (auto payload = access.load_index(name, kIndexSuffix, kIndexMagic, kIndexVersion, stat)) {
    if (auto index = parse_index(*payload, options.verify_crc, stat.size)) {
      s.index = std::make_shared<const TFRecordIndex>(std::move(*index));
    } else {
      logger().debug("{}: the index of {} does not fit it: rebuilding it", kWho, name);
    }
  }
  if (!s.index) {
    TFRecordIndex index;
    if (stat.size > 0) {
      // A remote file is indexed from its complete copy in the cache.
      const auto hold = net::is_remote(name) ? access.remote()->acquire_complete(name) : nullptr;
      const auto file = MappedFile::open(hold != nullptr ? hold->path() : name, "TFRecordDataset");
      index = index_tfrecords(file->bytes(), options.verify_crc);
      if (!file->intact()) {
        throw TFRecordError(file->shrink_message(kWho), name, 0);
      }
    }
    if (!index.bad_regions.empty()) {
      logger().warn(
          "{}: {}: {} damaged region(s), the first at byte {}; each reads as one bad "
          "record",
          kWho, name, index.bad_regions.size(), index.bad_regions.front().offset);
    }
    access.save_index(name, kIndexSuffix, kIndexMagic, kIndexVersion, stat,
                      serialize_index(index, options.verify_crc));
    s.index = std::make_shared<const TFRecordIndex>(std::move(index));
  }
  s.records = s.index->entries.size();
  return s;
}

// Records of a stream-only file, counted by reading it (a bad record counts as one).
std::uint64_t count_records(const ShardAccess& access, const std::string& name, bool verify) {
  TFRecordStream stream(tfrecord_source(access.open(name, 0, kWho), name), name, verify);
  std::uint64_t n = 0;
  for (;;) {
    try {
      if (!stream.next()) return n;
    } catch (const Error&) {
    }
    ++n;
  }
}

std::uint64_t cached_count(const ShardAccess& access, const std::string& name,
                           const TFRecordOptions& options) {
  const ShardStat stat = access.stat(name, kWho);
  if (auto payload = access.load_index(name, kIndexSuffix, kIndexMagic, kIndexVersion, stat)) {
    IndexReader r(*payload);
    std::uint8_t kind = 0;
    std::uint8_t verified = 0;
    std::uint64_t n = 0;
    if (r.u8(kind) && r.u8(verified) && r.u64(n) && kind == kCount &&
        (verified != 0) == options.verify_crc && r.remaining() == 0) {
      return n;
    }
  }
  const std::uint64_t n = count_records(access, name, options.verify_crc);
  IndexWriter w;
  w.u8(kCount);
  w.u8(options.verify_crc ? 1 : 0);
  w.u64(n);
  access.save_index(name, kIndexSuffix, kIndexMagic, kIndexVersion, stat, w.data());
  return n;
}

std::shared_ptr<const ShardFormat> make_map_format(const std::vector<std::string>& files,
                                                   const TFRecordOptions& options) {
  if (files.empty()) {
    throw std::invalid_argument(
        "TFRecordDataset: no files given; pass one or more .tfrecord files");
  }
  ShardAccess access(RemoteSource::for_names(files, options.remote), options, files);
  access.prefetch_indexes(files, kIndexSuffix);
  std::vector<TfShard> shards;
  shards.reserve(files.size());
  for (const std::string& name : files) {
    const StreamCodec codec = is_stream_only(name) ? StreamCodec::kGzip : file_codec(access, name);
    if (codec != StreamCodec::kNone) {
      throw std::invalid_argument(fmt::format(
          "TFRecordDataset: {} is {}, which cannot be read at random; stream it with "
          "TFRecordDataset::stream(), or decompress it (gunzip, or zlib-flate -uncompress)",
          name,
          is_pipe_shard(name)           ? "a pipe"
          : codec == StreamCodec::kZlib ? "zlib-compressed"
                                        : "compressed"));
    }
    shards.push_back(plain_shard(access, name, options));
  }
  return std::make_shared<const TFRecordFormat>(std::move(shards), options, access.remote());
}

}  // namespace
}  // namespace detail

TFRecordDataset::TFRecordDataset(std::vector<std::string> files, TFRecordOptions options)
    : ShardedDataset(detail::make_map_format(files, options), options) {}

ShardedStream TFRecordDataset::stream(std::vector<std::string> files, StreamOptions stream_options,
                                      TFRecordOptions options) {
  using namespace detail;
  if (files.empty()) throw std::invalid_argument("TFRecordDataset::stream: no files given");
  const std::vector<std::uint64_t>& counts = stream_options.sample_counts;
  if (!counts.empty() && counts.size() != files.size()) {
    throw std::invalid_argument(fmt::format(
        "StreamOptions::sample_counts: {} counts for {} files; give one per file, or none",
        counts.size(), files.size()));
  }
  ShardAccess access(RemoteSource::for_names(files, options.remote), options, files);
  std::vector<std::string> indexed;  // pipes are counted by running them, not indexed
  for (const std::string& name : files) {
    if (!is_pipe_shard(name)) indexed.push_back(name);
  }
  access.prefetch_indexes(indexed, kIndexSuffix);
  std::vector<TfShard> shards;
  shards.reserve(files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::string& name = files[i];
    if (!is_stream_only(name) && file_codec(access, name) == StreamCodec::kNone) {
      shards.push_back(plain_shard(access, name, options));
      continue;
    }
    TfShard s;
    s.name = name;
    if (!counts.empty()) {
      s.records = counts[i];
    } else if (is_pipe_shard(name)) {
      s.records = count_records(access, name, options.verify_crc);  // runs the command once
    } else {
      s.records = cached_count(access, name, options);
    }
    shards.push_back(std::move(s));
  }
  return ShardedStream(
      std::make_shared<const TFRecordFormat>(std::move(shards), options, access.remote()), options,
      std::move(stream_options));
}

namespace {
constexpr std::size_t kWriterFlushBytes = std::size_t{1} << 20;
}  // namespace

TFRecordWriter::TFRecordWriter(const std::string& path) : path_(path) {
  fd_ = detail::posix::open_write(path.c_str());
  if (fd_ < 0) {
    throw Error(
        detail::posix::errno_message(fmt::format("TFRecordWriter: cannot create {}", path), errno) +
        "; check that its directory exists and is writable");
  }
}

TFRecordWriter::~TFRecordWriter() {
  if (fd_ < 0) return;
  (void)detail::posix::write_all(fd_, pending_.data(), pending_.size());
  detail::posix::close_fd(fd_);
}

void TFRecordWriter::flush() {
  errno = 0;  // a write of 0 bytes (a full disk) sets none
  if (detail::posix::write_all(fd_, pending_.data(), pending_.size()) != 0) {
    const int err = errno != 0 ? errno : ENOSPC;
    pending_.clear();
    detail::posix::close_fd(std::exchange(fd_, -1));  // closed: later writes say so
    throw Error(
        detail::posix::errno_message(fmt::format("TFRecordWriter: writing {}", path_), err) +
        "; check the free space");
  }
  pending_.clear();
}

void TFRecordWriter::write(std::span<const std::byte> record) {
  if (fd_ < 0) throw Error(fmt::format("TFRecordWriter: {} is closed", path_));
  detail::append_tfrecord(pending_, record);
  ++records_;
  if (pending_.size() >= kWriterFlushBytes) flush();
}

void TFRecordWriter::write_example(const Sample& features) {
  using detail::ExampleValue;
  using detail::FeatureKind;
  std::vector<ExampleValue> values;
  values.reserve(features.size());
  for (const Field& field : features) {
    const std::string& name = field.name;  // not a structured binding: the lambdas capture it
    const Tensor& tensor = field.tensor;
    ExampleValue v;
    v.name = name;
    const std::size_t n = tensor.numel();
    const auto as = [&](auto tag) {
      using T = decltype(tag);
      std::vector<T> out(n);
      if (n > 0) std::memcpy(out.data(), tensor.raw_data(), n * sizeof(T));
      return out;
    };
    const auto ints = [&](auto tag) {
      for (const auto x : as(tag)) v.ints.push_back(static_cast<std::int64_t>(x));
    };
    switch (tensor.dtype()) {
      case DType::kUInt8:
        v.kind = FeatureKind::kBytes;
        v.bytes.emplace_back(reinterpret_cast<const char*>(tensor.raw_data()), tensor.nbytes());
        break;
      case DType::kInt8:
        v.kind = FeatureKind::kInt64;
        ints(std::int8_t{});
        break;
      case DType::kUInt16:
        v.kind = FeatureKind::kInt64;
        ints(std::uint16_t{});
        break;
      case DType::kInt16:
        v.kind = FeatureKind::kInt64;
        ints(std::int16_t{});
        break;
      case DType::kUInt32:
        v.kind = FeatureKind::kInt64;
        ints(std::uint32_t{});
        break;
      case DType::kInt32:
        v.kind = FeatureKind::kInt64;
        ints(std::int32_t{});
        break;
      case DType::kUInt64:
        v.kind = FeatureKind::kInt64;
        ints(std::uint64_t{});
        break;
      case DType::kInt64:
        v.kind = FeatureKind::kInt64;
        ints(std::int64_t{});
        break;
      case DType::kBool:
        v.kind = FeatureKind::kInt64;
        ints(std::uint8_t{});
        break;
      case DType::kFloat32:
        v.kind = FeatureKind::kFloat;
        v.floats = as(float{});
        break;
      case DType::kFloat64:
        v.kind = FeatureKind::kFloat;
        for (const double x : as(double{})) v.floats.push_back(static_cast<float>(x));
        break;
      default:
        throw std::invalid_argument(fmt::format(
            "TFRecordWriter::write_example: field '{}' is {}, which tf.train.Example cannot "
            "hold (int64, float and bytes lists); convert it to float32",
            name, dtype_name(tensor.dtype())));
    }
    values.push_back(std::move(v));
  }
  write(detail::serialize_example(values));
}

std::vector<std::string> TFRecordWriter::close() {
  if (fd_ < 0) return {path_};
  flush();
  if (detail::posix::close_fd(std::exchange(fd_, -1)) != 0) {
    throw Error(
        detail::posix::errno_message(fmt::format("TFRecordWriter: closing {}", path_), errno) +
        "; check the free space");
  }
  return {path_};
}

}  // namespace stoker
