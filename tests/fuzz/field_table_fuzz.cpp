// libFuzzer target for the field-table reader behind every batch slot, CachedDataset entry and
// pinned copy (src/ipc/field_codec.hpp; build with clang: -DSTOKER_BUILD_FUZZ=ON).
//   build/fuzz/tests/fuzz/field_table_fuzz -max_total_time=60
// The input is read twice: as a table inside its own bytes (the cache entry's layout), and, after
// a 2-byte capacity, as a table for a separate base of that capacity. Any table must be rejected
// with FieldTableError or give views that lie inside the base (their bytes are read, so ASan
// sees a view that does not), and writing the fields back must read back the same fields.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "ipc/field_codec.hpp"

namespace {

using stoker::Field;
using stoker::detail::FieldRecord;
using stoker::detail::FieldTableError;

void check(bool ok) {
  if (!ok) std::abort();
}

// The fields as records of the table that would describe them, offsets from `base`.
std::vector<FieldRecord> records_of(const std::vector<Field>& fields, const std::byte* base) {
  std::vector<FieldRecord> records;
  for (const auto& [name, tensor] : fields) {
    records.push_back(FieldRecord{name, tensor.dtype(), tensor.shape().dims(),
                                  static_cast<std::uint64_t>(tensor.raw_data() - base),
                                  tensor.nbytes()});
  }
  return records;
}

void read_table(const std::byte* table, std::size_t table_bytes, std::byte* base,
                std::size_t capacity) {
  const std::shared_ptr<const void> keeper = std::make_shared<int>(0);
  std::vector<Field> fields;
  try {
    fields = stoker::detail::read_field_table(table, table_bytes, base, capacity, keeper);
  } catch (const FieldTableError&) {
    return;
  }
  unsigned sum = 0;
  for (const auto& [name, tensor] : fields) {
    check(tensor.raw_data() >= base && tensor.nbytes() <= capacity &&
          static_cast<std::size_t>(tensor.raw_data() - base) <= capacity - tensor.nbytes());
    check(tensor.nbytes() == tensor.numel() * stoker::dtype_size(tensor.dtype()));
    for (std::size_t i = 0; i < tensor.nbytes(); ++i)
      sum += static_cast<unsigned>(tensor.raw_data()[i]);
  }
  (void)sum;

  // Written back, the table reads back as the same fields.
  const std::vector<FieldRecord> records = records_of(fields, base);
  std::vector<std::byte> rewritten(stoker::detail::field_table_bytes(records));
  check(rewritten.size() <= table_bytes);
  stoker::detail::write_field_table(rewritten.data(), records);
  const std::vector<Field> again =
      stoker::detail::read_field_table(rewritten.data(), rewritten.size(), base, capacity, keeper);
  check(again.size() == fields.size());
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto& [name, tensor] = fields[i];
    const auto& [name2, tensor2] = again[i];
    check(name == name2 && tensor.dtype() == tensor2.dtype() && tensor.shape() == tensor2.shape() &&
          tensor.raw_data() == tensor2.raw_data());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // A copy the views may point into; never empty, so the base is never null.
  std::vector<std::byte> bytes(size + 1);
  if (size > 0) std::memcpy(bytes.data(), data, size);
  read_table(bytes.data(), size, bytes.data(), size);

  if (size >= 2) {
    const std::size_t capacity =
        std::to_integer<std::size_t>(bytes[0]) | std::to_integer<std::size_t>(bytes[1]) << 8;
    std::vector<std::byte> base(capacity + 1);
    read_table(bytes.data() + 2, size - 2, base.data(), capacity);
  }
  return 0;
}
