// RemoteSource: what a sharded dataset knows of its remote files, shared by its copies in every
// process: the RemoteOptions, RemoteStats's counters (in a shared region made in the main
// process, so the workers' downloads are counted where stats() reads them), and each remote
// file's size and ETag, learned in the main process (a listing, an index, a HEAD) before any
// worker forks. Readers take their holds of the node-wide cache through it; the cache itself
// (ShardCache) is per process. Formats never see HTTP: they ask for a hold, or a byte stream,
// and read local files.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "datasets/remote/shard_cache.hpp"
#include "ipc/shared_region.hpp"
#include "stoker/remote.hpp"

namespace stoker::detail {

class RemoteSource {
 public:
  // Main process. Throws std::invalid_argument for bad options (RemoteOptions::validate).
  explicit RemoteSource(RemoteOptions options);
  // A source when any of `names` is a remote URL, else nullptr.
  static std::shared_ptr<RemoteSource> for_names(const std::vector<std::string>& names,
                                                 const RemoteOptions& options);

  const RemoteOptions& options() const noexcept { return options_; }

  // Main process, before forking: what is known of a file.
  void learn(const std::string& url, std::uint64_t size, std::string etag = {});
  // Main process: HEADs of every URL among `urls` whose size is not known, several at once.
  // Throws RemoteError (the first that failed).
  void stat_all(const std::vector<std::string>& urls);
  std::optional<std::uint64_t> size_of(const std::string& url) const;
  // Main process: whether each URL exists (HEAD; 404 is false), learning the sizes of those
  // that do. Throws RemoteError for other failures.
  std::vector<bool> exists_all(const std::vector<std::string>& urls);
  // stat_all(`must`) and exists_all(`maybe`) in one round of HEADs; throws the first failure
  // of `must` before any of `maybe`'s.
  std::vector<bool> stat_and_probe(const std::vector<std::string>& must,
                                   const std::vector<std::string>& maybe);
  // Main process, before forking: the check every complete download of `url` passes before it
  // is kept (MDS: the sample count and the index's hash); `token` names it (a new token checks
  // a cached copy again).
  void set_verify(const std::string& url, std::function<void(int, std::uint64_t)> verify,
                  std::string token);

  // A hold of the file's cache entry (ShardCache::acquire; kAhead may give nullptr), checked by
  // its set_verify() check when it is downloaded; `from`: the first byte a kNow reader reads.
  // Either process.
  std::shared_ptr<CacheHold> acquire(const std::string& url, Need need,
                                     const std::function<void()>& release_others = {},
                                     std::uint64_t from = 0) const;
  // The complete local copy (downloaded first when missing). Blocks.
  std::shared_ptr<CacheHold> acquire_complete(const std::string& url) const;
  // A small file read whole through the cache (index.json, index files); nullopt when the
  // server has none (404). Throws RemoteError for other failures, stoker::Error when it is
  // larger than `max_bytes`. `started`: a hold acquire() gave for `url` before (its download
  // may still be running), read once complete instead of acquiring the file again.
  std::optional<std::string> read_small(const std::string& url, std::uint64_t max_bytes,
                                        std::shared_ptr<CacheHold> started = nullptr) const;
  // Where the cache keeps (or would keep) the file; an index built for it goes beside it.
  std::string entry_path(const std::string& url) const;

  RemoteStats stats() const noexcept;
  RemoteCounters* counters() const noexcept { return counters_; }
  // Memory one reading process uses for downloads: parts_in_flight receive buffers (curl's
  // 256 KiB each) and their connections' TLS and socket state (about as much again).
  std::size_t download_buffer_bytes() const noexcept;

 private:
  struct Known {
    std::optional<std::uint64_t> size;
    std::string etag;
    std::function<void(int, std::uint64_t)> verify;
    std::string verify_token;
  };
  // HEADs of `urls`, kHeadsAtOnce at a time; each answer, or its exception.
  std::vector<std::pair<std::optional<net::ObjectInfo>, std::exception_ptr>> head_all(
      const std::vector<std::string>& urls);
  RemoteOptions options_;
  std::shared_ptr<SharedRegion> region_;
  RemoteCounters* counters_ = nullptr;
  std::map<std::string, Known> known_;
};

}  // namespace stoker::detail
