// MdsDataset: MosaicML Streaming's MDS directories (index.json version 2 and its shards), read
// without Python: columns decoded by their MDS encoding into a Sample's named tensors, images
// through the field decoders, shards compressed with zstd, gz, bz2 or br, hashes checked.
// Map-style over the shards' offset tables, or streaming. Also: MdsError.
#pragma once

#include <string>

#include "stoker/errors.hpp"

namespace stoker {

// An MDS directory that cannot be read: a malformed index.json, a missing shard, a hash
// mismatch, an encoding stoker does not read (pickle is refused), a corrupt sample. what()
// names index.json or the shard, the sample when there is one, and what to do.
class MdsError : public Error {
 public:
  MdsError(std::string message, std::string path)
      : Error(std::move(message)), path_(std::move(path)) {}
  // index.json or the shard file the error is about.
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

}  // namespace stoker
