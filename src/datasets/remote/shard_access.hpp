// ShardAccess: how a format reaches a shard while it indexes it in the main process, the same
// calls for a local path and a remote URL: the shard's size (stat), its cached index (load /
// save) and its bytes as a stream. A remote shard's index is looked for in the cache (beside
// the entry, where one built here is saved) and then on the server, at the URL with the index
// file's suffix ("<url>.idx", as stoker-shard --output uploads it), before the shard itself is
// downloaded to be indexed.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/remote/remote_source.hpp"
#include "datasets/shards/byte_source.hpp"
#include "datasets/shards/index_cache.hpp"
#include "stoker/shards.hpp"

namespace stoker::detail {

class ShardAccess {
 public:
  // Main process. `remote` is the dataset's source (nullptr when no shard is remote); it
  // learns the sizes of the remote `names` (HEADs, several at once) with prefetch_indexes()'s
  // HEADs, or else when the first of them is stat()ed or opened.
  ShardAccess(std::shared_ptr<RemoteSource> remote, const ShardOptions& options,
              const std::vector<std::string>& names);

  // The dataset's source, with the size of every remote shard learned: HEADs now for any not
  // yet stat()ed, opened or prefetched with its index (a stream of compressed shards with
  // sample_counts), so a missing shard fails here and the workers inherit the sizes.
  const std::shared_ptr<RemoteSource>& remote() const {
    if (remote_ != nullptr) learn_sizes();
    return remote_;
  }
  // A local file's stat_shard(); a remote one's size (its mtime is 0: the size, and the index's
  // own check, vouch for it). Throws as stat_shard, or RemoteError.
  ShardStat stat(const std::string& name, std::string_view who) const;
  // Main process: starts fetching the index files on the server ("<url><suffix>.idx") of the
  // remote `names` that have no index in the cache, all at once, for load_index() to take:
  // one round of HEADs (the shards' own among them) and one of GETs for every shard, where
  // load_index() alone takes two round trips a shard, one shard after another. Throws
  // RemoteError as a HEAD fails (a shard's first; a 404 for an index means the server has
  // none).
  void prefetch_indexes(const std::vector<std::string>& names, std::string_view suffix);
  // The payload of a valid index for `name` + `suffix` (index_path(name + suffix) locally).
  std::optional<std::vector<std::byte>> load_index(const std::string& name, std::string_view suffix,
                                                   std::string_view magic, std::uint32_t version,
                                                   const ShardStat& stat) const;
  // Saves it where load_index() looks first (unless ShardOptions::write_index is false).
  void save_index(const std::string& name, std::string_view suffix, std::string_view magic,
                  std::uint32_t version, const ShardStat& stat,
                  std::span<const std::byte> payload) const;
  // open_stream_source() with the dataset's remote source.
  std::unique_ptr<StreamSource> open(const std::string& name, std::uint64_t offset,
                                     std::string_view who) const;

 private:
  std::string local_index_path(const std::string& name, std::string_view suffix) const;
  // HEADs of the remote shards whose sizes are not known yet (RemoteSource::stat_all).
  void learn_sizes() const;

  std::shared_ptr<RemoteSource> remote_;
  std::string index_dir_;
  bool write_index_ = true;
  mutable std::vector<std::string> unstated_;  // remote shards not HEADed yet
  // prefetch_indexes(): by index URL, the download started, or nullptr where the server has
  // none; load_index() takes each out.
  mutable std::map<std::string, std::shared_ptr<CacheHold>> prefetched_;
};

}  // namespace stoker::detail
