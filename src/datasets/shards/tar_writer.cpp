// WebDatasetWriter: WebDataset tar shards and their indexes.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "data/random_state.hpp"
#include "datasets/shards/index_cache.hpp"
#include "datasets/shards/shard_format.hpp"
#include "datasets/shards/tar_index.hpp"
#include "datasets/shards/tar_reader.hpp"
#include "os/posix.hpp"
#include "stoker/errors.hpp"
#include "stoker/npy_dataset.hpp"
#include "stoker/webdataset.hpp"

namespace stoker {
namespace {

using detail::kTarBlock;
constexpr std::size_t kFlushBytes = 1 << 20;
constexpr std::uint64_t kMaxOctalSize = (std::uint64_t{1} << 33) - 1;  // 11 octal digits

std::uint64_t padded(std::uint64_t n) { return (n + kTarBlock - 1) / kTarBlock * kTarBlock; }

// The pattern's one integer conversion ("%d", "%06d"), found and checked once.
struct ShardPattern {
  std::string head;
  std::string tail;
  std::size_t width = 0;

  explicit ShardPattern(const std::string& pattern) {
    int conversions = 0;
    std::string text;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i] != '%') {
        text.push_back(pattern[i]);
        continue;
      }
      if (i + 1 < pattern.size() && pattern[i + 1] == '%') {
        text.push_back('%');
        ++i;
        continue;
      }
      std::size_t j = i + 1;
      std::size_t w = 0;
      while (j < pattern.size() && pattern[j] >= '0' && pattern[j] <= '9' && w < 100) {
        w = w * 10 + static_cast<std::size_t>(pattern[j] - '0');
        ++j;
      }
      if (j >= pattern.size() || (pattern[j] != 'd' && pattern[j] != 'u' && pattern[j] != 'i')) {
        conversions = -100;
        break;
      }
      if (++conversions == 1) {
        head = text;
        text.clear();
        width = w;
      }
      i = j;
    }
    tail = text;
    if (conversions != 1) {
      throw std::invalid_argument(
          fmt::format("WebDatasetWriterOptions::pattern \"{}\" must hold exactly one integer "
                      "conversion, such as "
                      "\"out/train-%06d.tar\"",
                      pattern));
    }
  }
  std::string path(std::size_t n) const { return fmt::format("{}{:0{}}{}", head, n, width, tail); }
};

void put_octal(std::byte* field, std::size_t len, std::uint64_t v) {
  // len - 1 digits and a NUL.
  for (std::size_t i = len - 1; i-- > 0;) {
    field[i] = static_cast<std::byte>('0' + (v & 7));
    v >>= 3;
  }
  field[len - 1] = std::byte{0};
}

// One ustar header block for a member of `size` bytes named `name` (<= 100 bytes).
void ustar_header(std::byte* block, std::string_view name, std::uint64_t size, char type) {
  std::memset(block, 0, kTarBlock);
  std::memcpy(block, name.data(), std::min<std::size_t>(name.size(), 100));
  put_octal(block + 100, 8, 0644);
  put_octal(block + 108, 8, 0);
  put_octal(block + 116, 8, 0);
  put_octal(block + 124, 12, size <= kMaxOctalSize ? size : 0);
  put_octal(block + 136, 12, 0);
  block[156] = static_cast<std::byte>(type);
  std::memcpy(block + 257, "ustar", 6);  // with its NUL
  std::memcpy(block + 263, "00", 2);
  std::memset(block + 148, ' ', 8);
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i < kTarBlock; ++i) sum += std::to_integer<std::uint8_t>(block[i]);
  put_octal(block + 148, 7, sum);  // six digits and a NUL; the space stays
}

// "<len> <key>=<value>\n", whose length counts its own digits.
std::string pax_record(std::string_view key, std::string_view value) {
  const std::size_t body = 1 + key.size() + 1 + value.size() + 1;
  std::size_t length = body + 1;
  while (std::to_string(length).size() + body != length) ++length;
  return fmt::format("{} {}={}\n", length, key, value);
}

std::int64_t integer_value(const Tensor& t) {
  switch (t.dtype()) {
    case DType::kInt8:
      return t.item<std::int8_t>();
    case DType::kUInt8:
      return t.item<std::uint8_t>();
    case DType::kInt16:
      return t.item<std::int16_t>();
    case DType::kUInt16:
      return t.item<std::uint16_t>();
    case DType::kInt32:
      return t.item<std::int32_t>();
    case DType::kUInt32:
      return t.item<std::uint32_t>();
    case DType::kInt64:
      return t.item<std::int64_t>();
    case DType::kUInt64:
      return static_cast<std::int64_t>(t.item<std::uint64_t>());
    default:
      return 0;
  }
}

bool is_integer(DType d) {
  return d == DType::kInt8 || d == DType::kUInt8 || d == DType::kInt16 || d == DType::kUInt16 ||
         d == DType::kInt32 || d == DType::kUInt32 || d == DType::kInt64 || d == DType::kUInt64;
}

}  // namespace

struct WebDatasetWriter::Impl {
  WebDatasetWriterOptions options;
  ShardPattern pattern;
  std::vector<std::string> paths;
  std::string path;  // the open shard
  detail::posix::Fd fd;
  std::vector<std::byte> pending;  // bytes not yet written
  std::uint64_t offset = 0;        // of the open shard
  std::size_t samples_in_shard = 0;
  std::uint64_t samples = 0;
  detail::TarIndexBuilder index;

  explicit Impl(WebDatasetWriterOptions o) : options(std::move(o)), pattern(options.pattern) {
    if (options.max_shard_bytes == 0) {
      throw std::invalid_argument(
          "WebDatasetWriterOptions::max_shard_bytes is 0; give a target size");
    }
  }

  [[noreturn]] void fail(std::string_view what, int err) const {
    throw Error(
        fmt::format("WebDatasetWriter: cannot {} {}: {}; check the directory exists and has "
                    "space",
                    what, path, detail::posix::errno_message("the system said", err)));
  }

  void flush() {
    errno = 0;  // a write of 0 bytes (a full disk) sets none
    if (detail::posix::write_all(fd.get(), pending.data(), pending.size()) != 0) {
      fail("write", errno != 0 ? errno : ENOSPC);
    }
    pending.clear();
  }
  void append(std::span<const std::byte> bytes) {
    pending.insert(pending.end(), bytes.begin(), bytes.end());
    offset += bytes.size();
    if (pending.size() >= kFlushBytes) flush();
  }
  void pad() {
    const std::uint64_t n = padded(offset) - offset;
    pending.insert(pending.end(), static_cast<std::size_t>(n), std::byte{0});
    offset += n;
  }

  void open_next() {
    path = pattern.path(paths.size());
    fd = detail::posix::Fd(detail::posix::open_write(path.c_str()));
    if (!fd.valid()) fail("create shard", errno);
    offset = 0;
    samples_in_shard = 0;
    index = detail::TarIndexBuilder{};
  }

  void close_shard() {
    if (!fd.valid()) return;
    pending.insert(pending.end(), 2 * kTarBlock, std::byte{0});  // the end-of-archive marker
    offset += 2 * kTarBlock;
    try {
      flush();
    } catch (...) {
      fd.reset();  // not left open for the destructor to try again
      throw;
    }
    if (detail::posix::close_fd(fd.release()) != 0) fail("close", errno);
    if (options.write_index) {
      const detail::ShardStat stat = detail::stat_shard(path, "WebDatasetWriter");
      const detail::TarIndex built = index.take();
      const std::string idx = detail::index_path(path, "");
      if (!detail::save_index(idx, detail::kTarIndexMagic, detail::kTarIndexVersion, stat,
                              detail::serialize_tar_index(built))) {
        throw Error(
            fmt::format("WebDatasetWriter: cannot write the index {} of shard {}; check the "
                        "directory is writable, or set write_index = false",
                        idx, path));
      }
    }
    paths.push_back(path);
  }

  // Header blocks of one member: a pax header first when the name or size needs one.
  std::uint64_t header_bytes(std::string_view name, std::uint64_t size) const {
    if (name.size() <= 100 && size <= kMaxOctalSize) return kTarBlock;
    return 2 * kTarBlock + padded(pax_payload(name, size).size());
  }
  static std::string pax_payload(std::string_view name, std::uint64_t size) {
    std::string payload;
    if (name.size() > 100) payload += pax_record("path", name);
    if (size > kMaxOctalSize) payload += pax_record("size", std::to_string(size));
    return payload;
  }

  void member(std::string_view name, std::span<const std::byte> data, detail::TarSample& sample) {
    std::byte block[kTarBlock];
    if (name.size() > 100 || data.size() > kMaxOctalSize) {
      const std::string payload = pax_payload(name, data.size());
      ustar_header(block, "././@PaxHeader", payload.size(), 'x');
      append(block);
      append(std::as_bytes(std::span<const char>(payload.data(), payload.size())));
      pad();
    }
    ustar_header(block, name.substr(0, std::min<std::size_t>(name.size(), 100)), data.size(), '0');
    append(block);
    const std::size_t dot =
        name.find('.', name.rfind('/') == std::string_view::npos ? 0 : name.rfind('/') + 1);
    sample.members.push_back(detail::TarSample::Member{std::string(name.substr(dot + 1)), offset,
                                                       data.size(), 0, false});
    append(data);
    pad();
  }
};

WebDatasetWriter::WebDatasetWriter(WebDatasetWriterOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

WebDatasetWriter::~WebDatasetWriter() {
  try {
    impl_->close_shard();
  } catch (...) {
    // close() reports; a destructor must not throw.
  }
}

std::uint64_t WebDatasetWriter::samples_written() const noexcept { return impl_->samples; }

void WebDatasetWriter::write(
    std::string_view key,
    std::span<const std::pair<std::string, std::span<const std::byte>>> fields) {
  const std::size_t slash = key.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? key : key.substr(slash + 1);
  if (base.empty() || base.find('.') != std::string_view::npos || base.front() == '.') {
    throw std::invalid_argument(fmt::format(
        "WebDatasetWriter::write: key '{}' must end in a non-empty name without '.' (the first '.' "
        "after the last '/' starts the field name)",
        key));
  }
  if (fields.empty()) {
    throw std::invalid_argument(
        fmt::format("WebDatasetWriter::write: sample '{}' has no fields; give at least one", key));
  }
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const std::string& name = fields[i].first;
    if (name.empty() || name.find('/') != std::string::npos) {
      throw std::invalid_argument(
          fmt::format("WebDatasetWriter::write: sample '{}' has a field named '{}'; field names "
                      "are non-empty and "
                      "hold no '/'",
                      key, name));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (fields[j].first == name) {
        throw std::invalid_argument(
            fmt::format("WebDatasetWriter::write: sample '{}' has field '{}' twice", key, name));
      }
    }
    bytes += impl_->header_bytes(fmt::format("{}.{}", key, name), fields[i].second.size()) +
             padded(fields[i].second.size());
  }
  Impl& w = *impl_;
  if (w.fd.valid() && w.samples_in_shard > 0 &&
      (w.offset + bytes + 2 * kTarBlock > w.options.max_shard_bytes ||
       (w.options.max_samples_per_shard != 0 &&
        w.samples_in_shard >= w.options.max_samples_per_shard))) {
    w.close_shard();
  }
  if (!w.fd.valid()) w.open_next();
  detail::TarSample sample;
  sample.key = std::string(key);
  sample.offset = w.offset;
  for (const auto& [name, data] : fields) w.member(fmt::format("{}.{}", key, name), data, sample);
  w.index.add(sample);
  ++w.samples_in_shard;
  ++w.samples;
}

void WebDatasetWriter::write(std::string_view key, const Sample& sample) {
  std::vector<std::vector<std::byte>> owned;
  owned.reserve(sample.size());
  std::vector<std::pair<std::string, std::span<const std::byte>>> fields;
  for (const auto& [name, t] : sample) {
    if (t.dtype() == DType::kUInt8 && t.dim() == 1) {
      fields.emplace_back(name, t.bytes());
      continue;
    }
    if (t.dim() == 0 && is_integer(t.dtype()) && detail::is_int_field_name(name)) {
      const std::string text = std::to_string(integer_value(t));
      const auto b = std::as_bytes(std::span<const char>(text.data(), text.size()));
      owned.emplace_back(b.begin(), b.end());
      fields.emplace_back(name, owned.back());
      continue;
    }
    std::vector<std::byte> npy = make_npy_header(t.dtype(), t.shape().dims());
    npy.insert(npy.end(), t.bytes().begin(), t.bytes().end());
    owned.push_back(std::move(npy));
    const bool has_npy = name == "npy" || (name.size() > 4 && name.ends_with(".npy"));
    fields.emplace_back(has_npy ? name : name + ".npy", owned.back());
  }
  write(key, fields);
}

std::vector<std::string> WebDatasetWriter::close() {
  impl_->close_shard();
  return impl_->paths;
}

namespace detail {

std::vector<std::string> write_webdataset_samples(std::size_t n,
                                                  const std::function<Sample(std::size_t)>& get,
                                                  WebDatasetWriterOptions options) {
  WebDatasetWriter writer(std::move(options));
  for (std::size_t i = 0; i < n; ++i) {
    begin_sample_rng(0, 0, i);
    Sample sample;
    try {
      sample = get(i);
    } catch (...) {
      end_sample_rng();
      throw;
    }
    end_sample_rng();
    writer.write(fmt::format("{:09}", i), sample);
  }
  return writer.close();
}

}  // namespace detail
}  // namespace stoker
