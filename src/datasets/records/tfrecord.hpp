// TFRecord framing, the pure part: each record is
//   uint64 length (little-endian) | uint32 masked CRC32C of those 8 bytes |
//   `length` bytes of data        | uint32 masked CRC32C of the data
// Functions over bytes already in memory (a mapped file, or a stream's window): checking one
// frame, indexing a whole file (offsets of its records, with resynchronisation past a corrupt
// header), and reading one record's data. Every length is checked against the buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace stoker::detail {

class StreamSource;

inline constexpr std::size_t kTFRecordHeaderBytes = 12;  // length + its masked CRC
inline constexpr std::size_t kTFRecordFooterBytes = 4;   // the data's masked CRC
inline constexpr std::size_t kTFRecordOverhead = kTFRecordHeaderBytes + kTFRecordFooterBytes;

enum class FrameStatus : std::uint8_t {
  kOk,
  kTruncated,     // fewer bytes than the header, or than the record it announces
  kBadLengthCrc,  // the length's checksum does not match (a corrupt header)
  kBadDataCrc,    // the data's checksum does not match
};

struct FrameCheck {
  FrameStatus status = FrameStatus::kOk;
  std::uint64_t length = 0;        // the data length the header announces (when it was read)
  std::uint32_t stored_crc = 0;    // for a bad CRC: the masked CRC in the file
  std::uint32_t computed_crc = 0;  // and the masked CRC of the bytes there
};

// Checks the record at the start of `bytes` (the rest of the file, or what a stream holds).
// With `verify_crc` the length's CRC is checked, and with `check_data` also the data's. Never
// reads outside `bytes`.
FrameCheck check_tfrecord_frame(std::span<const std::byte> bytes, bool verify_crc,
                                bool check_data) noexcept;

// "corrupt record header: ..." — what `check` found, for an error message; "" for kOk.
std::string describe_frame(const FrameCheck& check, std::uint64_t available);

// A file's records. entries[i] is the byte offset of record i's header, or, with kBadEntry set,
// the number of a BadRegion: a stretch of bytes no record could be read from (an entry there
// stands for one unreadable record, so a loader can skip and count it).
struct TFRecordIndex {
  static constexpr std::uint64_t kBadEntry = std::uint64_t{1} << 63;
  struct BadRegion {
    std::uint64_t offset = 0;  // where the bad frame starts
    std::uint64_t resume = 0;  // where the next good record starts (the file's size if none)
    FrameCheck check;          // what was wrong at `offset`
  };
  std::vector<std::uint64_t> entries;
  std::vector<BadRegion> bad_regions;
  std::size_t good_records() const noexcept { return entries.size() - bad_regions.size(); }
};

// Walks the frames of a whole file. A frame that cannot be read (a bad length CRC, or a length
// running past the end) starts a bad region; the walk resumes at the next byte where a frame
// with good length and data CRCs fits, found by scanning. With `verify_crc` false only the
// lengths are checked (a corrupt header that stays within the file goes unnoticed) and a bad
// region runs to the end of the file. Never throws for bad bytes; throws std::bad_alloc.
TFRecordIndex index_tfrecords(std::span<const std::byte> file, bool verify_crc);

// The first offset at or after `from` where a frame with good checksums fits in `bytes`, or
// bytes.size() when there is none (always, with `verify_crc` false: nothing tells a frame).
std::size_t find_next_frame(std::span<const std::byte> bytes, std::size_t from, bool verify_crc);

// The data of the record whose header is at `offset` of `bytes`; checks its bounds (always) and
// its data CRC (with `verify_crc`). `bytes` starts at byte `base` of the file (a read window).
// Throws TFRecordError naming `source`, the record's offset in the file and `record` (its
// number in the file) when either is wrong.
std::span<const std::byte> tfrecord_data(std::span<const std::byte> bytes, std::uint64_t offset,
                                         bool verify_crc, std::string_view source,
                                         std::size_t record, std::uint64_t base = 0);

// Throws TFRecordError: "TFRecordDataset: <source>: record <record> at byte <offset>: <what>;
// <advice>".
[[noreturn]] void throw_tfrecord_error(std::string_view source, std::uint64_t offset,
                                       std::size_t record, std::string_view what);

// Records read one after another from a StreamSource (a pipe, a gzip stream): what streaming
// reads when there is no mapping to index. One owner, one process.
class TFRecordStream {
 public:
  // `name` is used in messages; `offset` and `record` are where the source starts in the file
  // (its byte offset and record number). Records longer than `max_record_bytes` are treated
  // as corrupt headers (a stream cannot be indexed, so a length is only believed up to this).
  TFRecordStream(std::unique_ptr<StreamSource> source, std::string name, bool verify_crc,
                 std::uint64_t offset = 0, std::size_t record = 0,
                 std::size_t max_record_bytes = std::size_t{1} << 31);
  ~TFRecordStream();
  TFRecordStream(TFRecordStream&&) noexcept;
  TFRecordStream& operator=(TFRecordStream&&) noexcept;

  // The next record's data, valid until the next call; nullopt at the end of the stream.
  // Throws TFRecordError for a bad record, after which the stream stands past it, so the next
  // call goes on: after a bad data CRC at the following record, after a corrupt header at the
  // next frame with good checksums (found by scanning), after a truncated record or corrupt
  // compressed data at the end. Throws stoker::Error for a read error (the stream then ends).
  std::optional<std::span<const std::byte>> next();

  // Records returned so far, and the bad ones thrown for (from the start of the source).
  std::size_t records() const noexcept { return records_; }
  std::size_t bad_records() const noexcept { return bad_; }
  // The number in the file of the next record (good or bad).
  std::size_t next_record() const noexcept { return first_record_ + records_ + bad_; }
  // The offset in the (decompressed) stream of the next frame.
  std::uint64_t offset() const noexcept { return offset_; }
  const std::string& name() const noexcept { return name_; }

 private:
  bool fill(std::size_t need);  // false at the end of the stream with fewer bytes buffered
  std::span<const std::byte> buffered() const noexcept;
  void consume(std::size_t n) noexcept;
  void finish() noexcept;
  [[noreturn]] void fail(std::uint64_t at, const std::string& what);

  std::unique_ptr<StreamSource> source_;
  std::string name_;
  bool verify_crc_;
  std::size_t max_record_bytes_;
  std::vector<std::byte> buffer_;
  std::size_t begin_ = 0;  // buffered bytes are buffer_[begin_, end_)
  std::size_t end_ = 0;
  bool eof_ = false;
  bool source_failed_ = false;  // the source threw: what is left buffered is cut short by it
  std::uint64_t offset_ = 0;
  std::size_t first_record_ = 0;
  std::size_t records_ = 0;  // good records returned
  std::size_t bad_ = 0;
};

// Appends one framed record holding `data` to `out` (tests, benchmarks, examples).
void append_tfrecord(std::vector<std::byte>& out, std::span<const std::byte> data);

}  // namespace stoker::detail
