// list_shards() and fetch_to_cache() (include/stoker/remote_shards.hpp).
#include "stoker/remote_shards.hpp"

#include <fnmatch.h>

#include <fmt/format.h>

#include "datasets/remote/shard_cache.hpp"
#include "os/net/url.hpp"
#include "stoker/shards.hpp"

namespace stoker {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

std::vector<std::string> list_shards(std::string_view pattern, const RemoteOptions& options) {
  std::vector<std::string> out;
  std::unique_ptr<detail::net::ObjectStore> store;
  for (const std::string& name : expand_shards(pattern)) {
    const detail::net::Url url = detail::net::parse_url(name);
    const std::string_view key = url.key();
    const std::size_t last_slash = key.rfind('/');
    const std::string_view leaf =
        last_slash == std::string_view::npos ? key : key.substr(last_slash + 1);
    const bool prefix =
        url.scheme == detail::net::Scheme::kS3 && (key.empty() || key.back() == '/');
    const bool glob = leaf.find_first_of("*?") != std::string_view::npos;
    if (!prefix && !glob) {
      out.push_back(name);
      continue;
    }
    if (url.scheme != detail::net::Scheme::kS3) {
      throw std::invalid_argument(fmt::format(
          "list_shards: '{}' cannot be listed: only s3:// prefixes can (HTTP has no listing); "
          "name the shards with a brace range instead (train-{{000..099}}.tar)",
          name));
    }
    if (store == nullptr) store = std::make_unique<detail::net::ObjectStore>(options);
    const std::string directory = fmt::format(
        "s3://{}/{}", url.host,
        last_slash == std::string_view::npos ? std::string_view{} : key.substr(0, last_slash + 1));
    const std::string leaf_pattern(leaf);
    for (const auto& [object, size] : store->list(prefix ? name : directory)) {
      if (ends_with(object, ".idx")) continue;  // index files beside the shards
      if (glob) {
        const std::string object_leaf = object.substr(object.rfind('/') + 1);
        if (::fnmatch(leaf_pattern.c_str(), object_leaf.c_str(), 0) != 0) continue;
        if (object.size() - object_leaf.size() != directory.size()) continue;  // deeper down
      }
      out.push_back(object);
    }
  }
  return out;
}

std::string fetch_to_cache(const std::string& name, const RemoteOptions& options) {
  const detail::net::Url url = detail::net::parse_url(name);
  if (!url.remote()) return url.path;
  detail::RemoteFile file;
  file.url = name;
  auto hold = detail::ShardCache::process(options)->acquire(file, detail::Need::kNow, nullptr);
  hold->wait_for(hold->size());
  return hold->path();
}

}  // namespace stoker
