#include "datasets/shards/tar_reader.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace stoker::detail {
namespace {

// Field positions of a ustar header block (POSIX.1-1988 and its GNU variant).
constexpr std::size_t kNameAt = 0, kNameLen = 100;
constexpr std::size_t kSizeAt = 124, kSizeLen = 12;
constexpr std::size_t kChecksumAt = 148, kChecksumLen = 8;
constexpr std::size_t kTypeAt = 156;
constexpr std::size_t kMagicAt = 257;
constexpr std::size_t kPrefixAt = 345, kPrefixLen = 155;

std::uint8_t byte_at(std::span<const std::byte> b, std::size_t i) {
  return std::to_integer<std::uint8_t>(b[i]);
}

// A NUL-terminated text field (no terminator when it fills the field).
std::string_view text_field(std::span<const std::byte, kTarBlock> block, std::size_t at,
                            std::size_t len) {
  const char* p = reinterpret_cast<const char*>(block.data() + at);
  std::size_t n = 0;
  while (n < len && p[n] != '\0') ++n;
  return {p, n};
}

// An octal field (leading spaces or zeros, ended by NUL or space; empty is 0) or GNU base-256
// (first byte 0x80, the rest big-endian). False for anything else, or a negative value.
bool parse_number(std::span<const std::byte> field, std::uint64_t& out) {
  if (field.empty()) return false;
  const std::uint8_t first = byte_at(field, 0);
  if (first & 0x80) {
    if (first != 0x80) return false;  // 0xff: negative base-256
    std::uint64_t v = 0;
    for (std::size_t i = 1; i < field.size(); ++i) {
      if (v >> 56) return false;  // would overflow 64 bits
      v = (v << 8) | byte_at(field, i);
    }
    out = v;
    return true;
  }
  std::size_t i = 0;
  while (i < field.size() && byte_at(field, i) == ' ') ++i;
  std::uint64_t v = 0;
  std::size_t digits = 0;
  for (; i < field.size(); ++i) {
    const std::uint8_t c = byte_at(field, i);
    if (c == '\0' || c == ' ') break;
    if (c < '0' || c > '7') return false;
    if (v >> 61) return false;
    v = v * 8 + (c - '0');
    ++digits;
  }
  for (; i < field.size(); ++i) {  // only terminators may follow
    const std::uint8_t c = byte_at(field, i);
    if (c != '\0' && c != ' ') return false;
  }
  out = digits == 0 ? 0 : v;
  return true;
}

bool all_zero(std::span<const std::byte, kTarBlock> block) {
  return std::all_of(block.begin(), block.end(), [](std::byte b) { return b == std::byte{0}; });
}

// As much of a member's path as the first `cut.size()` bytes of its header show (the name
// field, and the POSIX prefix field when it was read), into damage.name_hint and .hint; nothing
// when the type field was read and says the block is not a sample member's (a directory, a
// link, an extended header: what comes after it is unknown).
void cut_name(std::span<const std::byte> cut, TarDamage& damage) {
  if (cut.size() > kTypeAt) {
    const auto type = static_cast<char>(byte_at(cut, kTypeAt));
    if (type != '0' && type != '\0' && type != '7') return;
  }
  const auto text = [&](std::size_t at, std::size_t len, bool& whole) {
    const std::size_t have = cut.size() > at ? std::min(len, cut.size() - at) : 0;
    const char* p = reinterpret_cast<const char*>(cut.data() + at);
    const std::size_t n = strnlen(p, have);
    whole = n < have || have == len;  // its NUL was read, or the field is full
    return std::string(p, n);
  };
  bool name_whole = false;
  std::string path = text(kNameAt, kNameLen, name_whole);
  // GNU tar's "ustar  " has no prefix field; POSIX "ustar\0" may, and an unread magic may.
  const bool magic_read = cut.size() >= kMagicAt + 6;
  const bool posix = magic_read && std::memcmp(cut.data() + kMagicAt, "ustar\0", 6) == 0;
  bool prefix_known = magic_read && !posix;
  if (posix) {
    bool prefix_whole = false;
    const std::string prefix = text(kPrefixAt, kPrefixLen, prefix_whole);
    prefix_known = prefix_whole;
    if (prefix_whole && !prefix.empty()) path = prefix + "/" + path;
  }
  const bool printable =
      std::all_of(path.begin(), path.end(), [](char c) { return c >= 32 && c < 127; });
  if (!printable || path.empty()) return;  // nothing to go on
  if (!name_whole) {
    // The start of the name is the start of the path only when no prefix comes before it.
    if (prefix_known) {
      damage.name_hint = std::move(path);
      damage.hint = TarDamage::Hint::kStart;
    }
    return;
  }
  damage.name_hint = std::move(path);
  damage.hint = prefix_known ? TarDamage::Hint::kWhole : TarDamage::Hint::kEnd;
}

bool has_ustar_magic(std::span<const std::byte, kTarBlock> block) {
  return std::memcmp(block.data() + kMagicAt, "ustar", 5) == 0;
}

std::uint64_t round_up(std::uint64_t n) { return (n + kTarBlock - 1) / kTarBlock * kTarBlock; }

}  // namespace

std::string_view tar_problem_name(TarProblem problem) noexcept {
  switch (problem) {
    case TarProblem::kNone:
      return "no problem";
    case TarProblem::kBadChecksum:
      return "a member header with a wrong checksum";
    case TarProblem::kBadNumber:
      return "a member header whose size field is not a number";
    case TarProblem::kBadExtended:
      return "a malformed pax extended header or GNU long name";
    case TarProblem::kTruncated:
      return "the shard ends early (truncated)";
    case TarProblem::kDuplicateField:
      return "two members of one sample with the same field name";
  }
  return "an unknown problem";
}

HeaderParse parse_tar_header(std::span<const std::byte, kTarBlock> block, TarHeader& out,
                             TarProblem& problem) {
  if (all_zero(block)) return HeaderParse::kZero;
  std::uint32_t unsigned_sum = 0;
  std::int32_t signed_sum = 0;  // some old tars summed signed chars
  for (std::size_t i = 0; i < kTarBlock; ++i) {
    const bool in_checksum = i >= kChecksumAt && i < kChecksumAt + kChecksumLen;
    const std::uint8_t c = in_checksum ? ' ' : byte_at(block, i);
    unsigned_sum += c;
    signed_sum += static_cast<std::int8_t>(c);
  }
  std::uint64_t stored = 0;
  const bool readable = parse_number(block.subspan(kChecksumAt, kChecksumLen), stored);
  out.stored_checksum = static_cast<std::uint32_t>(stored);
  out.computed_checksum = unsigned_sum;
  if (!readable || (stored != unsigned_sum && static_cast<std::int64_t>(stored) != signed_sum)) {
    problem = TarProblem::kBadChecksum;
    return HeaderParse::kBad;
  }
  if (!parse_number(block.subspan(kSizeAt, kSizeLen), out.size)) {
    problem = TarProblem::kBadNumber;
    return HeaderParse::kBad;
  }
  const char type = static_cast<char>(byte_at(block, kTypeAt));
  out.type = type == '\0' ? '0' : type;
  const std::string_view name = text_field(block, kNameAt, kNameLen);
  // POSIX ustar ("ustar\0") splits long paths into prefix "/" name; GNU's "ustar  " uses those
  // bytes for other fields.
  const bool posix = std::memcmp(block.data() + kMagicAt, "ustar\0", 6) == 0;
  const std::string_view prefix = posix ? text_field(block, kPrefixAt, kPrefixLen) : "";
  out.name.clear();
  if (!prefix.empty()) {
    out.name.append(prefix);
    out.name.push_back('/');
  }
  out.name.append(name);
  problem = TarProblem::kNone;
  return HeaderParse::kHeader;
}

bool parse_pax_records(std::span<const std::byte> payload, PaxOverrides& out) {
  const std::string_view text(reinterpret_cast<const char*>(payload.data()), payload.size());
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] == '\0') break;  // padding some writers leave after the last record
    std::size_t length = 0;
    std::size_t i = pos;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (length > kTarMaxExtended) return false;
      length = length * 10 + static_cast<std::size_t>(text[i] - '0');
      ++i;
    }
    if (i == pos || i >= text.size() || text[i] != ' ') return false;
    if (length < i - pos + 2 || length > text.size() - pos) return false;
    const std::string_view record = text.substr(i + 1, pos + length - (i + 1));
    if (record.empty() || record.back() != '\n') return false;
    const std::size_t eq = record.find('=');
    if (eq == std::string_view::npos || eq == 0) return false;
    const std::string_view key = record.substr(0, eq);
    const std::string_view value = record.substr(eq + 1, record.size() - eq - 2);
    if (key == "path") {
      if (value.size() > kTarMaxPath) return false;
      out.path = std::string(value);
    } else if (key == "size") {
      std::uint64_t size = 0;
      if (value.empty()) return false;
      for (const char c : value) {
        if (c < '0' || c > '9' || size > (~std::uint64_t{0} - 9) / 10) return false;
        size = size * 10 + static_cast<std::uint64_t>(c - '0');
      }
      out.size = size;
    }
    pos += length;
  }
  return true;
}

bool split_member_name(std::string_view path, std::string_view& key, std::string_view& field) {
  const std::size_t slash = path.rfind('/');
  const std::size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  if (base >= path.size() || path[base] == '.') return false;
  const std::size_t dot = path.find('.', base);
  if (dot == std::string_view::npos || dot + 1 >= path.size()) return false;
  key = path.substr(0, dot);
  field = path.substr(dot + 1);
  return true;
}

bool damage_may_belong(const TarDamage& d, std::string_view key) {
  const std::string_view hint = d.name_hint;
  if (hint.empty()) return d.problem == TarProblem::kTruncated;  // cut before its name
  std::string_view hint_key;
  std::string_view field;
  switch (d.hint) {
    case TarDamage::Hint::kWhole:
      // A path that is no sample member's (README, a directory) does not end the sample.
      return !split_member_name(hint, hint_key, field) || hint_key == key;
    case TarDamage::Hint::kStart:
      // A name cut short ("c/04") may still become one that is no sample member's ("c/04/", a
      // directory; "c/04", no extension), which would not end the sample.
      return true;
    case TarDamage::Hint::kEnd:
      // The path is "<unread prefix>/<hint>": its key ends with the hint's.
      if (!split_member_name(hint, hint_key, field)) return true;
      return key == hint_key || (key.size() > hint_key.size() &&
                                 key.substr(key.size() - hint_key.size()) == hint_key &&
                                 key[key.size() - hint_key.size() - 1] == '/');
  }
  return false;
}

// ---------------------------------------------------------------------------------------------

TarScanner::TarScanner(StreamSource& in, std::uint64_t start) : in_(in), pos_(start) {}

std::size_t TarScanner::read_block(std::array<std::byte, kTarBlock>& block) {
  if (has_pushed_) {
    has_pushed_ = false;
    block = pushed_;
    pos_ += kTarBlock;
    return kTarBlock;
  }
  std::size_t got = 0;
  while (got < kTarBlock) {
    const std::size_t n = in_.read(std::span<std::byte>(block).subspan(got));
    if (n == 0) break;
    got += n;
  }
  pos_ += got;
  return got;
}

bool TarScanner::read_exact(std::span<std::byte> dst) {
  std::size_t got = 0;
  while (got < dst.size()) {
    const std::size_t n = in_.read(dst.subspan(got));
    if (n == 0) break;
    got += n;
  }
  pos_ += got;
  return got == dst.size();
}

bool TarScanner::skip_to(std::uint64_t offset) {
  if (offset <= pos_) return true;
  const std::uint64_t want = offset - pos_;
  const std::uint64_t skipped = in_.skip(want);
  pos_ += skipped;
  return skipped == want;
}

TarScanner::Step TarScanner::truncated(std::uint64_t offset, std::string detail, bool in_member,
                                       TarDamage& damage) {
  ended_ = true;
  data_pending_ = false;
  damage = TarDamage{TarProblem::kTruncated, offset, pos_, std::move(detail), in_member, {}};
  return Step::kDamage;
}

TarScanner::Step TarScanner::resync(TarProblem problem, std::uint64_t offset, std::string detail,
                                    TarDamage& damage) {
  damage.name_hint = hint_;
  // The next block that is a ustar header with a right checksum (requiring the magic makes a
  // false match inside member data unlikely) is where reading goes on.
  std::array<std::byte, kTarBlock> block;
  int zeros = 0;
  for (;;) {
    const std::uint64_t at = pos_;
    const std::size_t got = read_block(block);
    if (got < kTarBlock) {
      ended_ = true;
      damage =
          TarDamage{problem, offset, at, std::move(detail), false, std::move(damage.name_hint)};
      return Step::kDamage;
    }
    TarHeader header;
    TarProblem ignored = TarProblem::kNone;
    const HeaderParse parse = parse_tar_header(block, header, ignored);
    if (parse == HeaderParse::kZero) {
      if (++zeros == 2) {  // the end-of-archive marker
        ended_ = true;
        damage = TarDamage{problem,           offset, at - kTarBlock,
                           std::move(detail), false,  std::move(damage.name_hint)};
        return Step::kDamage;
      }
      continue;
    }
    zeros = 0;
    if (parse == HeaderParse::kHeader && has_ustar_magic(block)) {
      pushed_ = block;
      has_pushed_ = true;
      pos_ = at;
      damage =
          TarDamage{problem, offset, at, std::move(detail), false, std::move(damage.name_hint)};
      return Step::kDamage;
    }
  }
}

TarScanner::Step TarScanner::next(TarMember& member, TarDamage& damage) {
  if (ended_) return Step::kEnd;
  if (data_pending_) {
    data_pending_ = false;
    if (!skip_to(data_end_)) {
      return truncated(current_header_, "inside the data of a member", true, damage);
    }
  }
  std::optional<std::string> long_name;
  PaxOverrides pax;
  std::uint64_t member_start = pos_;
  bool extended = false;  // a pax or long-name header applies to the next header
  std::array<std::byte, kTarBlock> block;
  std::vector<std::byte> payload;
  for (;;) {
    const std::uint64_t at = pos_;
    const std::size_t got = read_block(block);
    if (got == 0 && !extended) {
      ended_ = true;  // the end of the stream at a block boundary: accepted as the end
      return Step::kEnd;
    }
    if (got < kTarBlock) {
      truncated(member_start, fmt::format("inside a member header at byte {}", at), false, damage);
      if (extended) {
        // The path came in the extended header; the cut block is its member's (a regular file,
        // unless the type field that was read says otherwise).
        const bool regular = got <= kTypeAt || byte_at(block, kTypeAt) == '0' ||
                             byte_at(block, kTypeAt) == 0 || byte_at(block, kTypeAt) == '7';
        if (regular && (long_name || pax.path)) {
          damage.name_hint = long_name ? *long_name : *pax.path;
        }
      } else {
        cut_name(std::span<const std::byte>(block).first(got), damage);
      }
      return Step::kDamage;
    }
    TarHeader header;
    TarProblem problem = TarProblem::kNone;
    const HeaderParse parse = parse_tar_header(block, header, problem);
    if (parse == HeaderParse::kZero) {
      // One zero block and then the end, or two: the end-of-archive marker. A single zero
      // block before more headers is taken as padding.
      const std::uint64_t second_at = pos_;
      const std::size_t second = read_block(block);
      if (second < kTarBlock) {
        ended_ = true;
        return Step::kEnd;
      }
      TarHeader ignored;
      TarProblem p2 = TarProblem::kNone;
      if (parse_tar_header(block, ignored, p2) == HeaderParse::kZero) {
        ended_ = true;
        return Step::kEnd;
      }
      pushed_ = block;
      has_pushed_ = true;
      pos_ = second_at;
      if (!extended) member_start = pos_;
      continue;
    }
    if (parse == HeaderParse::kBad) {
      hint_.clear();
      const std::string_view name = text_field(block, kNameAt, kNameLen);
      if (std::all_of(name.begin(), name.end(), [](char c) { return c >= 32 && c < 127; })) {
        hint_ = std::string(name);
      }
      std::string detail = problem == TarProblem::kBadChecksum
                               ? fmt::format("stored checksum {}, computed {}",
                                             header.stored_checksum, header.computed_checksum)
                               : std::string("its size field is not octal or base-256");
      return resync(problem, at, std::move(detail), damage);
    }
    hint_.clear();
    const std::uint64_t data_at = pos_;
    const std::uint64_t size = header.type == 'x' || header.type == 'g' || header.type == 'L' ||
                                       header.type == 'K' || !pax.size
                                   ? header.size
                                   : *pax.size;
    switch (header.type) {
      case 'x':
      case 'L': {
        const std::size_t limit = header.type == 'x' ? kTarMaxExtended : kTarMaxPath;
        if (header.size > limit) {
          return resync(
              TarProblem::kBadExtended, at,
              fmt::format("a {} header of {} bytes (at most {})",
                          header.type == 'x' ? "pax" : "GNU long-name", header.size, limit),
              damage);
        }
        payload.resize(static_cast<std::size_t>(header.size));
        if (!read_exact(payload) || !skip_to(data_at + round_up(header.size))) {
          return truncated(member_start, "inside an extended header", false, damage);
        }
        if (header.type == 'x') {
          if (!parse_pax_records(payload, pax)) {
            return resync(TarProblem::kBadExtended, at, "its pax records are malformed", damage);
          }
        } else {
          const auto* p = reinterpret_cast<const char*>(payload.data());
          long_name = std::string(p, strnlen(p, payload.size()));
        }
        extended = true;
        continue;
      }
      case 'g':
      case 'K':
        if (!skip_to(data_at + round_up(header.size))) {
          return truncated(member_start, "inside an extended header", false, damage);
        }
        extended = true;
        continue;
      case '0':
      case '7': {
        member.path = long_name  ? std::move(*long_name)
                      : pax.path ? std::move(*pax.path)
                                 : std::move(header.name);
        member.header_offset = member_start;
        member.data_offset = data_at;
        member.size = size;
        if (size > ~std::uint64_t{0} - 2 * kTarBlock - data_at) {
          return resync(TarProblem::kBadNumber, at, "its size overflows", damage);
        }
        data_end_ = data_at + round_up(size);
        data_pending_ = true;
        current_header_ = member_start;
        return Step::kMember;
      }
      default:
        // Directories, links, devices, FIFOs and the rarer GNU types: not sample members.
        // Their size says how much data follows (0 for most).
        if (header.type == '5' || header.type == '1' || header.type == '2' || header.type == '3' ||
            header.type == '4' || header.type == '6') {
          // These carry no data in any tar stoker has seen, whatever the size field says.
        } else if (!skip_to(data_at + round_up(size))) {
          return truncated(member_start, "inside the data of a member", false, damage);
        }
        long_name.reset();
        pax = PaxOverrides{};
        extended = false;
        member_start = pos_;
        continue;
    }
  }
}

bool TarScanner::read_data(std::span<std::byte> dst, TarDamage& damage) {
  const std::uint64_t start = pos_;
  if (!read_exact(dst)) {
    truncated(start, "inside the data of a member", true, damage);
    return false;
  }
  // The padding is skipped by the next call of next(), as for data that is not read, so a
  // shard cut inside it reads the same either way.
  return true;
}

// ---------------------------------------------------------------------------------------------

void TarSample::clear() noexcept {
  key.clear();
  offset = 0;
  members.clear();
  damage.reset();
  storage.clear();
}

TarSampleReader::TarSampleReader(StreamSource& in, std::uint64_t start, WantsFn wants,
                                 const void* context, bool lowercase_fields)
    : scanner_(in, start), wants_(wants), context_(context), lowercase_(lowercase_fields) {}

std::string lowercase_ascii(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool has_uppercase_ascii(std::string_view s) noexcept {
  return std::any_of(s.begin(), s.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

void TarSampleReader::take_member(TarSample& out, bool read_bytes) {
  TarMember& m = *pending_;
  std::string_view key;
  std::string_view raw_field;
  split_member_name(m.path, key, raw_field);
  const std::string lowered =
      lowercase_ && has_uppercase_ascii(raw_field) ? lowercase_ascii(raw_field) : std::string();
  const std::string_view field = lowered.empty() ? raw_field : std::string_view(lowered);
  for (const TarSample::Member& existing : out.members) {
    if (existing.field == field && !out.damage) {
      out.damage = TarDamage{TarProblem::kDuplicateField,
                             m.header_offset,
                             m.data_offset,
                             fmt::format("field '{}' of key '{}' appears twice", field, key),
                             false,
                             {}};
    }
  }
  TarSample::Member member;
  member.field = std::string(field);
  member.data_offset = m.data_offset;
  member.size = m.size;
  const bool want = read_bytes && !out.damage && wants_ != nullptr && wants_(context_, field);
  if (want) {
    // In pieces, so a damaged size field cannot make it allocate more than the stream holds.
    constexpr std::uint64_t kPiece = 1 << 20;
    member.stored_at = out.storage.size();
    std::uint64_t left = m.size;
    member.stored = true;
    while (left > 0) {
      const auto piece = static_cast<std::size_t>(std::min(left, kPiece));
      const std::size_t at = out.storage.size();
      out.storage.resize(at + piece);
      TarDamage damage;
      if (!scanner_.read_data(std::span<std::byte>(out.storage).subspan(at), damage)) {
        damage.offset = m.header_offset;
        out.damage = std::move(damage);
        member.stored = false;
        break;
      }
      left -= piece;
    }
  }
  out.members.push_back(std::move(member));
  pending_.reset();
}

TarScanner::Step TarSampleReader::after_damage(TarMember& member, TarDamage& d) {
  for (;;) {
    TarDamage more;
    const TarScanner::Step step = scanner_.next(member, more);
    if (step != TarScanner::Step::kDamage) return step;
    if (more.in_member) {
      ended_ = true;  // truncated inside the member after the damage: nothing follows
      return TarScanner::Step::kEnd;
    }
    d.resume = more.resume;  // two damaged stretches in a row are one
  }
}

namespace {
std::string_view key_of(std::string_view name) {
  std::string_view key;
  std::string_view field;
  return split_member_name(name, key, field) ? key : std::string_view{};
}
}  // namespace

bool TarSampleReader::next(TarSample& out, bool read_bytes) {
  out.clear();
  if (pending_damage_) {
    out.offset = pending_damage_->offset;
    out.damage = std::move(pending_damage_);
    pending_damage_.reset();
    return true;
  }
  std::string_view key;
  std::string_view field;
  while (!pending_) {
    if (ended_) return false;
    TarMember m;
    TarDamage d;
    switch (scanner_.next(m, d)) {
      case TarScanner::Step::kEnd:
        ended_ = true;
        return false;
      case TarScanner::Step::kDamage: {
        if (!d.in_member) {
          TarMember after;
          const TarScanner::Step step = after_damage(after, d);
          if (step == TarScanner::Step::kEnd) ended_ = true;
          if (step == TarScanner::Step::kMember && split_member_name(after.path, key, field)) {
            const bool belongs = !d.name_hint.empty() && key_of(d.name_hint) == key;
            pending_ = std::move(after);
            if (belongs) {
              attach_next_ = std::move(d);
              break;
            }
          }
        }
        out.offset = d.offset;
        out.damage = std::move(d);
        return true;
      }
      case TarScanner::Step::kMember:
        if (split_member_name(m.path, key, field)) pending_ = std::move(m);
        break;
    }
  }
  split_member_name(pending_->path, key, field);
  out.key = std::string(key);
  out.offset = pending_->header_offset;
  if (attach_next_) {
    out.offset = attach_next_->offset;
    out.damage = std::move(attach_next_);
    attach_next_.reset();
  }
  take_member(out, read_bytes);
  for (;;) {
    if (ended_) return true;
    TarMember m;
    TarDamage d;
    switch (scanner_.next(m, d)) {
      case TarScanner::Step::kEnd:
        ended_ = true;
        return true;
      case TarScanner::Step::kMember:
        if (!split_member_name(m.path, key, field)) continue;
        if (key != out.key) {
          pending_ = std::move(m);
          return true;
        }
        pending_ = std::move(m);
        take_member(out, read_bytes);
        continue;
      case TarScanner::Step::kDamage: {
        if (d.in_member) {  // the shard ends inside this sample's last member
          if (!out.damage) out.damage = std::move(d);
          ended_ = true;
          return true;
        }
        const std::string_view hint = key_of(d.name_hint);
        TarMember after;
        const TarScanner::Step step = after_damage(after, d);
        const bool after_is_sample =
            step == TarScanner::Step::kMember && split_member_name(after.path, key, field);
        if (after_is_sample && key == out.key) {  // the sample goes on after the damage
          if (!out.damage) {
            d.offset = out.offset;
            out.damage = std::move(d);
          }
          pending_ = std::move(after);
          take_member(out, false);
          continue;
        }
        if (step == TarScanner::Step::kEnd) ended_ = true;
        const bool next_is_its = after_is_sample && !hint.empty() && hint == key;
        if (after_is_sample) pending_ = std::move(after);
        // A header cut short at the end of the shard is the last sample's unless what could be
        // read of its name shows another key: the damage then spoils no good data.
        const bool cut_here = d.problem == TarProblem::kTruncated && damage_may_belong(d, out.key);
        if (next_is_its) {
          attach_next_ = std::move(d);
        } else if ((!hint.empty() && hint == out.key) || cut_here) {
          if (!out.damage) {
            d.offset = out.offset;
            out.damage = std::move(d);
          }
        } else {
          pending_damage_ = std::move(d);
        }
        return true;
      }
    }
  }
}

}  // namespace stoker::detail
