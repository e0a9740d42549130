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

class MappedShards {
 public:
  // Throws std::invalid_argument for capacity 0.
  explicit MappedShards(std::size_t capacity);

  // The mapping of shard `shard` (at `path`), mapped on first use. A mapping that shrank stays
  // (each read of it reports the shrink: the file changed after it was indexed). Installs the
  // SIGBUS guard in this process (MappedFile::guard), so the caller may touch the bytes. Either
  // process; any thread (a mutex guards the table). Throws stoker::Error naming `who` and the
  // path when the file cannot be opened or mapped, or is empty.
  std::shared_ptr<const MappedFile> get(std::size_t shard, const std::string& path,
                                        const char* who) const;

 private:
  struct Entry {
    std::shared_ptr<const MappedFile> file;
    std::list<std::size_t>::iterator lru;
  };
  std::size_t capacity_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::size_t, Entry> open_;
  mutable std::list<std::size_t> lru_;          // most recently used first
  mutable std::size_t last_ = ~std::size_t{0};  // the shard of the previous get()
  mutable std::shared_ptr<const MappedFile> last_file_;
};

}  // namespace stoker::detail
