#include "datasets/records/mapped_shards.hpp"

#include <stdexcept>

#include "datasets/remote/remote_source.hpp"
#include "os/net/url.hpp"

namespace stoker::detail {

MappedShards::MappedShards(std::size_t capacity, const RemoteSource* remote)
    : capacity_(capacity), remote_(remote) {
  if (capacity == 0) {
    throw std::invalid_argument("ShardOptions::max_open_shards is 0; it must be at least 1");
  }
}

std::shared_ptr<const MappedFile> MappedShards::get(std::size_t shard, const std::string& path,
                                                    const char* who) const {
  MappedFile::guard();  // a forked worker's first read: before any byte is touched
  const std::lock_guard<std::mutex> lock(mutex_);
  if (shard == last_) return last_file_;  // consecutive records of one shard: no table lookup
  auto it = open_.find(shard);
  if (it != open_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  } else {
    last_ = ~std::size_t{0};
    last_file_.reset();
    if (open_.size() >= capacity_) {
      open_.erase(lru_.back());
      lru_.pop_back();
    }
    std::shared_ptr<CacheHold> hold;
    if (net::is_remote(path) && remote_ != nullptr) hold = remote_->acquire_complete(path);
    auto file = MappedFile::open(hold != nullptr ? hold->path() : path, who);
    lru_.push_front(shard);
    it = open_.emplace(shard, Entry{std::move(file), lru_.begin(), std::move(hold)}).first;
  }
  last_ = shard;
  last_file_ = it->second.file;
  return last_file_;
}

}  // namespace stoker::detail
