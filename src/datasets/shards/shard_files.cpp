#include "datasets/shards/shard_files.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>

#include <fmt/format.h>

#include "datasets/remote/remote_source.hpp"
#include "os/net/url.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {
namespace {
constexpr std::size_t kFirstReadahead = 64 * 1024;
constexpr std::size_t kMaxReadahead = 1024 * 1024;
// A read starting at most this far past the previous one's end counts as sequential: the next
// record of a tar shard starts after its header and padding.
constexpr std::uint64_t kSequentialGap = 16 * 1024;
}  // namespace

ShardFiles::ShardFiles(std::size_t max_open, const RemoteSource* remote)
    : max_open_(max_open), remote_(remote) {
  if (max_open == 0) {
    throw std::invalid_argument(
        "ShardOptions::max_open_shards: 0 files cannot read a shard; give 1 or more (default 64)");
  }
}

int ShardFiles::fd(std::size_t shard, const std::string& path) {
  const auto found = open_.find(shard);
  if (found != open_.end()) {
    lru_.splice(lru_.begin(), lru_, found->second.lru);
    // A remote shard's descriptor is its cache hold's (Open::fd stays empty).
    return found->second.hold != nullptr ? found->second.hold->fd() : found->second.fd.get();
  }
  if (open_.size() >= max_open_) {
    const std::size_t victim = lru_.back();
    lru_.pop_back();
    open_.erase(victim);
    if (victim == window_shard_) window_shard_ = ~std::size_t{0};
  }
  if (net::is_remote(path)) {
    if (remote_ == nullptr) {
      throw Error(
          fmt::format("cannot open shard {}: a URL, but this reader has no remote "
                      "options; this is a bug in stoker",
                      path));
    }
    // While this waits for room in the cache, the shards open here are let go of: they may be
    // what holds it.
    std::shared_ptr<CacheHold> hold = remote_->acquire(path, Need::kNow, [this] {
      open_.clear();
      lru_.clear();
      window_shard_ = ~std::size_t{0};
    });
    hold->wait_for(hold->size());
    lru_.push_front(shard);
    Open& entry = open_[shard];
    entry.hold = std::move(hold);
    entry.lru = lru_.begin();
    return entry.hold->fd();
  }
  posix::Fd fd(posix::open_read(path.c_str()));
  if (!fd.valid()) {
    throw Error(fmt::format("cannot open shard {}: {}; check that it still exists", path,
                            posix::errno_message("open", errno)));
  }
  lru_.push_front(shard);
  Open& entry = open_[shard];
  entry.fd = std::move(fd);
  entry.lru = lru_.begin();
  return entry.fd.get();
}

std::unique_ptr<StreamSource> ShardFiles::open_stream(std::size_t, const std::string& name,
                                                      std::uint64_t offset, std::string_view who) {
  // A remote shard read ahead is downloading (or complete) already: this hold of the reader's
  // own puts its parts first.
  return open_stream_source(name, offset, who, remote_);
}

void ShardFiles::read_ahead(std::span<const std::pair<std::size_t, std::string>> next) {
  if (remote_ == nullptr) return;
  const RemoteOptions& o = remote_->options();
  std::vector<std::pair<std::size_t, std::shared_ptr<CacheHold>>> kept;
  std::uint64_t bytes = 0;
  for (const auto& [shard, name] : next) {
    if (kept.size() >= o.read_ahead_shards) break;
    if (!net::is_remote(name)) continue;
    std::shared_ptr<CacheHold> hold;
    for (auto& [s, h] : ahead_) {
      if (s == shard) hold = std::move(h);
    }
    if (hold == nullptr) {
      const std::uint64_t size = remote_->size_of(name).value_or(0);
      if (o.read_ahead_bytes != 0 && bytes + size > o.read_ahead_bytes && !kept.empty()) break;
      hold = remote_->acquire(name, Need::kAhead);
      if (hold == nullptr) break;  // no room now: the reader fetches it when it gets there
    }
    bytes += hold->size();
    kept.emplace_back(shard, std::move(hold));
  }
  ahead_ = std::move(kept);  // holds not kept are let go of here
}

void ShardFiles::settle_downloads() {
  if (remote_ == nullptr) return;
  ahead_.clear();
  ShardCache::process(remote_->options())->settle(remote_->options().timeouts.low_speed_time);
}

std::span<const std::byte> ShardFiles::read(std::size_t shard, const std::string& path,
                                            std::uint64_t offset, std::size_t size) {
  // INV-WINDOW: window_ holds bytes [window_begin_, window_begin_ + window_bytes_) of
  // window_shard_ (nothing when window_shard_ is ~0).
  if (shard == window_shard_ && offset >= window_begin_ &&
      offset - window_begin_ <= window_bytes_ && size <= window_bytes_ - (offset - window_begin_)) {
    last_end_ = offset + size;
    return std::span<const std::byte>(window_).subspan(
        static_cast<std::size_t>(offset - window_begin_), size);
  }
  const bool sequential =
      shard == window_shard_ && offset >= last_end_ && offset - last_end_ <= kSequentialGap;
  readahead_ = sequential ? std::min(std::max(readahead_ * 2, kFirstReadahead), kMaxReadahead) : 0;
  const std::size_t want = std::max(size, readahead_);
  if (window_.size() < want) window_.resize(want);
  const int descriptor = fd(shard, path);
  window_shard_ = ~std::size_t{0};
  std::size_t done = 0;
  while (done < want) {
    ++read_calls_;
    const ssize_t n = posix::pread_some(descriptor, window_.data() + done, want - done,
                                        static_cast<off_t>(offset + done));
    if (n < 0) {
      throw ShardError(fmt::format("cannot read shard {} at byte {}: {}; check the disk, or copy "
                                   "the shard again",
                                   path, offset + done, posix::errno_message("pread", errno)),
                       path, offset + done);
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  if (done < size) {
    throw ShardError(
        fmt::format(
            "shard {} ends at byte {}, before the {} bytes its index says are at byte {}: it "
            "changed after it was indexed (or was cut short); delete its .idx file to index it "
            "again",
            path, offset + done, size, offset),
        path, offset);
  }
  window_shard_ = shard;
  window_begin_ = offset;
  window_bytes_ = done;
  last_end_ = offset + size;
  if (sequential && readahead_ == kMaxReadahead) {
    // Reading front to back: ask the kernel for the next window now, so the disk works while
    // this one is used (on a cold page cache a window otherwise waits for its own read).
    (void)posix::advise_file(descriptor, static_cast<off_t>(offset + done),
                             static_cast<off_t>(kMaxReadahead), POSIX_FADV_WILLNEED);
  }
  return std::span<const std::byte>(window_).first(size);
}

}  // namespace stoker::detail
