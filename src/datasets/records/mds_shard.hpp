// MDS shards, the pure part. A raw shard is
//   u32 num_samples | u32 offsets[num_samples + 1] | the writer's JSON config | samples
// (little-endian; offsets are absolute byte positions, sample k is [offsets[k], offsets[k+1])).
// A sample is a u32 size for each variable-size column, in column order, then every column's
// bytes in column order. Functions: checking the offsets, cutting a sample into its columns,
// decoding a column into a tensor, and the shard's hashes. Every length is checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/records/mds_index.hpp"
#include "stoker/tensor.hpp"

namespace stoker::detail {

// What a message is about ("MdsDataset: <shard>: record 5 at byte 80 column 'x'"): a text, or
// a function that makes it, called only when there is an error to report (the common path
// formats nothing).
class MdsWhere {
 public:
  MdsWhere(std::string_view text) noexcept : text_(text) {}  // NOLINT: implicit on purpose
  MdsWhere(const char* text) noexcept : text_(text) {}       // NOLINT
  MdsWhere(std::string (*make)(const void*), const void* context) noexcept
      : make_(make), context_(context) {}
  std::string str() const { return make_ != nullptr ? make_(context_) : std::string(text_); }

 private:
  std::string_view text_;
  std::string (*make_)(const void*) = nullptr;
  const void* context_ = nullptr;
};

// Checks a whole raw shard in memory against its index entry: its size, the sample count, and
// that the offsets rise from past the header to the end of the file. Throws MdsError whose
// message starts with `where` ("MdsDataset: <shard>") and names `path`.
void check_mds_shard(std::span<const std::byte> shard, const MdsShardInfo& info,
                     const MdsWhere& where, std::string_view path);

struct MdsSampleRange {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};
// Sample k's byte range from the 8 bytes at 4 + 4k of the shard (offsets[k], offsets[k+1]),
// checked against the shard's size and sample count. Throws MdsError as check_mds_shard.
MdsSampleRange mds_sample_range(std::span<const std::byte> offset_pair, std::uint64_t k,
                                const MdsShardInfo& info, const MdsWhere& where,
                                std::string_view path);

// One column's bytes within a sample.
struct MdsCell {
  std::size_t offset = 0;
  std::size_t size = 0;
};
// Cuts `sample` into its columns (out is resized to the column count). The sizes must add up
// to the sample exactly. Throws MdsError starting with `where` (the record) otherwise.
void split_mds_sample(std::span<const std::byte> sample, const std::vector<MdsColumn>& columns,
                      std::vector<MdsCell>& out, const MdsWhere& where, std::string_view path);

// The tensor of a column value of a typed encoding: int/str_int -> int64 scalar, the numeric
// scalars -> a scalar of their dtype, str_float/str_decimal -> float64 scalar, ndarray -> its
// dtype and shape, pil -> uint8 [H, W, C]; the byte-like encodings (bytes, str, json, jpeg,
// png) -> uint8 [n]. Throws MdsError naming `where` for bytes that do not fit the encoding,
// and for pkl.
Tensor decode_mds_value(const MdsEncoding& encoding, std::span<const std::byte> bytes,
                        const MdsWhere& where, std::string_view path);

// Hashes. The algorithms of Python's hashlib and xxhash that MDSWriter may list, as far as this
// build can compute them (OpenSSL's libcrypto, libxxhash; both optional).
bool mds_hash_available(std::string_view algorithm) noexcept;
// The lower-case hex digest Python's hexdigest() gives, or nullopt when not available here.
std::optional<std::string> mds_hash(std::string_view algorithm, std::span<const std::byte> data);
// Of the hashes a file lists, the one to check: the fastest this build has (xxh3 first, then
// the other xxhashes, blake2, sha1, md5, sha2, sha3); nullptr when it has none of them.
const std::pair<std::string, std::string>* pick_mds_hash(const MdsFileInfo& file) noexcept;

}  // namespace stoker::detail
