// MappedShards: the record formats' shard files mapped read-only, at most `capacity` at a time
// per process (the least recently used unmapped first), for map-style reads of tiny records: a
// record is a view into the mapping, with no system call per record (a pread per record would
// cap random reads at well under a million records per second). Mappings hold no descriptor,
// and a mapping made before fork() stays valid in the workers.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "os/mapped_file.hpp"

namespace stoker::detail {

class CacheHold;
class RemoteSource;

class MappedShards {
 public:
  // Throws std::invalid_argument for capacity 0. `remote`: the dataset's source of remote
  // shards (URLs), which must outlive this; nullptr when none is remote.
  explicit MappedShards(std::size_t capacity, const RemoteSource* remote = nullptr);

  // The mapping of shard `shard` (at `path`), mapped on first use; a URL's complete cache
  // entry (downloaded first when missing, held while it is mapped here). A mapping that shrank
  // stays (each read of it reports the shrink: the file changed after it was indexed). Installs
  // the SIGBUS guard in this process (MappedFile::guard), so the caller may touch the bytes.
  // Either process; any thread (a mutex guards the table). Throws stoker::Error naming `who` and
  // the path when the file cannot be opened or mapped, or is empty; RemoteError when it cannot
  // be downloaded.
  std::shared_ptr<const MappedFile> get(std::size_t shard, const std::string& path,
                                        const char* who) const;

 private:
  struct Entry {
    std::shared_ptr<const MappedFile> file;
    std::list<std::size_t>::iterator lru;
    std::shared_ptr<CacheHold> hold;  // a remote shard's cache entry
  };
  std::size_t capacity_;
  const RemoteSource* remote_ = nullptr;
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::size_t, Entry> open_;
  mutable std::list<std::size_t> lru_;          // most recently used first
  mutable std::size_t last_ = ~std::size_t{0};  // the shard of the previous get()
  mutable std::shared_ptr<const MappedFile> last_file_;
};

}  // namespace stoker::detail
