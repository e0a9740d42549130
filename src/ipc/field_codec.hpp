// The field codec: how a list of named tensors is laid out in shared memory so that another
// process can read it back as zero-copy views. One codec serves the batch slot (fields, then the
// table after them), the CachedDataset entry (the table, then the fields) and the pinned staging
// copy (fields only, placed the same way).
//
// Fields are placed kFieldAlignment-aligned. The field table: u32 field count, u32 0, then per
// field {u64 offset, u64 nbytes, u32 name length, u8 dtype, u8 ndim, u16 0, i64 dims[ndim], the
// name's bytes padded to 8}; offsets are from a base the writer and the reader agree on (the slot
// start, the entry start). The reader checks every length and offset against the bytes it was
// given, since a worker's bug can write over a slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/sample.hpp"
#include "stoker/tensor.hpp"

namespace stoker::detail {

inline constexpr std::size_t kFieldAlignment = 64;

// One field as the table describes it.
struct FieldRecord {
  std::string_view name;
  DType dtype;
  std::span<const std::int64_t> dims;
  std::uint64_t offset;  // from the base
  std::uint64_t nbytes;
};

// Bytes of the table for fields with these name lengths and dimension counts.
std::size_t field_table_bytes(std::span<const FieldRecord> fields) noexcept;
// Writes the table of `fields` at `out` (field_table_bytes(fields) of room). Either process.
void write_field_table(std::byte* out, std::span<const FieldRecord> fields) noexcept;

// A table that does not describe valid fields: what is wrong, for the caller's message.
class FieldTableError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The fields described by the table in [table, table + table_bytes), as views into
// [base, base + capacity) kept alive by `keeper`. Throws FieldTableError when the table is
// truncated, names an invalid dtype or more than Shape::kMaxDims dimensions, a negative
// dimension, or a field outside the base's bytes or of the wrong size for its shape.
std::vector<Field> read_field_table(const std::byte* table, std::size_t table_bytes,
                                    std::byte* base, std::size_t capacity,
                                    const std::shared_ptr<const void>& keeper);

// Where the payload of each of `fields` goes when packed from `start`, each kFieldAlignment-
// aligned: their offsets (appended to `offsets`), and the end of the last.
std::size_t place_fields(std::size_t start, std::span<const Field> fields,
                         std::vector<std::uint64_t>& offsets);

}  // namespace stoker::detail
