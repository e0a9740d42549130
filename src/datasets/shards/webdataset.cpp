// WebDatasetShards: the WebDataset tar format plugged into the shard engine (shard_format.hpp).
#include "stoker/webdataset.hpp"

#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "datasets/remote/shard_access.hpp"
#include "datasets/shards/byte_source.hpp"
#include "datasets/shards/index_cache.hpp"
#include "datasets/shards/shard_files.hpp"
#include "datasets/shards/shard_format.hpp"
#include "datasets/shards/tar_index.hpp"
#include "datasets/shards/tar_reader.hpp"
#include "os/log.hpp"
#include "stoker/errors.hpp"

namespace stoker {
namespace detail {
namespace {

constexpr std::string_view kWho = "WebDatasetShards";

std::string damage_message(const RecordRef& where, const TarDamage& d) {
  const std::string_view advice =
      d.problem == TarProblem::kTruncated ? "The shard was cut short: copy or write it again"
      : d.problem == TarProblem::kDuplicateField
          ? "A sample's fields need distinct names: write the shard again"
          : "The shard is damaged: write it again (stoker-shard, or tar)";
  return fmt::format(
      "{}: {}: {}; bytes {} to {} cannot be read as samples. {}, or skip bad records with "
      "LoaderOptions::on_sample_error = OnSampleError::kSkip",
      where.describe(), tar_problem_name(d.problem), d.detail, d.offset, d.resume, advice);
}

bool wants_field(const void* plan, std::string_view field) {
  return static_cast<const FieldPlan*>(plan)->wants(field);
}

// A 0-byte shard is a failed copy or download, not a shard without samples.
std::string empty_message(const std::string& name, bool compressed) {
  return fmt::format(
      "{}: {} is empty (0 bytes{}); a tar shard holds at least one member (GNU tar and Python's "
      "tarfile refuse it too): the copy or download that made it failed, so make it again",
      kWho, name, compressed ? " once decompressed" : "");
}

struct WdsShard {
  std::string name;
  bool seekable = false;                  // a plain file with an index of offsets
  std::shared_ptr<const TarIndex> index;  // plain files, and compressed ones (counts only)
  std::uint64_t records = 0;
};

class WebDatasetFormat;

// A shard read front to back with the tar parser; plain indexed files start at their record's
// offset, other shards are read from their start and the records before `first` skipped.
class TarCursor final : public RecordCursor {
 public:
  TarCursor(std::size_t shard, const WdsShard& s, std::uint64_t first, const FieldPlan& plan,
            ShardFiles& files, bool lowercase)
      : shard_(shard),
        start_(s.seekable && first < s.index->records.size() ? s.index->records[first].offset : 0),
        source_(files.open_stream(shard, s.name, start_, kWho)),
        reader_(*source_, start_, &wants_field, &plan, lowercase),
        ordinal_(start_ != 0 ? first : 0),
        name_(s.name) {
    while (ordinal_ < first && skip()) {
    }
  }

  bool next(RawRecord& out) override {
    out.clear();
    if (!reader_.next(sample_, true)) {
      // A shard counted without reading it (a pipe given sample_counts) that holds nothing:
      // its first record says so, the next ones that the shard ended early.
      if (!reader_.empty_stream() || std::exchange(empty_reported_, true)) return false;
      out.shard = shard_;
      out.ordinal = ordinal_++;
      out.error = empty_message(name_, false);
      return true;
    }
    out.shard = shard_;
    out.ordinal = ordinal_++;
    out.offset = sample_.offset;
    out.key = sample_.key;
    if (sample_.damage) {
      out.error =
          damage_message(RecordRef{kWho, name_, out.ordinal, out.offset, out.key}, *sample_.damage);
      return true;
    }
    out.storage.swap(sample_.storage);
    out.data = out.storage;
    for (const TarSample::Member& m : sample_.members) {
      if (m.stored) out.fields.push_back(RawField{m.field, m.stored_at, m.size, {}});
    }
    return true;
  }

  bool skip() override {
    if (!reader_.next(sample_, false)) return false;
    ++ordinal_;
    return true;
  }

 private:
  std::size_t shard_;
  std::uint64_t start_;
  std::unique_ptr<StreamSource> source_;
  TarSampleReader reader_;
  std::uint64_t ordinal_;
  std::string name_;
  TarSample sample_;
  bool empty_reported_ = false;
};

class WebDatasetFormat final : public ShardListFormat<WdsShard> {
 public:
  WebDatasetFormat(std::vector<WdsShard> shards, std::shared_ptr<RemoteSource> remote,
                   bool lowercase)
      : ShardListFormat(
            std::move(shards), [](const TarIndex& ix) { return ix.damages.size(); },
            std::move(remote)),
        lowercase_(lowercase) {}

  std::string_view format_name() const noexcept override { return kWho; }

  void read(std::size_t shard, std::uint64_t k, const FieldPlan& plan, ShardFiles& files,
            RawRecord& out) const override {
    const WdsShard& s = shards_[shard];
    const TarIndex& ix = *s.index;
    const TarIndex::Record& r = ix.records[static_cast<std::size_t>(k)];
    out.clear();
    out.shard = shard;
    out.ordinal = k;
    out.offset = r.offset;
    if (r.damage != 0) {
      throw ShardError(
          damage_message(RecordRef{kWho, s.name, k, r.offset, {}}, ix.damages[r.damage - 1]),
          s.name, r.offset);
    }
    const std::uint64_t begin = ix.span_begin(r);
    const std::uint64_t end = ix.span_end(r);
    if (end - begin > std::numeric_limits<std::size_t>::max() / 2) {
      throw Error(
          fmt::format("{}: {} bytes do not fit in memory", ref(out).describe(), end - begin));
    }
    out.set_borrowed(files.read(shard, s.name, begin, static_cast<std::size_t>(end - begin)));
    for (std::uint32_t i = 0; i < r.members; ++i) {
      const TarIndex::Member& m = ix.members[r.first_member + i];
      const std::string& field = ix.fields[m.field];
      if (!plan.wants(field)) continue;
      out.fields.push_back(RawField{field,
                                    static_cast<std::size_t>(m.data_offset - begin),
                                    static_cast<std::size_t>(m.size),
                                    {}});
    }
  }

  std::unique_ptr<RecordCursor> open(std::size_t shard, std::uint64_t first, const FieldPlan& plan,
                                     ShardFiles& files) const override {
    return std::make_unique<TarCursor>(shard, shards_[shard], first, plan, files, lowercase_);
  }

 private:
  bool lowercase_;
};

std::shared_ptr<const TarIndex> index_stream(const ShardAccess& access, const std::string& name,
                                             bool lowercase) {
  auto source = access.open(name, 0, kWho);
  std::uint64_t bytes = 0;
  auto index = std::make_shared<const TarIndex>(build_tar_index(*source, lowercase, &bytes));
  if (bytes == 0) throw ShardError(empty_message(name, is_compressed_shard(name)), name);
  return index;
}

// The cached index of a file shard (a remote one's: in the cache, or beside it on the server),
// or a new one (saved when it can be).
std::shared_ptr<const TarIndex> load_or_build(const ShardAccess& access, const std::string& name,
                                              const WebDatasetOptions& options, bool plain) {
  const ShardStat stat = access.stat(name, kWho);
  if (stat.size == 0 && stat.regular) throw ShardError(empty_message(name, false), name);
  const std::uint64_t bound = plain ? stat.size : std::numeric_limits<std::uint64_t>::max();
  if (auto payload = access.load_index(name, "", kTarIndexMagic, kTarIndexVersion, stat)) {
    auto index = parse_tar_index(*payload, bound);
    if (index && index->fits(options.lowercase_fields)) {
      return std::make_shared<const TarIndex>(std::move(*index));
    }
    logger().debug(
        "shard index of {} is malformed or was built with other field names: rebuilding it", name);
  }
  std::shared_ptr<const TarIndex> index = index_stream(access, name, options.lowercase_fields);
  if (plain && !index->records.empty() && index->records.size() == index->damages.size() &&
      index->records.front().offset == 0 &&
      index->damages.front().problem != TarProblem::kTruncated) {
    throw ShardError(
        fmt::format("{}: {} is not a tar file ({}: {}); a WebDataset shard is a tar archive (tar "
                    "--format=pax or stoker-shard writes one)",
                    kWho, name, tar_problem_name(index->damages.front().problem),
                    index->damages.front().detail),
        name);
  }
  if (options.write_index) {
    access.save_index(name, "", kTarIndexMagic, kTarIndexVersion, stat,
                      serialize_tar_index(*index));
  }
  return index;
}

WdsShard plain_shard(const ShardAccess& access, const std::string& name,
                     const WebDatasetOptions& options) {
  WdsShard s;
  s.name = name;
  s.seekable = true;
  s.index = load_or_build(access, name, options, true);
  s.records = s.index->records.size();
  return s;
}

std::shared_ptr<const ShardFormat> make_map_format(const std::vector<std::string>& shards,
                                                   const WebDatasetOptions& options) {
  if (shards.empty()) {
    throw std::invalid_argument("WebDatasetShards: no shards given; pass one or more .tar files");
  }
  ShardAccess access(RemoteSource::for_names(shards, options.remote), options, shards);
  access.prefetch_indexes(shards, "");
  std::vector<WdsShard> out;
  out.reserve(shards.size());
  for (const std::string& name : shards) {
    if (is_pipe_shard(name) || is_compressed_shard(name)) {
      throw std::invalid_argument(fmt::format(
          "WebDatasetShards: shard {} is {}, which cannot be read at random; stream it with "
          "WebDatasetShards::stream(), or decompress it to a .tar file",
          name, is_pipe_shard(name) ? "a pipe" : "compressed"));
    }
    out.push_back(plain_shard(access, name, options));
  }
  return std::make_shared<const WebDatasetFormat>(std::move(out), access.remote(),
                                                  options.lowercase_fields);
}

}  // namespace
}  // namespace detail

WebDatasetShards::WebDatasetShards(std::vector<std::string> shards, WebDatasetOptions options)
    : ShardedDataset(detail::make_map_format(shards, options), options) {}

ShardedStream WebDatasetShards::stream(std::vector<std::string> shards,
                                       StreamOptions stream_options, WebDatasetOptions options) {
  using namespace detail;
  if (shards.empty()) {
    throw std::invalid_argument("WebDatasetShards::stream: no shards given");
  }
  const std::vector<std::uint64_t>& counts = stream_options.sample_counts;
  if (!counts.empty() && counts.size() != shards.size()) {
    throw std::invalid_argument(fmt::format(
        "StreamOptions::sample_counts: {} counts for {} shards; give one per shard, or none",
        counts.size(), shards.size()));
  }
  ShardAccess access(RemoteSource::for_names(shards, options.remote), options, shards);
  std::vector<std::string> indexed;  // the shards whose index is loaded below
  for (std::size_t i = 0; i < shards.size(); ++i) {
    if (!is_pipe_shard(shards[i]) && (counts.empty() || !is_compressed_shard(shards[i]))) {
      indexed.push_back(shards[i]);
    }
  }
  access.prefetch_indexes(indexed, "");
  std::vector<WdsShard> out;
  out.reserve(shards.size());
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const std::string& name = shards[i];
    if (!is_pipe_shard(name) && !is_compressed_shard(name)) {
      out.push_back(plain_shard(access, name, options));
      continue;
    }
    WdsShard s;
    s.name = name;
    if (!counts.empty()) {
      s.records = counts[i];
    } else if (is_pipe_shard(name)) {
      // Runs the command once to count.
      s.records = index_stream(access, name, options.lowercase_fields)->records.size();
    } else {
      s.index = load_or_build(access, name, options, false);
      s.records = s.index->records.size();
    }
    out.push_back(std::move(s));
  }
  return ShardedStream(std::make_shared<const WebDatasetFormat>(std::move(out), access.remote(),
                                                                options.lowercase_fields),
                       options, std::move(stream_options));
}

}  // namespace stoker
