// Index files: a format's index of one shard, cached in a file beside it ("<shard>.idx") or in a
// chosen directory, so a shard is indexed once, not at every start. The file is
//   magic (8 bytes, the format's) | version u32 | 0 u32 | shard size u64 | shard mtime ns i64 |
//   payload bytes u64 | payload checksum u64 (FNV-1a) | payload
// little-endian; the payload is the format's own (IndexWriter / IndexReader). A file whose
// magic, version, shard size, mtime or checksum differ is stale or corrupt: it is rebuilt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stoker::detail {

struct ShardStat {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  bool regular = false;  // a regular file (not a FIFO, device or pipe)
};
// Throws stoker::Error naming `who` and `path` when it cannot be stat()ed.
ShardStat stat_shard(const std::string& path, std::string_view who);

// "<index_dir>/<shard's file name>.idx", or "<shard>.idx" for an empty index_dir.
std::string index_path(const std::string& shard, const std::string& index_dir);

// The payload of a valid cached index for `shard`, or nullopt (missing, stale, corrupt).
std::optional<std::vector<std::byte>> load_index(const std::string& index_file,
                                                 std::string_view magic, std::uint32_t version,
                                                 const ShardStat& shard);
// Writes atomically (a temporary file renamed over); false when it cannot (a read-only
// directory): the caller keeps its index in memory. Never throws for I/O errors.
bool save_index(const std::string& index_file, std::string_view magic, std::uint32_t version,
                const ShardStat& shard, std::span<const std::byte> payload);

// The whole file as load_index() checks it, for tests, tools and writers that know the index.
std::vector<std::byte> frame_index(std::string_view magic, std::uint32_t version,
                                   const ShardStat& shard, std::span<const std::byte> payload);
// The payload of `file`'s bytes, or nullopt when any check fails. Never reads outside `file`.
std::optional<std::span<const std::byte>> unframe_index(std::span<const std::byte> file,
                                                        std::string_view magic,
                                                        std::uint32_t version,
                                                        const ShardStat& shard) noexcept;

// Little-endian payload building.
class IndexWriter {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<std::byte>(v)); }
  void u32(std::uint32_t v);
  void u64(std::uint64_t v);
  void bytes(std::span<const std::byte> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void string(std::string_view s);  // u32 length + bytes
  const std::vector<std::byte>& data() const noexcept { return out_; }
  std::vector<std::byte> take() noexcept { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

// Bounds-checked payload reading: each getter returns false (and reads nothing) when fewer
// bytes remain than it needs; ok() stays false after any failure.
class IndexReader {
 public:
  explicit IndexReader(std::span<const std::byte> data) noexcept : data_(data) {}
  bool u8(std::uint8_t& v) noexcept;
  bool u32(std::uint32_t& v) noexcept;
  bool u64(std::uint64_t& v) noexcept;
  bool string(std::string& s, std::size_t max_length);
  std::size_t remaining() const noexcept { return data_.size() - pos_; }
  bool ok() const noexcept { return ok_; }

 private:
  bool take(std::size_t n, const std::byte*& at) noexcept;
  std::span<const std::byte> data_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

std::uint64_t fnv1a64(std::span<const std::byte> bytes) noexcept;

}  // namespace stoker::detail
