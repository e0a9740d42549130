#include "ipc/field_codec.hpp"

#include <cstring>

#include <fmt/format.h>

namespace stoker::detail {
namespace {

struct TableHead {
  std::uint32_t num_fields;
  std::uint32_t reserved;
};
struct RecordHead {
  std::uint64_t offset;
  std::uint64_t nbytes;
  std::uint32_t name_length;
  std::uint8_t dtype;
  std::uint8_t ndim;
  std::uint16_t reserved;
};
static_assert(sizeof(TableHead) == 8 && sizeof(RecordHead) == 24);

constexpr std::size_t padded(std::size_t n) noexcept { return (n + 7) / 8 * 8; }

std::size_t record_bytes(std::size_t ndim, std::size_t name_length) noexcept {
  return sizeof(RecordHead) + ndim * sizeof(std::int64_t) + padded(name_length);
}

}  // namespace

std::size_t field_table_bytes(std::span<const FieldRecord> fields) noexcept {
  std::size_t bytes = sizeof(TableHead);
  for (const FieldRecord& f : fields) bytes += record_bytes(f.dims.size(), f.name.size());
  return bytes;
}

void write_field_table(std::byte* out, std::span<const FieldRecord> fields) noexcept {
  const TableHead head{static_cast<std::uint32_t>(fields.size()), 0};
  std::memcpy(out, &head, sizeof head);
  out += sizeof head;
  for (const FieldRecord& f : fields) {
    const RecordHead record{f.offset,
                            f.nbytes,
                            static_cast<std::uint32_t>(f.name.size()),
                            static_cast<std::uint8_t>(f.dtype),
                            static_cast<std::uint8_t>(f.dims.size()),
                            0};
    std::memcpy(out, &record, sizeof record);
    out += sizeof record;
    if (!f.dims.empty()) std::memcpy(out, f.dims.data(), f.dims.size_bytes());
    out += f.dims.size_bytes();
    if (!f.name.empty()) std::memcpy(out, f.name.data(), f.name.size());
    std::memset(out + f.name.size(), 0, padded(f.name.size()) - f.name.size());
    out += padded(f.name.size());
  }
}

std::vector<Field> read_field_table(const std::byte* table, std::size_t table_bytes,
                                    std::byte* base, std::size_t capacity,
                                    const std::shared_ptr<const void>& keeper) {
  if (table_bytes < sizeof(TableHead)) {
    throw FieldTableError(fmt::format("a table of {} bytes", table_bytes));
  }
  const std::byte* in = table;
  const std::byte* const end = table + table_bytes;
  TableHead head;
  std::memcpy(&head, in, sizeof head);
  in += sizeof head;
  // Each field needs at least a record head: a count past that is not believed.
  if (head.num_fields > (table_bytes - sizeof head) / sizeof(RecordHead)) {
    throw FieldTableError(fmt::format("{} fields in {} bytes", head.num_fields, table_bytes));
  }
  std::vector<Field> fields;
  fields.reserve(head.num_fields);
  for (std::uint32_t i = 0; i < head.num_fields; ++i) {
    RecordHead record;
    if (static_cast<std::size_t>(end - in) < sizeof record) {
      throw FieldTableError("truncated field record");
    }
    std::memcpy(&record, in, sizeof record);
    in += sizeof record;
    if (!is_valid_dtype(record.dtype)) throw FieldTableError(fmt::format("dtype {}", record.dtype));
    if (record.ndim > Shape::kMaxDims) {
      throw FieldTableError(fmt::format("{} dimensions", record.ndim));
    }
    const std::size_t rest = static_cast<std::size_t>(end - in);
    if (record.name_length > rest ||
        rest < record_bytes(record.ndim, record.name_length) - sizeof record) {
      throw FieldTableError("truncated field record");
    }
    std::int64_t dims[Shape::kMaxDims];
    std::memcpy(dims, in, record.ndim * sizeof(std::int64_t));
    in += record.ndim * sizeof(std::int64_t);
    std::string name(reinterpret_cast<const char*>(in), record.name_length);
    in += padded(record.name_length);
    const auto dtype = static_cast<DType>(record.dtype);
    // The bytes, multiplied up in the order Tensor::view checks them (element size first), so a
    // shape refused there ([2^40, 2^40, 0] is 0 bytes, but its prefix overflows) is refused here.
    std::size_t expected = dtype_size(dtype);
    for (std::size_t d = 0; d < record.ndim; ++d) {
      if (dims[d] < 0) throw FieldTableError(fmt::format("negative dimension in field '{}'", name));
      if (__builtin_mul_overflow(expected, static_cast<std::size_t>(dims[d]), &expected)) {
        throw FieldTableError(fmt::format("field '{}' has more elements than memory", name));
      }
    }
    if (record.offset > capacity || record.nbytes > capacity - record.offset ||
        record.nbytes != expected) {
      throw FieldTableError(
          fmt::format("field '{}' at {} of {} bytes", name, record.offset, record.nbytes));
    }
    const Shape shape(std::span<const std::int64_t>(dims, record.ndim));
    fields.push_back(Field{std::move(name), Tensor::view(dtype, shape, base + record.offset,
                                                         std::shared_ptr<const void>(keeper))});
  }
  return fields;
}

std::size_t place_fields(std::size_t start, std::span<const Field> fields,
                         std::vector<std::uint64_t>& offsets) {
  std::size_t at = start;
  for (const Field& field : fields) {
    at = (at + kFieldAlignment - 1) / kFieldAlignment * kFieldAlignment;
    offsets.push_back(at);
    at += field.tensor.nbytes();
  }
  return at;
}

}  // namespace stoker::detail
