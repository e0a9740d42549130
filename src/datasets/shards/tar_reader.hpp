// The tar parser of WebDataset shards, stoker's own: ustar headers, pax extended headers
// ('x': path and size override the next member's; 'g' is skipped) and GNU long names
// ('L' / 'K' members, "././@LongLink"), octal and GNU base-256 numbers. Three layers, each
// checking every length against what it holds:
//   parse_tar_header / parse_pax_records: one 512-byte block, one pax payload (pure);
//   TarScanner: members of a byte stream, resynchronising past a damaged header (the next
//     512-byte block whose checksum is right) and reporting the damaged stretch;
//   TarSampleReader: consecutive members grouped into WebDataset samples by key.
// The index builder, the streaming cursor and the fuzz target all run these same functions,
// so a shard's samples are numbered alike however it is read.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/shards/byte_source.hpp"

namespace stoker::detail {

inline constexpr std::size_t kTarBlock = 512;
// Longest path stoker accepts from a pax record or a GNU long name, and largest pax payload.
inline constexpr std::size_t kTarMaxPath = 64 * 1024;
inline constexpr std::size_t kTarMaxExtended = 1024 * 1024;

enum class TarProblem : std::uint8_t {
  kNone,
  kBadChecksum,     // a header block whose checksum does not match its bytes
  kBadNumber,       // a size (or other number) field that is not octal or base-256
  kBadExtended,     // a pax header or GNU long name that is malformed or too large
  kTruncated,       // the stream ends inside a header or a member's data
  kDuplicateField,  // two members of one sample with the same field name
};
std::string_view tar_problem_name(TarProblem problem) noexcept;

// What one header block says, before pax and GNU long names are applied.
struct TarHeader {
  std::string name;  // prefix "/" name for POSIX ustar; name alone otherwise
  std::uint64_t size = 0;
  char type = '0';
  std::uint32_t stored_checksum = 0;
  std::uint32_t computed_checksum = 0;
};

enum class HeaderParse : std::uint8_t { kHeader, kZero, kBad };
// Parses one block. kZero: all zero (an end-of-archive marker); kBad: `problem` says why
// (kBadChecksum, with both checksums in `out`; kBadNumber).
HeaderParse parse_tar_header(std::span<const std::byte, kTarBlock> block, TarHeader& out,
                             TarProblem& problem);

// The "path" and "size" of a pax extended header's records ("<len> <key>=<value>\n"...).
// False when the records are malformed (a length that does not match, no '=', a bad size).
struct PaxOverrides {
  std::optional<std::string> path;
  std::optional<std::uint64_t> size;
};
bool parse_pax_records(std::span<const std::byte> payload, PaxOverrides& out);

// A member path's WebDataset parts: key = up to the first '.' after the last '/', field = the
// rest. False (not a sample member) when the file name part is empty, has no '.', or starts
// with '.' (hidden and AppleDouble "._x" files).
bool split_member_name(std::string_view path, std::string_view& key, std::string_view& field);

// A regular-file member of the stream (directories, links and devices are passed over).
struct TarMember {
  std::string path;
  std::uint64_t header_offset = 0;  // its first header block (a pax or long-name one included)
  std::uint64_t data_offset = 0;
  std::uint64_t size = 0;
};

// A damaged stretch: from `offset` (a header that could not be used) up to `resume`, where
// the scanner found the next good header (or the end of the stream).
struct TarDamage {
  TarProblem problem = TarProblem::kNone;
  std::uint64_t offset = 0;
  std::uint64_t resume = 0;
  std::string detail;      // "stored checksum 4321, computed 4318"
  bool in_member = false;  // the stream ended inside the data of the member just returned
  // The member name the damaged header still shows (when it is printable): which sample the
  // damage most likely belongs to. For a header cut short, as much of the name as was read:
  enum class Hint : std::uint8_t {
    kWhole,  // name_hint is the member's path (empty: nothing to go on)
    kStart,  // the stream ended inside the name: name_hint is how the path starts
    kEnd,    // the header's prefix field was not read: name_hint is how the path ends
  };
  std::string name_hint;
  Hint hint = Hint::kWhole;
};

// Whether the damaged header `d` may be a member of the sample whose key is `key`, or something
// the sample goes on after (a directory, README): false only when its name hint shows a sample
// member of another key, which starts a new sample. A header cut short before its name was
// read whole may be.
bool damage_may_belong(const TarDamage& d, std::string_view key);

class TarScanner {
 public:
  // Reads `in`, whose first byte is at archive offset `start` (a multiple of 512).
  TarScanner(StreamSource& in, std::uint64_t start);

  enum class Step : std::uint8_t { kMember, kDamage, kEnd };
  // The next regular member (its data not yet consumed: read_data() or let the next call skip
  // it), a damaged stretch (already passed), or the end (two zero blocks, or the stream's end
  // at a block boundary). Throws what the source throws.
  Step next(TarMember& member, TarDamage& damage);
  // Reads the next dst.size() bytes of the current member's data (in one call or several).
  // False when the stream ended first: then `damage` is the truncation, and the next call of
  // next() returns kEnd.
  bool read_data(std::span<std::byte> dst, TarDamage& damage);
  std::uint64_t position() const noexcept { return pos_; }

 private:
  // A whole block into `block`; the bytes read (< 512 only at the stream's end).
  std::size_t read_block(std::array<std::byte, kTarBlock>& block);
  // Reads `dst` whole; false at the stream's end first.
  bool read_exact(std::span<std::byte> dst);
  bool skip_to(std::uint64_t offset);
  // After a header that cannot be used at `offset`: the damage up to the next good header.
  Step resync(TarProblem problem, std::uint64_t offset, std::string detail, TarDamage& damage);
  Step truncated(std::uint64_t offset, std::string detail, bool in_member, TarDamage& damage);

  StreamSource& in_;
  std::uint64_t pos_;
  std::uint64_t data_end_ = 0;        // the current member's padded end: where the next header is
  std::uint64_t current_header_ = 0;  // the current member's first header
  bool data_pending_ = false;
  bool ended_ = false;
  // A header block found by resync(), handed to the next call of next() as if read again.
  std::array<std::byte, kTarBlock> pushed_{};
  bool has_pushed_ = false;
  std::string hint_;  // the name in the last damaged header, for TarDamage::name_hint
};

// One WebDataset sample: members sharing a key, or a damaged stretch (damage set).
struct TarSample {
  struct Member {
    std::string field;
    std::uint64_t data_offset = 0;
    std::uint64_t size = 0;
    std::size_t stored_at = 0;  // where its bytes start in `storage`, when they were read
    bool stored = false;
  };
  std::string key;
  std::uint64_t offset = 0;  // the first header of its first member (or of the damage)
  std::vector<Member> members;
  std::optional<TarDamage> damage;  // a bad record: why, and where
  std::vector<std::byte> storage;

  void clear() noexcept;
};

// Groups a scanner's members into samples. A damaged stretch makes the sample it belongs to a
// bad record: the sample before it when the members after it continue that sample or its
// header's name (name_hint) has that sample's key, the sample after it when the name has that
// one's key; otherwise it is a bad record of its own. A header cut short by the end of the
// stream is the last sample's unless what was read of its name shows another key
// (damage_may_belong). Unselected fields' bytes are skipped. With `lowercase_fields`, field
// names are lower-cased (ASCII) as WebDataset does by default, so "a.JPG" is field "jpg" (and
// "a.jpg" with "a.JPG" is one field twice).
class TarSampleReader {
 public:
  // `wants(field)`: whether to read that field's bytes; null: read none (indexing).
  using WantsFn = bool (*)(const void* context, std::string_view field);
  TarSampleReader(StreamSource& in, std::uint64_t start, WantsFn wants, const void* context,
                  bool lowercase_fields = false);

  // The next sample into `out` (cleared first); false at the end. With read_bytes false no
  // field's bytes are read (skipping samples, indexing).
  bool next(TarSample& out, bool read_bytes = true);
  std::uint64_t position() const noexcept { return scanner_.position(); }
  // True once the stream has ended without a single byte: a 0-byte shard, which tar refuses.
  bool empty_stream() const noexcept { return ended_ && scanner_.position() == 0; }

 private:
  void take_member(TarSample& out, bool read_bytes);  // adds *pending_ to out
  // After damage `d`: the next step, with further damaged stretches merged into `d`.
  TarScanner::Step after_damage(TarMember& member, TarDamage& d);
  TarScanner scanner_;
  WantsFn wants_;
  const void* context_;
  // Lookahead: a member whose header was read but which belongs to the next sample.
  std::optional<TarMember> pending_;
  std::optional<TarDamage> pending_damage_;  // a bad record of its own, returned next
  std::optional<TarDamage> attach_next_;     // makes the sample starting at pending_ bad
  bool ended_ = false;
  bool lowercase_;
};

// ASCII lower-case (WebDataset's suffix.lower() for the names tar shards use).
std::string lowercase_ascii(std::string_view s);
bool has_uppercase_ascii(std::string_view s) noexcept;

}  // namespace stoker::detail
