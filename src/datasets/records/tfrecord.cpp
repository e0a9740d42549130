#include "datasets/records/tfrecord.hpp"

#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "datasets/records/compression.hpp"
#include "datasets/records/crc32c.hpp"
#include "stoker/tfrecord_dataset.hpp"

namespace stoker::detail {
namespace {

std::uint64_t load_u64(const std::byte* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

std::uint32_t load_u32(const std::byte* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  return v;
}

void store_le(std::byte* p, std::uint64_t v, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xFFU);
}

}  // namespace

FrameCheck check_tfrecord_frame(std::span<const std::byte> bytes, bool verify_crc,
                                bool check_data) noexcept {
  FrameCheck check;
  if (bytes.size() < kTFRecordHeaderBytes) {
    check.status = FrameStatus::kTruncated;
    return check;
  }
  check.length = load_u64(bytes.data());
  if (verify_crc) {
    check.stored_crc = load_u32(bytes.data() + 8);
    check.computed_crc = mask_crc32c(crc32c(bytes.first(8)));
    if (check.stored_crc != check.computed_crc) {
      check.status = FrameStatus::kBadLengthCrc;
      return check;
    }
  }
  // Written so that no sum can overflow: the announced length against what remains.
  if (bytes.size() < kTFRecordOverhead || check.length > bytes.size() - kTFRecordOverhead) {
    check.status = FrameStatus::kTruncated;
    return check;
  }
  if (verify_crc && check_data) {
    const auto data = bytes.subspan(kTFRecordHeaderBytes, static_cast<std::size_t>(check.length));
    check.stored_crc = load_u32(data.data() + data.size());
    check.computed_crc = mask_crc32c(crc32c(data));
    if (check.stored_crc != check.computed_crc) check.status = FrameStatus::kBadDataCrc;
  }
  return check;
}

std::string describe_frame(const FrameCheck& check, std::uint64_t available) {
  switch (check.status) {
    case FrameStatus::kOk:
      return {};
    case FrameStatus::kTruncated:
      if (available < kTFRecordHeaderBytes) {
        return fmt::format("truncated: {} bytes left, fewer than the {}-byte record header",
                           available, kTFRecordHeaderBytes);
      }
      return fmt::format(
          "truncated: the header announces {} bytes of data ({} with framing) but {} bytes are "
          "left",
          check.length, check.length + kTFRecordOverhead, available);
    case FrameStatus::kBadLengthCrc:
      return fmt::format(
          "corrupt record header: the length's CRC does not match (stored {:#010x}, computed "
          "{:#010x} for length {})",
          check.stored_crc, check.computed_crc, check.length);
    case FrameStatus::kBadDataCrc:
      return fmt::format("bad data CRC (stored {:#010x}, computed {:#010x} over {} bytes)",
                         check.stored_crc, check.computed_crc, check.length);
  }
  return "unknown frame status";
}

std::size_t find_next_frame(std::span<const std::byte> bytes, std::size_t from, bool verify_crc) {
  if (!verify_crc) return bytes.size();  // without checksums any byte could start a frame
  for (std::size_t p = from; p + kTFRecordOverhead <= bytes.size(); ++p) {
    if (check_tfrecord_frame(bytes.subspan(p), verify_crc, true).status == FrameStatus::kOk) {
      return p;
    }
  }
  return bytes.size();
}

TFRecordIndex index_tfrecords(std::span<const std::byte> file, bool verify_crc) {
  TFRecordIndex index;
  std::size_t offset = 0;
  while (offset < file.size()) {
    const FrameCheck check = check_tfrecord_frame(file.subspan(offset), verify_crc, false);
    if (check.status == FrameStatus::kOk) {
      index.entries.push_back(offset);
      offset += static_cast<std::size_t>(check.length) + kTFRecordOverhead;
      continue;
    }
    // A frame that cannot be read: the bytes up to the next good frame are one bad entry.
    const std::size_t resume = find_next_frame(file, offset + 1, verify_crc);
    index.entries.push_back(TFRecordIndex::kBadEntry | index.bad_regions.size());
    index.bad_regions.push_back({offset, resume, check});
    offset = resume;
  }
  return index;
}

void throw_tfrecord_error(std::string_view source, std::uint64_t offset, std::size_t record,
                          std::string_view what) {
  throw TFRecordError(
      fmt::format(
          "TFRecordDataset: {}: record {} at byte {}: {}; the file is damaged (re-create or "
          "re-copy it), or set on_sample_error = kSkip to skip bad records",
          source, record, offset, what),
      std::string(source), offset);
}

std::span<const std::byte> tfrecord_data(std::span<const std::byte> bytes, std::uint64_t offset,
                                         bool verify_crc, std::string_view source,
                                         std::size_t record, std::uint64_t base) {
  if (offset > bytes.size()) {
    throw_tfrecord_error(
        source, base + offset, record,
        fmt::format("the offset is past the end of the {}-byte file", bytes.size()));
  }
  const auto rest = bytes.subspan(static_cast<std::size_t>(offset));
  const FrameCheck check = check_tfrecord_frame(rest, verify_crc, true);
  if (check.status != FrameStatus::kOk) {
    throw_tfrecord_error(source, base + offset, record, describe_frame(check, rest.size()));
  }
  return rest.subspan(kTFRecordHeaderBytes, static_cast<std::size_t>(check.length));
}

TFRecordStream::TFRecordStream(std::unique_ptr<StreamSource> source, std::string name,
                               bool verify_crc, std::uint64_t offset, std::size_t record,
                               std::size_t max_record_bytes)
    : source_(std::move(source)),
      name_(std::move(name)),
      verify_crc_(verify_crc),
      max_record_bytes_(max_record_bytes),
      offset_(offset),
      first_record_(record) {}
TFRecordStream::~TFRecordStream() = default;
TFRecordStream::TFRecordStream(TFRecordStream&&) noexcept = default;
TFRecordStream& TFRecordStream::operator=(TFRecordStream&&) noexcept = default;

std::span<const std::byte> TFRecordStream::buffered() const noexcept {
  return {buffer_.data() + begin_, end_ - begin_};
}

void TFRecordStream::consume(std::size_t n) noexcept {
  begin_ += n;
  offset_ += n;
}

void TFRecordStream::finish() noexcept {
  offset_ += end_ - begin_;
  begin_ = end_ = 0;
  eof_ = true;
  source_.reset();
}

bool TFRecordStream::fill(std::size_t need) {
  constexpr std::size_t kRead = std::size_t{1} << 16;
  while (end_ - begin_ < need) {
    if (eof_) return false;
    if (begin_ > 0 && buffer_.size() - end_ < kRead) {  // move what is left to the front
      std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    // Grow only as data arrives, so a lying length cannot allocate more than the stream holds.
    if (buffer_.size() - end_ < kRead) buffer_.resize(std::max(buffer_.size() * 2, end_ + kRead));
    std::size_t got = 0;
    try {
      got = source_->read(std::span<std::byte>(buffer_).subspan(end_));
    } catch (...) {
      // The records already buffered are still read; the partial one after them is dropped
      // without a second error.
      eof_ = true;
      source_failed_ = true;
      source_.reset();
      throw;
    }
    if (got == 0) {
      eof_ = true;
      source_.reset();
    }
    end_ += got;
  }
  return true;
}

void TFRecordStream::fail(std::uint64_t at, const std::string& what) {
  ++bad_;
  throw_tfrecord_error(name_, at, next_record() - 1, what);
}

std::optional<std::span<const std::byte>> TFRecordStream::next() {
  if (!fill(kTFRecordHeaderBytes)) {
    if (end_ == begin_ || source_failed_) {
      finish();
      return std::nullopt;
    }
    const std::uint64_t at = offset_;
    const std::size_t left = end_ - begin_;
    finish();
    fail(at, describe_frame({FrameStatus::kTruncated}, left));
  }
  FrameCheck check = check_tfrecord_frame(buffered(), verify_crc_, false);
  if (check.status == FrameStatus::kTruncated && check.length <= max_record_bytes_ &&
      fill(static_cast<std::size_t>(check.length) + kTFRecordOverhead)) {
    check = check_tfrecord_frame(buffered(), verify_crc_, true);
  } else if (check.status == FrameStatus::kTruncated && check.length <= max_record_bytes_) {
    if (source_failed_) {
      finish();
      return std::nullopt;
    }
    const std::uint64_t at = offset_;
    const std::size_t left = end_ - begin_;
    finish();
    fail(at, describe_frame(check, left));
  } else if (check.status == FrameStatus::kOk) {
    check = check_tfrecord_frame(buffered(), verify_crc_, true);
  }
  if (check.status == FrameStatus::kOk) {
    const auto data =
        buffered().subspan(kTFRecordHeaderBytes, static_cast<std::size_t>(check.length));
    consume(data.size() + kTFRecordOverhead);
    ++records_;
    return data;
  }
  const std::uint64_t at = offset_;
  if (check.status == FrameStatus::kBadDataCrc) {
    consume(static_cast<std::size_t>(check.length) + kTFRecordOverhead);
    fail(at, describe_frame(check, 0));
  }
  // A corrupt header (or a length past the limit): scan for the next frame that checks out.
  std::string what = check.status == FrameStatus::kBadLengthCrc
                         ? describe_frame(check, 0)
                         : fmt::format(
                               "corrupt record header: a length of {} bytes, more than "
                               "the {}-byte limit for a streamed record",
                               check.length, max_record_bytes_);
  if (!verify_crc_) {
    finish();
    fail(at, what + "; without CRC checks the rest of the stream cannot be resynchronised");
  }
  for (;;) {
    consume(1);
    if (!fill(kTFRecordHeaderBytes)) {
      finish();
      fail(at, what + "; no valid record follows it");
    }
    const FrameCheck probe = check_tfrecord_frame(buffered(), true, false);
    if (probe.status == FrameStatus::kBadLengthCrc || probe.length > max_record_bytes_) continue;
    if (!fill(static_cast<std::size_t>(probe.length) + kTFRecordOverhead)) continue;
    if (check_tfrecord_frame(buffered(), true, true).status == FrameStatus::kOk) break;
  }
  fail(at, fmt::format("{}; skipped {} bytes to the next valid record", what, offset_ - at));
}

void append_tfrecord(std::vector<std::byte>& out, std::span<const std::byte> data) {
  const std::size_t at = out.size();
  out.resize(at + data.size() + kTFRecordOverhead);
  std::byte* p = out.data() + at;
  store_le(p, data.size(), 8);
  store_le(p + 8, mask_crc32c(crc32c({p, 8})), 4);
  if (!data.empty()) std::memcpy(p + kTFRecordHeaderBytes, data.data(), data.size());
  store_le(p + kTFRecordHeaderBytes + data.size(), mask_crc32c(crc32c(data)), 4);
}

}  // namespace stoker::detail
