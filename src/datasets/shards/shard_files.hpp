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
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "os/posix.hpp"

namespace stoker::detail {

class ShardFiles {
 public:
  // Throws std::invalid_argument for max_open == 0.
  explicit ShardFiles(std::size_t max_open = 64);
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
  // The descriptor of `path` (opened read-only and close-on-exec on first use).
  int fd(std::size_t shard, const std::string& path);

  std::size_t open_count() const noexcept { return open_.size(); }
  std::uint64_t read_calls() const noexcept { return read_calls_; }  // pread()s made

 private:
  struct Open {
    posix::Fd fd;
    std::list<std::size_t>::iterator lru;
  };
  std::size_t max_open_;
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
