// Sequential byte sources for streaming shards: a plain file from an offset, the output of a
// "pipe:<command>" shard (run with /bin/sh -c), and any of those decompressed: .gz / .tgz by
// zlib's inflate (inflate_source, records/compression.hpp: the one gzip decoder of stoker), the
// others (.zst, .xz, .bz2, .lz4, detected from the bytes) through libarchive. Used by the
// formats' cursors; a format parses the decompressed bytes itself (libarchive is only the
// decompressor). Every read, open and spawn goes through os/posix (failable in tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace stoker::detail {

class StreamSource {
 public:
  virtual ~StreamSource() = default;
  // Up to dst.size() bytes; 0 only at the end. Blocks (a pipe waits for its writer). Throws
  // stoker::Error naming the shard for a read error or corrupt compressed data.
  virtual std::size_t read(std::span<std::byte> dst) = 0;
  // Skips n bytes (seeks when it can); returns how many were skipped (fewer only at the end).
  virtual std::uint64_t skip(std::uint64_t n);
};

// The bytes of `data` (which the caller keeps alive): tests and the fuzz target.
std::unique_ptr<StreamSource> memory_source(std::span<const std::byte> data);

// True for "pipe:<command>" shard names.
bool is_pipe_shard(std::string_view name) noexcept;
// True when the name ends in a compression suffix libarchive is asked to undo
// (.gz .tgz .zst .tzst .xz .txz .bz2 .lz4).
bool is_compressed_shard(std::string_view name) noexcept;
// Whether this build has libarchive (compressed shards other than gzip need it; plain files,
// gzip and pipes not).
bool have_libarchive() noexcept;

class RemoteSource;
class CacheHold;

// The shard `name` as a byte stream: a file from byte `offset` (plain files only), a pipe's
// output, a remote URL's cache entry as it arrives (through `remote`, the dataset's
// RemoteSource, or `held`, a hold of it taken already), decompressed when
// is_compressed_shard(). `who` starts messages. Throws stoker::Error naming the shard when it
// cannot be opened, or needs libarchive and this build has none; RemoteError from a download.
std::unique_ptr<StreamSource> open_stream_source(const std::string& name, std::uint64_t offset,
                                                 std::string_view who,
                                                 const RemoteSource* remote = nullptr,
                                                 std::shared_ptr<CacheHold> held = nullptr);

}  // namespace stoker::detail
