#include "datasets/remote/shard_access.hpp"

#include <sys/stat.h>

#include <cstring>

#include "os/net/url.hpp"
#include "os/posix.hpp"

namespace stoker::detail {
namespace {

constexpr std::uint64_t kMaxIndexBytes = std::uint64_t{1} << 30;
// The shard's mtime in an index file's frame (index_cache.hpp: magic 8 | version 4 | 0 4 |
// size 8 | mtime 8 | ...): a remote index carries its writer's, which is checked as such.
constexpr std::size_t kFrameMtimeAt = 24;

}  // namespace

ShardAccess::ShardAccess(std::shared_ptr<RemoteSource> remote, const ShardOptions& options,
                         const std::vector<std::string>& names)
    : remote_(std::move(remote)), index_dir_(options.index_dir), write_index_(options.write_index) {
  if (remote_ == nullptr) return;
  for (const std::string& name : names) {
    if (net::is_remote(name)) unstated_.push_back(name);
  }
}

void ShardAccess::learn_sizes() const {
  if (unstated_.empty()) return;
  remote_->stat_all(unstated_);
  unstated_.clear();
}

void ShardAccess::prefetch_indexes(const std::vector<std::string>& names, std::string_view suffix) {
  if (remote_ == nullptr) return;
  std::vector<std::string> urls;
  for (const std::string& name : names) {
    struct ::stat st {};
    if (!net::is_remote(name) || posix::stat_path(local_index_path(name, suffix).c_str(), st)) {
      continue;  // a local shard, or its index is in the cache already
    }
    urls.push_back(net::append_to_name(name, std::string(suffix) + ".idx"));
  }
  if (urls.empty()) return;
  // The shards' HEADs and their index files' in one round: sizes of both, and which indexes
  // the server has.
  const std::vector<bool> exists = remote_->stat_and_probe(unstated_, urls);
  unstated_.clear();
  for (std::size_t i = 0; i < urls.size(); ++i) {
    prefetched_[urls[i]] = exists[i] ? remote_->acquire(urls[i], Need::kNow) : nullptr;
  }
}

ShardStat ShardAccess::stat(const std::string& name, std::string_view who) const {
  if (!net::is_remote(name)) return stat_shard(name, who);
  learn_sizes();
  ShardStat s;
  s.regular = true;
  s.size = remote_->size_of(name).value_or(0);
  return s;
}

std::string ShardAccess::local_index_path(const std::string& name, std::string_view suffix) const {
  if (!net::is_remote(name)) return index_path(name + std::string(suffix), index_dir_);
  return index_path(remote_->entry_path(name) + std::string(suffix), index_dir_);
}

std::optional<std::vector<std::byte>> ShardAccess::load_index(const std::string& name,
                                                              std::string_view suffix,
                                                              std::string_view magic,
                                                              std::uint32_t version,
                                                              const ShardStat& stat) const {
  if (auto local = detail::load_index(local_index_path(name, suffix), magic, version, stat)) {
    return local;
  }
  if (!net::is_remote(name)) return std::nullopt;
  const std::string url = net::append_to_name(name, std::string(suffix) + ".idx");
  std::optional<std::string> text;
  if (auto it = prefetched_.find(url); it != prefetched_.end()) {
    const std::shared_ptr<CacheHold> started = std::move(it->second);
    prefetched_.erase(it);
    if (started == nullptr) return std::nullopt;  // the server has none (its HEAD said 404)
    text = remote_->read_small(url, kMaxIndexBytes, started);
  } else {
    text = remote_->read_small(url, kMaxIndexBytes);
  }
  if (!text || text->size() < kFrameMtimeAt + 8) return std::nullopt;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(text->data()),
                                         text->size());
  ShardStat as_written = stat;
  std::memcpy(&as_written.mtime_ns, text->data() + kFrameMtimeAt, 8);  // little-endian hosts
  const auto payload = unframe_index(bytes, magic, version, as_written);
  if (!payload) return std::nullopt;  // another shard's, or damaged: index it here instead
  std::vector<std::byte> out(payload->begin(), payload->end());
  save_index(name, suffix, magic, version, stat, out);  // next time from the cache
  return out;
}

void ShardAccess::save_index(const std::string& name, std::string_view suffix,
                             std::string_view magic, std::uint32_t version, const ShardStat& stat,
                             std::span<const std::byte> payload) const {
  if (!write_index_) return;
  detail::save_index(local_index_path(name, suffix), magic, version, stat, payload);
}

std::unique_ptr<StreamSource> ShardAccess::open(const std::string& name, std::uint64_t offset,
                                                std::string_view who) const {
  if (remote_ != nullptr) learn_sizes();
  return open_stream_source(name, offset, who, remote_.get());
}

}  // namespace stoker::detail
