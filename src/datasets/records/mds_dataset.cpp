// MdsDataset: MosaicML MDS directories plugged into the shard engine
// (datasets/shards/shard_format.hpp).
#include "stoker/mds_dataset.hpp"

#include <sys/mman.h>
#include <sys/stat.h>

#include <cstring>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "datasets/records/compression.hpp"
#include "datasets/records/mapped_shards.hpp"
#include "datasets/records/mds_index.hpp"
#include "datasets/records/mds_shard.hpp"
#include "datasets/remote/remote_source.hpp"
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

constexpr std::string_view kWho = "MdsDataset";
// A shard's verified hash, cached as an index file ("<shard>.idx"): "algorithm:digest".
constexpr std::string_view kVerifiedMagic = "STKMDSHV";
constexpr std::uint32_t kVerifiedVersion = 1;

// What decode() does with a column.
enum class Action : std::uint8_t {
  kBytes,  // a bytes field: the FieldPlan decodes it by name (raw uint8 unless told otherwise)
  kImage,  // jpeg/png with no decoder of its own name: the decoders' "jpeg" / "png" entry
  kTyped,  // decode_mds_value
};

struct MdsShard {
  std::string raw_path;
  std::string zip_path;
  bool raw_present = false;
  bool zip_present = false;
  std::vector<Action> actions;             // per column
  std::vector<const FieldDecoder*> image;  // per column, for kImage
};

bool exists(const std::string& path) {
  struct stat st {};
  return posix::stat_path(path.c_str(), st);
}

std::string join_path(const std::string& directory, const std::string& name) {
  if (directory.empty()) return name;
  if (net::is_remote(directory)) return net::join_name(directory, name);
  return directory.back() == '/' ? directory + name : directory + "/" + name;
}

// A remote shard file's complete, checked copy in the cache (held while `hold` lives), or the
// local file itself.
std::string local_file(const RemoteSource* remote, const std::string& path,
                       std::shared_ptr<CacheHold>& hold) {
  if (remote == nullptr || !net::is_remote(path)) return path;
  hold = remote->acquire_complete(path);
  return hold->path();
}

// A shard file whole, mapped (its bytes as they are: the engine's byte sources would undo a
// .gz or .bz2 suffix), checked against the size index.json gives.
std::shared_ptr<const MappedFile> map_whole(const std::string& path, std::uint64_t expected) {
  auto file = MappedFile::open(path, "MdsDataset");
  if (file->size() != expected) {
    throw MdsError(fmt::format("{}: {}: the file is {} bytes, index.json says {}; it is damaged or "
                               "not the one the index was written with: re-copy it",
                               kWho, path, file->size(), expected),
                   path);
  }
  return file;
}

// "" when `data` matches a hash `file` lists (or none can be checked here), else the message.
std::string hash_mismatch(const MdsFileInfo& file, std::span<const std::byte> data,
                          const std::string& path) {
  const auto* pick = pick_mds_hash(file);
  if (pick == nullptr) return {};
  const auto digest = mds_hash(pick->first, data);
  if (!digest || *digest == pick->second) return {};
  return fmt::format(
      "{}: {}: hash mismatch: its {} is {}, index.json says {}; the file is damaged "
      "or not the one the index was written with: re-copy it",
      kWho, path, pick->first, *digest, pick->second);
}

// Whether a FieldSpec::name ("a;b;c": alternatives) names `column`.
bool names_column(std::string_view spec, std::string_view column) {
  while (!spec.empty()) {
    const std::size_t semi = spec.find(';');
    if (spec.substr(0, semi) == column) return true;
    if (semi == std::string_view::npos) break;
    spec.remove_prefix(semi + 1);
  }
  return false;
}

// A shard read whole (decompressed when only its compressed file is there), then sample by
// sample. A shard that fails its hash or its offsets makes each of its records an error.
class MdsCursor final : public RecordCursor {
 public:
  MdsCursor(std::size_t shard, const MdsShardInfo& info, const MdsShard& s, std::uint64_t first,
            bool verify, const RemoteSource* remote)
      : shard_(shard), info_(info), name_(s.raw_present ? s.raw_path : s.zip_path), next_(first) {
    try {
      // A remote file is read whole from the cache; its hash was checked when it arrived.
      if (s.raw_present) {
        raw_file_ = map_whole(local_file(remote, s.raw_path, hold_), info.raw.bytes);
        data_ = raw_file_->bytes();
        if (verify && hold_ == nullptr) error_ = hash_mismatch(info.raw, data_, s.raw_path);
      } else {
        const auto zip = map_whole(local_file(remote, s.zip_path, hold_), info.zip->bytes);
        if (verify && hold_ == nullptr) error_ = hash_mismatch(*info.zip, zip->bytes(), s.zip_path);
        if (error_.empty()) {
          decompressed_ =
              decompress_shard(info.codec, zip->bytes(), static_cast<std::size_t>(info.raw.bytes),
                               fmt::format("{}: {}", kWho, s.zip_path));
          data_ = decompressed_;
        }
      }
      if (error_.empty()) {
        const std::string where = fmt::format("{}: {}", kWho, name_);
        check_mds_shard(data_, info, std::string_view(where), name_);
      }
      if (raw_file_ && !raw_file_->intact()) error_ = raw_file_->shrink_message(kWho);
    } catch (const MdsError& e) {
      if (raw_file_ && !raw_file_->intact()) error_ = raw_file_->shrink_message(kWho);
      error_ = e.what();
    } catch (const Error& e) {  // corrupt compressed data, or a failed download
      error_ = e.what();
    }
  }

  bool next(RawRecord& out) override {
    out.clear();
    if (next_ >= info_.samples) return false;
    out.shard = shard_;
    out.ordinal = next_++;
    if (!error_.empty()) {
      out.error = error_;
      return true;
    }
    const std::size_t k = static_cast<std::size_t>(out.ordinal);
    std::uint32_t begin = 0;
    std::uint32_t end = 0;
    std::memcpy(&begin, data_.data() + 4 + 4 * k, 4);  // check_mds_shard checked them all
    std::memcpy(&end, data_.data() + 8 + 4 * k, 4);
    out.offset = begin;
    std::memcpy(out.own(end - begin).data(), data_.data() + begin, end - begin);
    if (raw_file_ && !raw_file_->intact()) {
      out.error =
          raw_file_->shrink_message(RecordRef{kWho, name_, out.ordinal, begin, {}}.describe());
    }
    return true;
  }

  bool skip() override {
    if (next_ >= info_.samples) return false;
    ++next_;
    return true;
  }

 private:
  std::size_t shard_;
  const MdsShardInfo& info_;
  std::string name_;
  std::uint64_t next_;
  std::shared_ptr<CacheHold> hold_;             // a remote shard's cache entry
  std::shared_ptr<const MappedFile> raw_file_;  // a raw shard, mapped
  std::vector<std::byte> decompressed_;         // or a compressed one, decompressed
  std::span<const std::byte> data_;             // the raw shard's bytes
  std::string error_;
};

// Messages name the record, and the column: made only when there is an error.
struct ColumnRef {
  const RecordRef* record;
  std::string_view column;
};
std::string describe_record(const void* ref) {
  return static_cast<const RecordRef*>(ref)->describe();
}
std::string describe_column(const void* at) {
  const auto* c = static_cast<const ColumnRef*>(at);
  return fmt::format("{} column '{}'", c->record->describe(), c->column);
}

// Scratch for decode(), one per process (the loader decodes on one thread).
struct DecodeScratch {
  std::vector<MdsCell> cells;
  RawRecord typed;
};

class MdsFormat final : public ShardFormat {
 public:
  MdsFormat(std::shared_ptr<const MdsIndex> index, std::vector<MdsShard> shards,
            const MdsOptions& options, bool random_access, std::shared_ptr<RemoteSource> remote)
      : ShardFormat(std::move(remote)),
        mapped_(options.max_open_shards, this->remote()),
        index_(std::move(index)),
        shards_(std::move(shards)),
        decoders_(options.decoders),
        verify_(options.verify_hashes),
        random_access_(random_access) {
    for (std::size_t i = 0; i < shards_.size(); ++i) plan_columns(i, options);
  }

  std::string_view format_name() const noexcept override { return kWho; }
  std::size_t num_shards() const noexcept override { return shards_.size(); }
  // The file read: the raw shard when it is there (always, map-style), else the compressed one.
  const std::string& shard_name(std::size_t shard) const override {
    const MdsShard& s = shards_[shard];
    return s.raw_present ? s.raw_path : s.zip_path;
  }
  std::uint64_t shard_records(std::size_t shard) const override {
    return index_->shards[shard].samples;
  }
  bool random_access() const noexcept override { return random_access_; }

  // Through the mapping of the shard (MappedShards), not ShardFiles: the offsets and the
  // sample are read with no system call.
  void read(std::size_t shard, std::uint64_t k, const FieldPlan&, ShardFiles&,
            RawRecord& out) const override {
    const MdsShardInfo& info = index_->shards[shard];
    const MdsShard& s = shards_[shard];
    out.clear();
    out.shard = shard;
    out.ordinal = k;
    out.mapping = mapped_.get(shard, s.raw_path, "MdsDataset");
    const std::span<const std::byte> bytes = out.mapping->bytes();
    if (bytes.size() != info.raw.bytes) {
      throw MdsError(fmt::format("{}: the file is {} bytes, index.json says {}: it changed after "
                                 "the dataset was opened; re-copy it",
                                 ref(out).describe(), bytes.size(), info.raw.bytes),
                     s.raw_path);
    }
    const auto k_at = static_cast<std::size_t>(4 + 4 * k);  // k < samples < 2^30
    const RecordRef where = ref(out);
    MdsSampleRange r;
    try {
      r = mds_sample_range(bytes.subspan(k_at, 8), k, info, MdsWhere(&describe_record, &where),
                           s.raw_path);
    } catch (const MdsError&) {
      check_mapping(out);  // offsets read from where the file was cut
      throw;
    }
    out.offset = r.begin;
    out.set_borrowed(bytes.subspan(static_cast<std::size_t>(r.begin),
                                   static_cast<std::size_t>(r.end - r.begin)));
  }

  std::unique_ptr<RecordCursor> open(std::size_t shard, std::uint64_t first, const FieldPlan&,
                                     ShardFiles&) const override {
    return std::make_unique<MdsCursor>(shard, index_->shards[shard], shards_[shard], first, verify_,
                                       remote());
  }

  void throw_shrunk(const RawRecord& record) const override {
    throw MdsError(record.mapping->shrink_message(ref(record).describe()), record.mapping->path(),
                   record.offset);
  }

  Sample decode(const RawRecord& record, const FieldPlan& plan) const override {
    static thread_local DecodeScratch scratch;
    const MdsShardInfo& info = index_->shards[record.shard];
    const MdsShard& s = shards_[record.shard];
    const RecordRef where_ref = ref(record);
    const std::span<const std::byte> bytes = record.bytes();
    split_mds_sample(bytes, info.columns, scratch.cells, MdsWhere(&describe_record, &where_ref),
                     where_ref.shard);
    RawRecord& typed = scratch.typed;
    typed.fields.clear();
    typed.set_borrowed(bytes);
    for (std::size_t c = 0; c < info.columns.size(); ++c) {
      const MdsColumn& column = info.columns[c];
      if (!plan.wants(column.name)) continue;
      const MdsCell cell = scratch.cells[c];
      const auto value = bytes.subspan(cell.offset, cell.size);
      const ColumnRef at{&where_ref, column.name};
      RawField field;
      field.name = column.name;
      switch (s.actions[c]) {
        case Action::kBytes:
          field.offset = cell.offset;
          field.size = cell.size;
          break;
        case Action::kImage:
          field.value =
              (*s.image[c])({reinterpret_cast<const std::uint8_t*>(value.data()), value.size()},
                            describe_column(&at));
          break;
        case Action::kTyped:
          field.value = decode_mds_value(column.encoding, value, MdsWhere(&describe_column, &at),
                                         where_ref.shard);
          break;
      }
      typed.fields.push_back(std::move(field));
    }
    return plan.assemble(typed, where_ref);
  }

 private:
  void plan_columns(std::size_t shard, const MdsOptions& options) {
    const MdsShardInfo& info = index_->shards[shard];
    MdsShard& s = shards_[shard];
    const FieldPlan plan(options);
    s.actions.assign(info.columns.size(), Action::kTyped);
    s.image.assign(info.columns.size(), nullptr);
    for (std::size_t c = 0; c < info.columns.size(); ++c) {
      const MdsColumn& column = info.columns[c];
      const MdsKind kind = column.encoding.kind;
      if (kind == MdsKind::kPickle && plan.wants(column.name)) {
        throw MdsError(
            fmt::format("{}: {}: column '{}' is encoded as pkl (Python pickle), which stoker "
                        "refuses: unpickling runs arbitrary code and has no C++ reader. Leave the "
                        "column out (ShardOptions::fields), or rewrite it with a typed encoding "
                        "(ndarray, json, bytes, int...)",
                        kWho, s.raw_path, column.name),
            s.raw_path);
      }
      if (kind == MdsKind::kBytes || kind == MdsKind::kStr || kind == MdsKind::kJson) {
        s.actions[c] = Action::kBytes;
      } else if (kind == MdsKind::kJpeg || kind == MdsKind::kPng) {
        // A decoder for the column's own name (or a FieldSpec's) wins; else the image entry.
        bool own = decoders_.find(column.name) != nullptr;
        for (const FieldSpec& spec : options.fields) {
          own = own || (spec.decoder && names_column(spec.name, column.name));
        }
        const FieldDecoder* image = decoders_.find(kind == MdsKind::kJpeg ? "jpeg" : "png");
        s.actions[c] = own || image == nullptr ? Action::kBytes : Action::kImage;
        s.image[c] = image;
      }
    }
  }

  MappedShards mapped_;  // this process's mappings of the raw shards (map-style reads)
  std::shared_ptr<const MdsIndex> index_;
  std::vector<MdsShard> shards_;
  FieldDecoders decoders_;
  bool verify_;
  bool random_access_;
};

std::shared_ptr<const MdsIndex> read_index(const std::string& directory,
                                           const RemoteSource* remote) {
  const std::string path = join_path(directory, "index.json");
  if (remote != nullptr) {
    // Through the node's cache: every rank on the machine reads the one copy.
    const std::optional<std::string> text = remote->read_small(path, std::uint64_t{256} << 20);
    if (!text) {
      throw MdsError(fmt::format("{}: {} does not exist; give the URL of the directory MDSWriter "
                                 "wrote (it holds index.json and the shard files)",
                                 kWho, path),
                     path);
    }
    return std::make_shared<const MdsIndex>(parse_mds_index(*text, path));
  }
  if (!exists(path)) {
    throw MdsError(fmt::format("{}: {} does not exist; give the directory MDSWriter wrote (it "
                               "holds index.json and the shard files)",
                               kWho, path),
                   path);
  }
  const auto file = MappedFile::open(path, "MdsDataset");
  const std::string_view text(reinterpret_cast<const char*>(file->data()), file->size());
  try {
    auto index = std::make_shared<const MdsIndex>(parse_mds_index(text, path));
    if (!file->intact()) throw MdsError(file->shrink_message(kWho), path);
    return index;
  } catch (const MdsError&) {
    if (!file->intact()) throw MdsError(file->shrink_message(kWho), path);
    throw;
  }
}

std::vector<MdsShard> locate_shards(const std::string& directory, const MdsIndex& index,
                                    RemoteSource* remote) {
  std::vector<bool> present;
  if (remote != nullptr) {
    // Which files the server has (HEADs, several at once): raw shards, and compressed ones.
    std::vector<std::string> urls;
    for (const MdsShardInfo& info : index.shards) {
      urls.push_back(join_path(directory, info.raw.basename));
      urls.push_back(info.zip ? join_path(directory, info.zip->basename) : std::string());
    }
    std::vector<std::string> asked;
    for (const std::string& u : urls) {
      if (!u.empty()) asked.push_back(u);
    }
    const std::vector<bool> found = remote->exists_all(asked);
    std::size_t at = 0;
    for (const std::string& u : urls) present.push_back(!u.empty() && found[at++]);
  }
  std::vector<MdsShard> shards;
  for (std::size_t i = 0; i < index.shards.size(); ++i) {
    const MdsShardInfo& info = index.shards[i];
    MdsShard s;
    s.raw_path = join_path(directory, info.raw.basename);
    s.raw_present = remote != nullptr ? present[2 * i] : exists(s.raw_path);
    if (info.zip) {
      s.zip_path = join_path(directory, info.zip->basename);
      s.zip_present = remote != nullptr ? present[2 * i + 1] : exists(s.zip_path);
    }
    if (!s.raw_present && !s.zip_present) {
      throw MdsError(
          fmt::format("{}: shard {} is missing: neither {}{} exists; copy the whole directory "
                      "MDSWriter wrote, or rewrite index.json without the shard",
                      kWho, i, s.raw_path, info.zip ? " nor " + s.zip_path : std::string()),
          s.raw_path);
    }
    shards.push_back(std::move(s));
  }
  return shards;
}

// A remote shard file is checked when it has arrived, before the cache keeps it: its size (the
// download's), its sample count (a raw shard) and the index's hash.
void verify_on_arrival(RemoteSource& remote, const MdsShardInfo& info, const MdsFileInfo& file,
                       const std::string& url, bool raw, const MdsOptions& options) {
  const auto* pick = options.verify_hashes ? pick_mds_hash(file) : nullptr;
  if (const auto size = remote.size_of(url); size && *size != file.bytes) {
    throw MdsError(fmt::format("{}: {}: the object is {} bytes, index.json says {}; it is damaged "
                               "or not the one the index was written with: upload it again",
                               kWho, url, *size, file.bytes),
                   url);
  }
  const std::uint64_t samples = info.samples;
  const std::string token =
      pick != nullptr ? pick->first + ":" + pick->second : std::string("count");
  remote.set_verify(
      url,
      [file, url, raw, samples, check_hash = pick != nullptr](int fd, std::uint64_t size) {
        void* p = posix::map_shared_read_only(fd, static_cast<std::size_t>(size));
        if (p == MAP_FAILED) {
          throw Error(
              posix::errno_message(fmt::format("{}: cannot map {} to check it", kWho, url), errno));
        }
        const std::span<const std::byte> data(static_cast<const std::byte*>(p),
                                              static_cast<std::size_t>(size));
        std::string problem;
        std::uint32_t count = 0;
        if (raw && size >= 4) std::memcpy(&count, data.data(), 4);
        if (raw && count != samples) {
          problem = fmt::format(
              "{}: {}: the shard holds {} samples, index.json says {}; upload "
              "the shard or its index.json again",
              kWho, url, count, samples);
        } else if (check_hash) {
          problem = hash_mismatch(file, data, url);
        }
        posix::unmap(p, static_cast<std::size_t>(size));
        if (!problem.empty()) throw MdsError(problem, url);
      },
      token);
}

// Map-style: a raw shard must be there, of the right size and count; its hash is checked once
// and the result cached beside it.
void check_raw_shard(const MdsShardInfo& info, const MdsShard& s, const MdsOptions& options) {
  if (!s.raw_present) {
    throw std::invalid_argument(fmt::format(
        "{}: shard {} exists only compressed ({}), which cannot be read at random; stream it "
        "with MdsDataset::stream(), or decompress it beside itself (to {})",
        kWho, s.zip_path, info.compression, s.raw_path));
  }
  if (net::is_remote(s.raw_path)) return;  // checked when it arrives (verify_on_arrival)
  const ShardStat stat = stat_shard(s.raw_path, kWho);
  if (stat.size != info.raw.bytes) {
    throw MdsError(fmt::format("{}: {}: the file is {} bytes, index.json says {}; it is damaged or "
                               "not the one the index was written with: re-copy it",
                               kWho, s.raw_path, stat.size, info.raw.bytes),
                   s.raw_path);
  }
  const auto file = MappedFile::open(s.raw_path, "MdsDataset");
  std::uint32_t count = 0;
  std::memcpy(&count, file->data(), 4);  // the file is >= 8 bytes: parse_mds_index checks
  if (!file->intact()) throw MdsError(file->shrink_message(kWho), s.raw_path);
  if (count != info.samples) {
    throw MdsError(fmt::format("{}: {}: the shard holds {} samples, index.json says {}; re-copy "
                               "the shard or its index.json",
                               kWho, s.raw_path, count, info.samples),
                   s.raw_path);
  }
  const auto* pick = options.verify_hashes ? pick_mds_hash(info.raw) : nullptr;
  if (options.verify_hashes && pick == nullptr && !info.raw.hashes.empty()) {
    logger().debug("{}: {}: no listed hash can be computed by this build: not checked", kWho,
                   s.raw_path);
  }
  if (pick == nullptr) return;
  const std::string verified = pick->first + ":" + pick->second;
  const std::string idx = index_path(s.raw_path + ".stoker", options.index_dir);
  if (auto payload = load_index(idx, kVerifiedMagic, kVerifiedVersion, stat)) {
    if (std::string_view(reinterpret_cast<const char*>(payload->data()), payload->size()) ==
        verified) {
      return;
    }
  }
  const std::string mismatch = hash_mismatch(info.raw, file->bytes(), s.raw_path);
  if (!file->intact()) throw MdsError(file->shrink_message(kWho), s.raw_path);
  if (!mismatch.empty()) throw MdsError(mismatch, s.raw_path);
  if (options.write_index) {
    save_index(idx, kVerifiedMagic, kVerifiedVersion, stat,
               {reinterpret_cast<const std::byte*>(verified.data()), verified.size()});
  }
}

}  // namespace
}  // namespace detail

namespace {

std::shared_ptr<const detail::ShardFormat> make_format(const std::string& directory,
                                                       const MdsOptions& options, bool map_style) {
  using namespace detail;
  std::shared_ptr<RemoteSource> remote = RemoteSource::for_names({directory}, options.remote);
  auto index = read_index(directory, remote.get());
  if (index->shards.empty()) {
    throw MdsError(fmt::format("{}: {}/index.json lists no shards", kWho, directory), directory);
  }
  std::vector<MdsShard> shards = locate_shards(directory, *index, remote.get());
  for (std::size_t i = 0; i < shards.size() && remote != nullptr; ++i) {
    const MdsShardInfo& info = index->shards[i];
    if (shards[i].raw_present) {
      verify_on_arrival(*remote, info, info.raw, shards[i].raw_path, true, options);
    }
    if (shards[i].zip_present) {
      verify_on_arrival(*remote, info, *info.zip, shards[i].zip_path, false, options);
    }
  }
  if (map_style) {
    for (std::size_t i = 0; i < shards.size(); ++i)
      check_raw_shard(index->shards[i], shards[i], options);
  }
  return std::make_shared<const MdsFormat>(std::move(index), std::move(shards), options, map_style,
                                           std::move(remote));
}

}  // namespace

MdsDataset::MdsDataset(const std::string& directory, MdsOptions options)
    : ShardedDataset(make_format(directory, options, true), options) {}

ShardedStream MdsDataset::stream(const std::string& directory, StreamOptions stream_options,
                                 MdsOptions options) {
  return ShardedStream(make_format(directory, options, false), options, std::move(stream_options));
}

}  // namespace stoker
