#include "datasets/shards/index_cache.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "os/log.hpp"
#include "os/posix.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {
namespace {

constexpr std::size_t kMagicBytes = 8;
constexpr std::size_t kHeaderBytes = kMagicBytes + 4 + 4 + 8 + 8 + 8 + 8;

void put_le(std::byte* at, std::uint64_t v, std::size_t width) {
  for (std::size_t i = 0; i < width; ++i) at[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
std::uint64_t get_le(const std::byte* at, std::size_t width) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < width; ++i) v |= std::to_integer<std::uint64_t>(at[i]) << (8 * i);
  return v;
}

}  // namespace

ShardStat stat_shard(const std::string& path, std::string_view who) {
  struct stat st {};
  if (!posix::stat_path(path.c_str(), st)) {
    throw Error(fmt::format("{}: cannot open shard {}: {}; check the path", who, path,
                            posix::errno_message("stat", errno)));
  }
  ShardStat out;
  out.regular = S_ISREG(st.st_mode);
  out.size = static_cast<std::uint64_t>(st.st_size);
  out.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  return out;
}

std::string index_path(const std::string& shard, const std::string& index_dir) {
  if (index_dir.empty()) return shard + ".idx";
  const std::size_t slash = shard.rfind('/');
  const std::string file = slash == std::string::npos ? shard : shard.substr(slash + 1);
  return index_dir + (index_dir.back() == '/' ? "" : "/") + file + ".idx";
}

std::uint64_t fnv1a64(std::span<const std::byte> bytes) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const std::byte b : bytes) {
    h ^= std::to_integer<std::uint64_t>(b);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::vector<std::byte> frame_index(std::string_view magic, std::uint32_t version,
                                   const ShardStat& shard, std::span<const std::byte> payload) {
  std::vector<std::byte> out(kHeaderBytes + payload.size());
  std::memset(out.data(), 0, kMagicBytes);
  std::memcpy(out.data(), magic.data(), std::min(magic.size(), kMagicBytes));
  put_le(out.data() + 8, version, 4);
  put_le(out.data() + 12, 0, 4);
  put_le(out.data() + 16, shard.size, 8);
  put_le(out.data() + 24, static_cast<std::uint64_t>(shard.mtime_ns), 8);
  put_le(out.data() + 32, payload.size(), 8);
  put_le(out.data() + 40, fnv1a64(payload), 8);
  if (!payload.empty()) std::memcpy(out.data() + kHeaderBytes, payload.data(), payload.size());
  return out;
}

std::optional<std::span<const std::byte>> unframe_index(std::span<const std::byte> file,
                                                        std::string_view magic,
                                                        std::uint32_t version,
                                                        const ShardStat& shard) noexcept {
  if (file.size() < kHeaderBytes) return std::nullopt;
  std::byte expected[kMagicBytes] = {};
  std::memcpy(expected, magic.data(), std::min(magic.size(), kMagicBytes));
  if (std::memcmp(file.data(), expected, kMagicBytes) != 0) return std::nullopt;
  if (get_le(file.data() + 8, 4) != version) return std::nullopt;
  if (get_le(file.data() + 16, 8) != shard.size) return std::nullopt;
  if (get_le(file.data() + 24, 8) != static_cast<std::uint64_t>(shard.mtime_ns)) {
    return std::nullopt;
  }
  const std::uint64_t length = get_le(file.data() + 32, 8);
  if (length != file.size() - kHeaderBytes) return std::nullopt;
  const std::span<const std::byte> payload = file.subspan(kHeaderBytes);
  if (get_le(file.data() + 40, 8) != fnv1a64(payload)) return std::nullopt;
  return payload;
}

std::optional<std::vector<std::byte>> load_index(const std::string& index_file,
                                                 std::string_view magic, std::uint32_t version,
                                                 const ShardStat& shard) {
  posix::Fd fd(posix::open_read(index_file.c_str()));
  if (!fd.valid()) return std::nullopt;
  struct stat st {};
  if (!posix::stat_fd(fd.get(), st) || !S_ISREG(st.st_mode)) return std::nullopt;
  std::vector<std::byte> bytes(static_cast<std::size_t>(st.st_size));
  // A read error, or a file shorter than fstat said: no index (it is built again).
  if (posix::pread_full(fd.get(), bytes.data(), bytes.size(), 0) !=
      static_cast<ssize_t>(bytes.size())) {
    return std::nullopt;
  }
  const auto payload = unframe_index(bytes, magic, version, shard);
  if (!payload) {
    logger().debug("shard index {} is stale or damaged: rebuilding it", index_file);
    return std::nullopt;
  }
  return std::vector<std::byte>(payload->begin(), payload->end());
}

bool save_index(const std::string& index_file, std::string_view magic, std::uint32_t version,
                const ShardStat& shard, std::span<const std::byte> payload) {
  const std::vector<std::byte> bytes = frame_index(magic, version, shard, payload);
  const std::string temporary = fmt::format("{}.tmp.{}", index_file, posix::self_pid());
  posix::Fd fd(posix::open_write(temporary.c_str()));
  if (!fd.valid()) {
    logger().debug("cannot write shard index {} ({}): keeping it in memory", index_file,
                   std::strerror(errno));
    return false;
  }
  const bool written = posix::write_all(fd.get(), bytes.data(), bytes.size()) == 0;
  fd.reset();
  if (!written || posix::rename_file(temporary.c_str(), index_file.c_str()) != 0) {
    posix::remove_file(temporary.c_str());
    logger().debug("cannot write shard index {}: keeping it in memory", index_file);
    return false;
  }
  return true;
}

void IndexWriter::u32(std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}
void IndexWriter::u64(std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}
void IndexWriter::string(std::string_view s) {
  u32(static_cast<std::uint32_t>(s.size()));
  bytes(std::as_bytes(std::span<const char>(s.data(), s.size())));
}

bool IndexReader::take(std::size_t n, const std::byte*& at) noexcept {
  if (!ok_ || n > data_.size() - pos_) {
    ok_ = false;
    return false;
  }
  at = data_.data() + pos_;
  pos_ += n;
  return true;
}
bool IndexReader::u8(std::uint8_t& v) noexcept {
  const std::byte* at = nullptr;
  if (!take(1, at)) return false;
  v = std::to_integer<std::uint8_t>(*at);
  return true;
}
bool IndexReader::u32(std::uint32_t& v) noexcept {
  const std::byte* at = nullptr;
  if (!take(4, at)) return false;
  v = static_cast<std::uint32_t>(get_le(at, 4));
  return true;
}
bool IndexReader::u64(std::uint64_t& v) noexcept {
  const std::byte* at = nullptr;
  if (!take(8, at)) return false;
  v = get_le(at, 8);
  return true;
}
bool IndexReader::string(std::string& s, std::size_t max_length) {
  std::uint32_t n = 0;
  if (!u32(n)) return false;
  if (n > max_length) {
    ok_ = false;
    return false;
  }
  const std::byte* at = nullptr;
  if (!take(n, at)) return false;
  s.assign(reinterpret_cast<const char*>(at), n);
  return true;
}

}  // namespace stoker::detail
