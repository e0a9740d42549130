// The shard engine: ShardedDataset (map-style over any ShardFormat's index), ShardedStream
// (iterable: epoch order, the (rank, worker) split, the shuffle buffer, resume), and the pure
// parts they rest on (plan_stream_split, expand_shards).
#include <algorithm>
#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "data/random_state.hpp"
#include "datasets/remote/remote_source.hpp"
#include "datasets/shards/shard_files.hpp"
#include "datasets/shards/shard_format.hpp"
#include "datasets/shards/stream_state.hpp"
#include "stoker/errors.hpp"
#include "stoker/random.hpp"
#include "stoker/shards.hpp"
#include "stoker/worker_info.hpp"

namespace stoker {
namespace detail {

struct MapReaderState {
  MapReaderState(std::size_t max_open, const RemoteSource* remote) : files(max_open, remote) {}
  ShardFiles files;
  RawRecord record;
};

struct StreamReaderState {
  StreamReaderState(std::size_t max_open, const RemoteSource* remote) : files(max_open, remote) {}
  ShardFiles files;
  bool started = false;
  std::uint64_t epoch = 0;
  StreamSplit split;
  std::size_t stream = 0;
  std::vector<std::size_t> order;          // the epoch's shard order
  std::vector<std::uint64_t> order_first;  // first position of each, then T
  std::uint64_t position = 0;              // the next record's position in the epoch order
  std::uint64_t reads = 0;                 // records taken this epoch (bad ones included)
  std::uint64_t delivered = 0;             // good records handed out this epoch
  std::unique_ptr<RecordCursor> cursor;
  std::size_t cursor_slot = 0;    // which entry of `order` it reads
  std::uint64_t cursor_next = 0;  // the record it returns next
  std::vector<RawRecord> buffer;
  std::vector<RawRecord> spares;  // records whose buffers wait for reuse
  Generator rng;
};

namespace {

// Keys that keep the epoch's generators apart (the shard order, each stream's buffer).
constexpr std::uint64_t kShardOrderKey = 0x5348524430524452ull;
constexpr std::uint64_t kBufferKey = 0x5348524442554646ull;

std::shared_ptr<const std::vector<std::uint64_t>> first_indexes(const ShardFormat& format) {
  auto firsts = std::make_shared<std::vector<std::uint64_t>>();
  firsts->reserve(format.num_shards() + 1);
  std::uint64_t total = 0;
  for (std::size_t s = 0; s < format.num_shards(); ++s) {
    firsts->push_back(total);
    total += format.shard_records(s);
  }
  firsts->push_back(total);
  return firsts;
}

}  // namespace
}  // namespace detail

// ---------------------------------------------------------------------------------------------
// The split

std::uint64_t StreamSplit::first(std::size_t stream) const noexcept {
  if (total == 0) return 0;
  // (s x N) mod T by doubling, so that no product overflows.
  std::uint64_t a = stream % total;
  std::uint64_t b = per_stream % total;
  std::uint64_t result = 0;
  while (b != 0) {
    if (b & 1) result = result >= total - a ? result - (total - a) : result + a;
    a = a >= total - a ? a - (total - a) : a + a;
    b >>= 1;
  }
  return result;
}

std::uint64_t StreamSplit::batches_per_stream(std::size_t batch_size,
                                              bool drop_last) const noexcept {
  if (batch_size == 0) return 0;
  return drop_last ? per_stream / batch_size : (per_stream + batch_size - 1) / batch_size;
}

StreamSplit plan_stream_split(std::uint64_t total, std::size_t world_size, int num_workers,
                              EqualBatches policy) {
  if (world_size == 0) {
    throw std::invalid_argument("plan_stream_split: world_size is 0; it counts the ranks, >= 1");
  }
  if (num_workers < 0) {
    throw std::invalid_argument(fmt::format(
        "plan_stream_split: num_workers {} is negative; give the loader's resolved worker count "
        "(not kAuto)",
        num_workers));
  }
  StreamSplit s;
  s.total = total;
  s.streams = world_size * static_cast<std::size_t>(std::max(num_workers, 1));
  if (policy == EqualBatches::kPad) {
    s.per_stream = (total + s.streams - 1) / s.streams;
    s.repeated = s.per_stream * s.streams - total;
  } else {
    s.per_stream = total / s.streams;
    s.dropped = total - s.per_stream * s.streams;
  }
  return s;
}

std::vector<std::string> expand_shards(std::string_view pattern) {
  const std::size_t open = pattern.find('{');
  const std::size_t stray = pattern.find('}');
  if (open == std::string_view::npos) {
    if (stray != std::string_view::npos) {
      throw std::invalid_argument(
          fmt::format("expand_shards: '}}' without '{{' in \"{}\"", pattern));
    }
    return {std::string(pattern)};
  }
  const std::size_t close = pattern.find('}', open);
  if (close == std::string_view::npos ||
      pattern.substr(open + 1, close - open - 1).find('{') != std::string_view::npos) {
    throw std::invalid_argument(
        fmt::format("expand_shards: unbalanced or nested braces in \"{}\"; write groups such as "
                    "{{000..099}} or {{a,b}}",
                    pattern));
  }
  const std::string_view head = pattern.substr(0, open);
  const std::string_view body = pattern.substr(open + 1, close - open - 1);
  const std::vector<std::string> tails = expand_shards(pattern.substr(close + 1));
  std::vector<std::string> choices;
  const std::size_t dots = body.find("..");
  if (dots != std::string_view::npos) {
    const std::string_view lo_text = body.substr(0, dots);
    const std::string_view hi_text = body.substr(dots + 2);
    std::uint64_t lo = 0;
    std::uint64_t hi = 0;
    if (!detail::parse_u64(lo_text, lo) || !detail::parse_u64(hi_text, hi) || hi < lo ||
        hi - lo > 10'000'000) {
      throw std::invalid_argument(fmt::format(
          "expand_shards: {{{}}} in \"{}\" is not a range of numbers low..high", body, pattern));
    }
    for (std::uint64_t v = lo; v <= hi; ++v) {
      choices.push_back(fmt::format("{:0{}}", v, lo_text.size()));
    }
  } else {
    std::string_view rest = body;
    for (;;) {
      const std::size_t comma = rest.find(',');
      choices.emplace_back(rest.substr(0, comma));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  std::vector<std::string> out;
  out.reserve(choices.size() * tails.size());
  for (const std::string& c : choices) {
    for (const std::string& t : tails) out.push_back(std::string(head) + c + t);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// ShardedDataset

ShardedDataset::ShardedDataset(std::shared_ptr<const detail::ShardFormat> format,
                               const ShardOptions& options)
    : format_(std::move(format)),
      plan_(std::make_shared<const detail::FieldPlan>(options)),
      first_index_(detail::first_indexes(*format_)),
      max_open_shards_(options.max_open_shards),
      reader_(
          std::make_unique<detail::MapReaderState>(options.max_open_shards, format_->remote())) {
  if (!format_->random_access()) {
    throw std::invalid_argument(
        fmt::format("{}: these shards cannot be read at random (compressed, or pipes); stream them",
                    format_->format_name()));
  }
}

ShardedDataset::ShardedDataset(const ShardedDataset& other)
    : format_(other.format_),
      plan_(other.plan_),
      first_index_(other.first_index_),
      max_open_shards_(other.max_open_shards_),
      reader_(std::make_unique<detail::MapReaderState>(other.max_open_shards_,
                                                       other.format_->remote())) {}

ShardedDataset& ShardedDataset::operator=(const ShardedDataset& other) {
  if (this != &other) *this = ShardedDataset(other);
  return *this;
}

ShardedDataset::ShardedDataset(ShardedDataset&&) noexcept = default;
ShardedDataset& ShardedDataset::operator=(ShardedDataset&&) noexcept = default;
ShardedDataset::~ShardedDataset() = default;

std::size_t ShardedDataset::size() const noexcept {
  return static_cast<std::size_t>(first_index_->back());
}
std::size_t ShardedDataset::num_shards() const noexcept { return format_->num_shards(); }
RemoteStats ShardedDataset::remote_stats() const noexcept {
  return format_->remote() != nullptr ? format_->remote()->stats() : RemoteStats{};
}
std::size_t ShardedDataset::remote_download_buffer_bytes() const noexcept {
  return format_->remote() != nullptr ? format_->remote()->download_buffer_bytes() : 0;
}
const std::string& ShardedDataset::shard_name(std::size_t shard) const {
  if (shard >= num_shards()) {
    throw std::out_of_range(
        fmt::format("{}::shard_name: shard {} of {}", format_->format_name(), shard, num_shards()));
  }
  return format_->shard_name(shard);
}
std::uint64_t ShardedDataset::shard_size(std::size_t shard) const {
  if (shard >= num_shards()) {
    throw std::out_of_range(
        fmt::format("{}::shard_size: shard {} of {}", format_->format_name(), shard, num_shards()));
  }
  return format_->shard_records(shard);
}
std::uint64_t ShardedDataset::bad_records() const noexcept { return format_->bad_records(); }

std::pair<std::size_t, std::uint64_t> ShardedDataset::locate(std::size_t index) const {
  const std::vector<std::uint64_t>& firsts = *first_index_;
  if (index >= firsts.back()) {
    throw std::out_of_range(fmt::format("{}::get: index {} of a dataset of {} samples",
                                        format_->format_name(), index, firsts.back()));
  }
  // The last shard starting at or before `index` (empty shards share a start: skip them).
  const auto it = std::upper_bound(firsts.begin(), firsts.end(), index);
  const auto shard = static_cast<std::size_t>(it - firsts.begin() - 1);
  return {shard, index - firsts[shard]};
}

Sample ShardedDataset::get(std::size_t index) {
  const auto [shard, k] = locate(index);
  detail::RawRecord& record = reader_->record;
  format_->read(shard, k, *plan_, reader_->files, record);
  if (!record.error.empty()) {
    throw ShardError(record.error, format_->shard_name(shard), record.offset);
  }
  Sample sample = [&] {
    try {
      return format_->decode(record, *plan_);
    } catch (...) {
      format_->check_mapping(record);  // zeros where the file was cut: report that instead
      throw;
    }
  }();
  format_->check_mapping(record);
  record.mapping.reset();
  return sample;
}

ShardedStream ShardedDataset::stream(StreamOptions options) const {
  return ShardedStream(format_, plan_, max_open_shards_, std::move(options));
}

// ---------------------------------------------------------------------------------------------
// ShardedStream

ShardedStream::ShardedStream(std::shared_ptr<const detail::ShardFormat> format,
                             const ShardOptions& options, StreamOptions stream_options)
    : ShardedStream(format, std::make_shared<const detail::FieldPlan>(options),
                    options.max_open_shards, std::move(stream_options)) {}

ShardedStream::ShardedStream(std::shared_ptr<const detail::ShardFormat> format,
                             std::shared_ptr<const detail::FieldPlan> plan,
                             std::size_t max_open_shards, StreamOptions stream_options)
    : format_(std::move(format)),
      plan_(std::move(plan)),
      first_index_(detail::first_indexes(*format_)),
      max_open_shards_(max_open_shards),
      options_(std::move(stream_options)),
      reader_(std::make_unique<detail::StreamReaderState>(max_open_shards, format_->remote())) {
  if (options_.world_size == 0 || options_.rank >= options_.world_size) {
    throw std::invalid_argument(fmt::format(
        "StreamOptions: rank {} is not below world_size {}; ranks count from 0 (detect_launch() "
        "reads both from the launcher)",
        options_.rank, options_.world_size));
  }
}

ShardedStream::ShardedStream(const ShardedStream& other)
    : format_(other.format_),
      plan_(other.plan_),
      first_index_(other.first_index_),
      max_open_shards_(other.max_open_shards_),
      options_(other.options_),
      pending_state_(other.pending_state_),
      reader_(std::make_unique<detail::StreamReaderState>(other.max_open_shards_,
                                                          other.format_->remote())) {}

ShardedStream& ShardedStream::operator=(const ShardedStream& other) {
  if (this != &other) *this = ShardedStream(other);
  return *this;
}

ShardedStream::ShardedStream(ShardedStream&&) noexcept = default;
ShardedStream& ShardedStream::operator=(ShardedStream&&) noexcept = default;
ShardedStream::~ShardedStream() = default;

std::uint64_t ShardedStream::total_samples() const noexcept { return first_index_->back(); }
std::size_t ShardedStream::num_shards() const noexcept { return format_->num_shards(); }
RemoteStats ShardedStream::remote_stats() const noexcept {
  return format_->remote() != nullptr ? format_->remote()->stats() : RemoteStats{};
}
std::size_t ShardedStream::remote_download_buffer_bytes() const noexcept {
  return format_->remote() != nullptr ? format_->remote()->download_buffer_bytes() : 0;
}
const StreamOptions& ShardedStream::options() const noexcept { return options_; }

StreamSplit ShardedStream::split(int num_workers) const {
  return plan_stream_split(total_samples(), options_.world_size, num_workers,
                           options_.equal_batches);
}

namespace detail {
namespace {

// Remote shards: the shards this stream reads after the one in `slot` (in the epoch's order,
// up to the end of its share of the epoch), to download while `slot` is read. Called by pull()
// after it took position - 1.
void read_ahead(const detail::ShardFormat& format, detail::StreamReaderState& st,
                std::size_t slot) {
  const std::uint64_t total = st.split.total;
  const std::uint64_t end = st.split.first(st.stream) + st.split.per_stream;  // past the share
  std::uint64_t lap = ((st.position - 1) / total) * total;  // kPad positions wrap round T
  std::vector<std::pair<std::size_t, std::string>> next;
  std::size_t s = slot;
  for (std::size_t k = 1; k < st.order.size() && next.size() < 64; ++k) {
    if (++s == st.order.size()) {
      s = 0;
      lap += total;
    }
    if (lap + st.order_first[s] >= end) break;
    next.emplace_back(st.order[s], format.shard_name(st.order[s]));
  }
  st.files.read_ahead(next);
}

// One record at the stream's position (modulo T: kPad wraps round) into `out`.
void pull(const detail::ShardFormat& format, const detail::FieldPlan& plan,
          detail::StreamReaderState& st, detail::RawRecord& out) {
  const std::uint64_t total = st.split.total;
  const std::uint64_t p = st.position % total;
  ++st.position;
  ++st.reads;
  const auto it = std::upper_bound(st.order_first.begin(), st.order_first.end(), p);
  const auto slot = static_cast<std::size_t>(it - st.order_first.begin() - 1);
  const std::uint64_t k = p - st.order_first[slot];
  const std::size_t shard = st.order[slot];
  if (!st.cursor || st.cursor_slot != slot || st.cursor_next != k) {
    st.cursor.reset();
    st.cursor = format.open(shard, k, plan, st.files);
    st.cursor_slot = slot;
    st.cursor_next = k;
    if (format.remote() != nullptr) read_ahead(format, st, slot);
  }
  if (!st.cursor->next(out)) {
    st.cursor.reset();
    out.clear();
    out.shard = shard;
    out.ordinal = k;
    out.error = fmt::format(
        "{}: {}: the shard ended after {} records, but its index counted {}: it changed after "
        "it was indexed; delete its .idx file (or fix StreamOptions::sample_counts)",
        format.format_name(), format.shard_name(shard), k, format.shard_records(shard));
    return;
  }
  ++st.cursor_next;
}

detail::RawRecord take_spare(detail::StreamReaderState& st) {
  if (st.spares.empty()) return {};
  detail::RawRecord r = std::move(st.spares.back());
  st.spares.pop_back();
  return r;
}

// The stream's next record out of the shuffle buffer, after refilling it; nullopt-like false
// when the stream has delivered its share. Throws the error of a record that cannot be read
// (its position is then used up, and the stream reads one more to make up for it).
bool draw(const detail::ShardFormat& format, const detail::FieldPlan& plan, std::size_t capacity,
          detail::StreamReaderState& st, detail::RawRecord& out) {
  const std::uint64_t target = st.split.per_stream;
  if (st.delivered >= target) return false;
  // Without this bound a stream of nothing but bad records would read forever.
  const std::uint64_t max_reads = target + st.split.total;
  while (st.buffer.size() < capacity && st.delivered + st.buffer.size() < target &&
         st.reads < max_reads) {
    detail::RawRecord record = take_spare(st);
    pull(format, plan, st, record);
    if (!record.error.empty()) {
      ShardError error(std::move(record.error), format.shard_name(record.shard), record.offset);
      st.spares.push_back(std::move(record));
      throw error;
    }
    st.buffer.push_back(std::move(record));
  }
  if (st.buffer.empty()) return false;
  const std::size_t pick =
      capacity > 1 ? static_cast<std::size_t>(st.rng.below(st.buffer.size())) : 0;
  std::swap(st.buffer[pick], st.buffer.back());
  std::swap(out, st.buffer.back());  // `out`'s old buffers go back to the spares
  st.spares.push_back(std::move(st.buffer.back()));
  st.buffer.pop_back();
  return true;
}

}  // namespace
}  // namespace detail

void ShardedStream::start_epoch(std::uint64_t epoch) {
  detail::StreamReaderState& st = *reader_;
  const WorkerInfo* info = worker_info();
  const std::size_t workers = info == nullptr ? 1 : info->num_workers;
  const std::size_t worker = info == nullptr ? 0 : info->id;
  st.started = true;
  st.epoch = epoch;
  st.split = split(static_cast<int>(workers));
  std::optional<detail::StreamState> saved;
  if (!pending_state_.empty()) {
    saved = detail::parse_stream_state(pending_state_);
    if (saved->epoch != epoch) saved.reset();
  }
  // A resumed epoch's first batch is the one after the last received, which came from worker
  // (batches mod workers): each worker w goes on with the stream of worker w + batches, so the
  // loader's round robin from worker 0 delivers the remaining batches in their order.
  const std::size_t plays =
      saved ? static_cast<std::size_t>((worker + saved->batches) % workers) : worker;
  st.stream = options_.rank * workers + plays;
  const std::size_t num_shards = format_->num_shards();
  st.order.resize(num_shards);
  for (std::size_t s = 0; s < num_shards; ++s) st.order[s] = s;
  if (options_.shuffle) {
    Generator::from({options_.seed, epoch, detail::kShardOrderKey})
        .shuffle(st.order.begin(), st.order.end());
  }
  st.order_first.clear();
  std::uint64_t at = 0;
  for (const std::size_t s : st.order) {
    st.order_first.push_back(at);
    at += format_->shard_records(s);
  }
  st.order_first.push_back(at);
  st.position = st.split.first(st.stream);
  st.reads = 0;
  st.delivered = 0;
  st.cursor.reset();
  for (detail::RawRecord& r : st.buffer) st.spares.push_back(std::move(r));
  st.buffer.clear();
  st.rng = Generator::from({options_.seed, epoch, st.stream, st.split.streams, detail::kBufferKey});

  if (!saved) return;
  if (saved->seed != options_.seed || saved->total != st.split.total ||
      saved->shards != num_shards || saved->world != options_.world_size ||
      saved->rank != options_.rank || std::max<std::uint64_t>(saved->workers, 1) != workers ||
      saved->policy != detail::policy_name(options_.equal_batches)) {
    throw std::invalid_argument(fmt::format(
        "ShardedStream: the loaded state was saved with seed {}, {} records in {} shards, rank "
        "{} of {}, {} workers, policy {}; this stream has seed {}, {} records in {} shards, rank "
        "{} of {}, {} workers, policy {}: resume with the same shards and options",
        saved->seed, saved->total, saved->shards, saved->rank, saved->world, saved->workers,
        saved->policy, options_.seed, st.split.total, num_shards, options_.rank,
        options_.world_size, info == nullptr ? 0 : workers,
        detail::policy_name(options_.equal_batches)));
  }
  // Replay the draws of the records already delivered, without decoding them, so the buffer
  // and the generator stand exactly where they stood.
  const std::uint64_t skip = std::min(saved->delivered[plays], st.split.per_stream);
  const std::size_t capacity =
      options_.shuffle ? std::max<std::size_t>(options_.shuffle_buffer, 1) : 1;
  detail::RawRecord record;
  while (st.delivered < skip) {
    try {
      if (!detail::draw(*format_, *plan_, capacity, st, record)) break;
    } catch (const Error&) {
      continue;  // it was reported (or skipped) before the save, and not counted as delivered
    }
    ++st.delivered;
    st.spares.push_back(std::move(record));
  }
}

std::optional<Sample> ShardedStream::next() {
  detail::StreamReaderState& st = *reader_;
  if (!st.started) start_epoch(0);
  if (st.split.total == 0) return std::nullopt;
  const std::size_t capacity =
      options_.shuffle ? std::max<std::size_t>(options_.shuffle_buffer, 1) : 1;
  detail::RawRecord record = detail::take_spare(st);
  if (!detail::draw(*format_, *plan_, capacity, st, record)) {
    st.spares.push_back(std::move(record));
    // Remote shards: a worker may exit once its share is read; its downloads are published
    // first, so the next epoch finds them in the cache.
    if (format_->remote() != nullptr) st.files.settle_downloads();
    return std::nullopt;
  }
  struct Recycle {
    detail::StreamReaderState& st;
    detail::RawRecord& record;
    ~Recycle() { st.spares.push_back(std::move(record)); }
  } recycle{st, record};
  detail::rekey_sample_rng((*first_index_)[record.shard] + record.ordinal);
  Sample sample = format_->decode(record, *plan_);
  ++st.delivered;
  return sample;
}

std::string ShardedStream::state_for(std::uint64_t epoch, std::uint64_t batches,
                                     std::size_t batch_size, int num_workers, bool in_order) const {
  if (num_workers < 0) {
    throw std::invalid_argument(
        "ShardedStream::state: LoaderOptions::num_workers is kAuto; give the loader a worker "
        "count so its streams are known");
  }
  if (!in_order) {
    throw std::invalid_argument(
        "ShardedStream::state: LoaderOptions::in_order is false, so which worker's batches were "
        "received is unknown; resume needs in_order = true");
  }
  if (batch_size == 0) {
    throw std::invalid_argument("ShardedStream::state: LoaderOptions::batch_size is 0");
  }
  const StreamSplit s = split(num_workers);
  const auto workers = static_cast<std::size_t>(std::max(num_workers, 1));
  // Every stream has the same number of batches, so batch j came from worker j mod workers.
  detail::StreamState saved;
  for (std::size_t w = 0; w < workers; ++w) {
    const std::uint64_t from_w = batches / workers + (w < batches % workers ? 1 : 0);
    saved.delivered.push_back(std::min<std::uint64_t>(from_w * batch_size, s.per_stream));
  }
  saved.epoch = epoch;
  saved.seed = options_.seed;
  saved.total = s.total;
  saved.shards = num_shards();
  saved.world = options_.world_size;
  saved.rank = options_.rank;
  saved.workers = static_cast<std::uint64_t>(num_workers);
  saved.policy = std::string(detail::policy_name(options_.equal_batches));
  saved.batches = batches;
  return detail::format_stream_state(saved);
}

void ShardedStream::load_state(std::string_view state) {
  const detail::StreamState saved = detail::parse_stream_state(state);  // throws when malformed
  (void)saved;
  pending_state_ = std::string(state);
}

}  // namespace stoker
