// Naming and fetching remote shards: list_shards() turns a pattern (brace ranges, an S3 prefix,
// a glob in the last path segment) into URLs, and fetch_to_cache() gives the local copy of one
// remote file in the node-wide cache. The datasets take URLs directly (ShardOptions::remote);
// these are for the names, and for files a dataset does not read itself (docs/remote.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "stoker/remote.hpp"

namespace stoker {

// Each brace group of `pattern` is expanded first (expand_shards: "train-{000..127}.tar"); then
// each name that is an s3:// URL ending in '/' is replaced by every object under that prefix,
// and one whose last path segment holds '*' or '?' by the objects under its directory that
// match it (ListObjectsV2, every page; objects ending in ".idx" are left out), each list in key
// order. Other names (local paths, http(s):// and file:// URLs) are returned as expanded.
// Main process; blocks on the listings. Throws std::invalid_argument for a bad pattern, or a
// listing of an http(s) URL (HTTP has no listing); RemoteError when a listing fails.
std::vector<std::string> list_shards(std::string_view pattern, const RemoteOptions& options = {});

// The local file a name is read from: a local path or file:// URL as it is, a remote URL's
// complete copy in the cache (downloaded first when missing; RemoteOptions::cache_dir). The copy
// may be evicted once another download needs the room: read it at once. Either process; blocks.
// Throws RemoteError, or stoker::Error for the cache directory.
std::string fetch_to_cache(const std::string& name, const RemoteOptions& options = {});

}  // namespace stoker
