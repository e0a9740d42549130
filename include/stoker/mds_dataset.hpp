// MdsDataset: MosaicML Streaming's MDS directories (index.json version 2 and its shards), read
// without Python: each column decoded by its MDS encoding into a Sample's named tensor (numbers
// and ndarrays typed, jpeg/png through ShardOptions::decoders, bytes/str/json as uint8 [n]),
// shards compressed with zstd, gz, bz2 or br, hashes checked. Map-style over the shards' offset
// tables, or streaming (stream()), which also reads compressed shards. Also: MdsError.
#pragma once

#include <string>
#include <utility>

#include "stoker/errors.hpp"
#include "stoker/shards.hpp"

namespace stoker {

// An MDS directory that cannot be read: a malformed index.json, a missing shard, a hash
// mismatch, an encoding stoker does not read (pickle is refused), a damaged sample. what()
// names index.json or the shard, the sample when there is one, and what to do.
// path() is index.json or the shard file the error is about; offset() the sample's byte offset
// in the shard when the error is about one sample, else 0.
class MdsError : public ShardError {
 public:
  MdsError(std::string message, std::string path, std::uint64_t offset = 0)
      : ShardError(std::move(message), std::move(path), offset) {}
};

// ShardOptions (the columns to keep, by name; their decoders; where verification results are
// cached) and MDS's own.
struct MdsOptions : ShardOptions {
  // Check each shard file against a hash index.json lists for it, the fastest this build can
  // compute (xxh3/xxh64 with libxxhash; blake2, sha1, md5, sha2, sha3 with OpenSSL): map-style
  // reads every raw shard once in the main process at construction, and records the result in
  // the shard's index file (ShardOptions::write_index), so later runs do not read it again;
  // streaming checks each shard it reads (the compressed file, when it reads that). Hashes
  // this build cannot compute are not checked.
  bool verify_hashes = true;
};

class MdsDataset : public ShardedDataset {
 public:
  // Both spellings: ds.stream(stream_options) streams this dataset's shards (ShardedDataset's),
  // and the static MdsDataset::stream(directory, ...) below makes one from a directory.
  using ShardedDataset::stream;

  // Main process: reads `directory`/index.json and checks each shard's raw file (its size,
  // sample count and, with verify_hashes, its hash). Throws MdsError naming the file for a
  // malformed index, a missing or wrong-sized shard, a hash mismatch, or a pkl column the
  // Sample needs; std::invalid_argument when a shard exists only compressed (map-style reads
  // raw shards: stream() it, or decompress it beside itself, e.g. `zstd -d shard.00000.mds.zstd`).
  explicit MdsDataset(const std::string& directory, MdsOptions options = {});

  // Main process: a stream over the directory's shards, raw or compressed (a shard whose raw
  // file is there is read raw). Throws MdsError as the constructor, except that a hash is
  // checked when a shard is read: a mismatch then makes every record of that shard an error
  // (which OnSampleError::kSkip skips and counts).
  static ShardedStream stream(const std::string& directory, StreamOptions stream_options = {},
                              MdsOptions options = {});
};

}  // namespace stoker
