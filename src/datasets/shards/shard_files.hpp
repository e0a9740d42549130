// ShardFiles: one process's open shard files, for the formats' read() and cursors. Files are
// opened on first use in the process that reads them (a worker never reads through a
// descriptor of the main process: the engine makes a fresh ShardFiles per copy of a dataset),
// at most `max_open` at a time, the least recently used closed first, so a dataset of 100,000
// shards needs no more than that many descriptors per worker. Reads go through one reused
// buffer, the window: no allocation per record once it has grown to the largest record.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "datasets/shards/byte_source.hpp"
#include "os/posix.hpp"

namespace stoker::detail {

class CacheHold;
class RemoteSource;

// Remote shards (URLs) are read from their cache entries: a map-style read holds the whole
// entry while the file is open here (downloaded on first use, in parallel parts, once per
// machine); a stream reads it as it arrives, and read_ahead() holds the next shards of the
// stream's order so they download while this one is read.
class ShardFiles {
 public:
  // Throws std::invalid_argument for max_open == 0. `remote`: the dataset's source of remote
  // shards (it must outlive this; nullptr when none is remote).
  explicit ShardFiles(std::size_t max_open = 64, const RemoteSource* remote = nullptr);
  ShardFiles(const ShardFiles&) = delete;
  ShardFiles& operator=(const ShardFiles&) = delete;

  // Bytes [offset, offset + size) of shard `shard` (at `path`), valid until the next read().
  // A read that starts at, or a little past (16 KiB at most), where the previous one of the
  // same shard ended is sequential: the window then reads ahead (doubling up to 1 MiB), so
  // small records cost a system call per window, not per record; other reads read exactly
  // what they ask. Throws stoker::Error naming
  // `path` and the offset when the file cannot be opened or read, or ends early ("shorter than
  // its index says: it changed after it was indexed; delete <index> to rebuild it").
  std::span<const std::byte> read(std::size_t shard, const std::string& path, std::uint64_t offset,
                                  std::size_t size);
  // The descriptor of `path` (opened read-only and close-on-exec on first use; a URL's
  // complete cache entry, downloaded first when missing).
  int fd(std::size_t shard, const std::string& path);
  // Streaming: the shard as a byte stream from `offset` (open_stream_source; a remote one as it
  // arrives, its download first among this process's).
  std::unique_ptr<StreamSource> open_stream(std::size_t shard, const std::string& name,
                                            std::uint64_t offset, std::string_view who);
  // Streaming, remote shards: holds the shards `next` names (in the order they will be read)
  // as far as RemoteOptions::read_ahead_shards / read_ahead_bytes and the cache's room allow,
  // starting their downloads; lets go of earlier read-ahead holds not among them.
  void read_ahead(std::span<const std::pair<std::size_t, std::string>> next);
  // Streaming, remote shards, at the end of the stream's share: lets go of the read-ahead
  // holds and waits (at most timeouts.low_speed_time) for this process's downloads to be
  // published (ShardCache::settle).
  void settle_downloads();
  const RemoteSource* remote() const noexcept { return remote_; }

  std::size_t open_count() const noexcept { return open_.size(); }
  std::uint64_t read_calls() const noexcept { return read_calls_; }  // pread()s made

 private:
  struct Open {
    posix::Fd fd;
    std::shared_ptr<CacheHold> hold;  // a remote shard's entry (its descriptor is the hold's)
    std::list<std::size_t>::iterator lru;
  };
  std::size_t max_open_;
  const RemoteSource* remote_ = nullptr;
  std::vector<std::pair<std::size_t, std::shared_ptr<CacheHold>>> ahead_;  // read-ahead holds
  std::unordered_map<std::size_t, Open> open_;
  std::list<std::size_t> lru_;  // most recently used first
  std::vector<std::byte> window_;
  std::size_t window_shard_ = ~std::size_t{0};
  std::uint64_t window_begin_ = 0;
  std::size_t window_bytes_ = 0;  // valid bytes in window_
  std::uint64_t last_end_ = 0;    // where the previous read of window_shard_ ended
  std::size_t readahead_ = 0;     // current read-ahead, grows on sequential reads
  std::uint64_t read_calls_ = 0;
};

}  // namespace stoker::detail
