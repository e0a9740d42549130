// The index of one WebDataset tar shard: each sample's first header offset and its members'
// data offsets, sizes and field names, and the damaged stretches (bad records). Built by one
// pass of TarSampleReader over the shard's headers (data is skipped, not read), cached as
// "<shard>.idx" (index_cache.hpp), and held in memory as a few flat arrays (~24 bytes per
// sample + 24 per member), which forked workers share with the main process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/shards/byte_source.hpp"
#include "datasets/shards/tar_reader.hpp"

namespace stoker::detail {

inline constexpr std::string_view kTarIndexMagic = "stkwds\0i";
// 2: a header cut short belongs to the sample it cut (damage_may_belong), and the payload
// says whether field names were lower-cased.
inline constexpr std::uint32_t kTarIndexVersion = 2;

struct TarIndex {
  struct Record {
    std::uint64_t offset = 0;  // its first header (or where the damage starts)
    std::uint32_t first_member = 0;
    std::uint32_t members = 0;  // 0 for a damaged record
    std::uint32_t damage = 0;   // 0: readable; otherwise 1 + its index in damages
  };
  struct Member {
    std::uint64_t data_offset = 0;
    std::uint64_t size = 0;
    std::uint32_t field = 0;  // index in fields
  };
  bool lowercase_fields = false;    // the field names were lower-cased (TarSampleReader)
  std::vector<std::string> fields;  // the distinct field names
  std::vector<Record> records;
  std::vector<Member> members;
  std::vector<TarDamage> damages;

  // The bytes from the first member's data to the end of the last one's: what one read takes.
  std::uint64_t span_begin(const Record& r) const noexcept {
    return members[r.first_member].data_offset;
  }
  std::uint64_t span_end(const Record& r) const noexcept {
    const Member& last = members[r.first_member + r.members - 1];
    return last.data_offset + last.size;
  }
  // Whether it holds what an index built with `lowercase` would: one built either way with no
  // upper-case field name serves both.
  bool fits(bool lowercase) const noexcept;
};

// Indexes the tar stream `in` (starting at its byte 0), lower-casing field names when told.
// `bytes_read`, when given, receives the stream's length in bytes (0: an empty shard). Throws
// what the source throws.
TarIndex build_tar_index(StreamSource& in, bool lowercase_fields = false,
                         std::uint64_t* bytes_read = nullptr);
// A sample-by-sample builder for writers that know their offsets (WebDatasetWriter).
class TarIndexBuilder {
 public:
  void add(const TarSample& sample);
  TarIndex take() noexcept { return std::move(index_); }

 private:
  std::uint32_t intern(const std::string& field);
  TarIndex index_;
};

std::vector<std::byte> serialize_tar_index(const TarIndex& index);
// The index in `payload`, or nullopt when it is malformed or points outside a shard of
// `shard_size` bytes. Never reads outside `payload`; allocates only what it has checked.
std::optional<TarIndex> parse_tar_index(std::span<const std::byte> payload,
                                        std::uint64_t shard_size);

}  // namespace stoker::detail
