// A remote shard as a byte stream for the formats' cursors: it reads the shard's cache entry
// front to back from a hold, waiting only for the bytes it is about to read, so a streaming
// reader yields its first samples while the rest of the shard still arrives.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "datasets/remote/shard_cache.hpp"
#include "datasets/shards/byte_source.hpp"

namespace stoker::detail {

// Reads `hold`'s bytes from `offset`. Throws (from read()) what the download throws.
std::unique_ptr<StreamSource> remote_stream(std::shared_ptr<CacheHold> hold, std::uint64_t offset,
                                            std::string_view who);

}  // namespace stoker::detail
