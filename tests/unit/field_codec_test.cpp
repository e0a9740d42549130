// ipc/field_codec.hpp: the table of named tensors shared by the batch slot, the CachedDataset
// entry and the pinned copy. Round trips (dtypes, 0-dim scalars, empty tensors, Shape::kMaxDims
// dimensions, long and empty names, tables after and before their fields), the byte layout the
// header documents, every rejection of read_field_table() with its text, and place_fields()'s
// alignment.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "ipc/field_codec.hpp"
#include "support/error_message.hpp"

using namespace stoker;
using namespace stoker::detail;
using stoker::test::message_of;

namespace {

// A table written byte by byte from the layout in field_codec.hpp, independently of
// write_field_table(), so malformed tables can be made and the writer's layout checked.
struct RawRecord {
  std::uint64_t offset = 0;
  std::uint64_t nbytes = 0;
  std::uint32_t name_length = 0;
  std::uint8_t dtype = 0;
  std::uint8_t ndim = 0;
  std::vector<std::int64_t> dims;  // written as given, whatever ndim says
  std::string name;                // written as given, padded to 8
};

class RawTable {
 public:
  explicit RawTable(std::uint32_t num_fields) {
    put(num_fields);
    put(std::uint32_t{0});
  }
  RawTable& add(const RawRecord& r) {
    put(r.offset);
    put(r.nbytes);
    put(r.name_length);
    put(r.dtype);
    put(r.ndim);
    put(std::uint16_t{0});
    for (const std::int64_t d : r.dims) put(d);
    for (const char c : r.name) bytes_.push_back(static_cast<std::byte>(c));
    while (bytes_.size() % 8 != 0) bytes_.push_back(std::byte{0});
    return *this;
  }
  RawTable& pad(std::size_t n) {
    bytes_.resize(bytes_.size() + n);
    return *this;
  }
  const std::byte* data() const noexcept { return bytes_.data(); }
  std::size_t size() const noexcept { return bytes_.size(); }
  std::vector<std::byte>& bytes() noexcept { return bytes_; }

 private:
  template <class T>
  void put(T value) {
    const std::size_t at = bytes_.size();
    bytes_.resize(at + sizeof value);
    std::memcpy(bytes_.data() + at, &value, sizeof value);
  }
  std::vector<std::byte> bytes_;
};

RawRecord record(std::string name, DType dtype, std::vector<std::int64_t> dims,
                 std::uint64_t offset, std::uint64_t nbytes) {
  RawRecord r;
  r.offset = offset;
  r.nbytes = nbytes;
  r.name_length = static_cast<std::uint32_t>(name.size());
  r.dtype = static_cast<std::uint8_t>(dtype);
  r.ndim = static_cast<std::uint8_t>(dims.size());
  r.dims = std::move(dims);
  r.name = std::move(name);
  return r;
}

// A base of `capacity` bytes that read_field_table()'s views keep alive.
struct Base {
  std::shared_ptr<std::vector<std::byte>> storage;
  explicit Base(std::size_t capacity)
      : storage(std::make_shared<std::vector<std::byte>>(capacity)) {}
  std::byte* data() const { return storage->data(); }
  std::size_t size() const { return storage->size(); }
};

std::vector<Field> read(const RawTable& table, const Base& base) {
  return read_field_table(table.data(), table.size(), base.data(), base.size(), base.storage);
}

std::string rejection(const RawTable& table, std::size_t capacity = 4096) {
  const Base base(capacity);
  return message_of<FieldTableError>([&] { (void)read(table, base); });
}

// A tensor whose bytes are a pattern depending on `seed`, so a wrong offset shows.
Tensor patterned(DType dtype, const Shape& shape, unsigned seed) {
  Tensor t = Tensor::empty(dtype, shape);
  for (std::size_t i = 0; i < t.nbytes(); ++i) {
    t.raw_data()[i] = static_cast<std::byte>((i * 31 + seed * 7 + 1) & 0xff);
  }
  return t;
}

std::vector<Field> sample_fields() {
  std::vector<Field> fields;
  fields.push_back(Field{"image", patterned(DType::kUInt8, Shape{2, 3, 5}, 1)});
  fields.push_back(Field{"label", patterned(DType::kInt64, Shape{}, 2)});  // 0-dim scalar
  fields.push_back(Field{"empty", patterned(DType::kFloat32, Shape{0, 7}, 3)});
  fields.push_back(
      Field{"eight_dims", patterned(DType::kFloat64, Shape{1, 2, 1, 2, 1, 2, 1, 3}, 4)});
  static_assert(Shape::kMaxDims == 8);
  fields.push_back(Field{std::string(300, 'n') + "_long", patterned(DType::kInt16, Shape{3}, 5)});
  fields.push_back(Field{"", patterned(DType::kBool, Shape{4}, 6)});
  fields.push_back(Field{"half", patterned(DType::kFloat16, Shape{3, 1}, 7)});
  fields.push_back(Field{"bf16", patterned(DType::kBFloat16, Shape{5}, 8)});
  fields.push_back(Field{"u32", patterned(DType::kUInt32, Shape{2, 2}, 9)});
  return fields;
}

std::vector<FieldRecord> records_of(const std::vector<Field>& fields,
                                    const std::vector<std::uint64_t>& offsets) {
  std::vector<FieldRecord> records;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto& [name, tensor] = fields[i];
    records.push_back(
        FieldRecord{name, tensor.dtype(), tensor.shape().dims(), offsets[i], tensor.nbytes()});
  }
  return records;
}

void check_same(const std::vector<Field>& got, const std::vector<Field>& want, const Base& base,
                const std::vector<std::uint64_t>& offsets) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const auto& [name, tensor] = got[i];
    const auto& [want_name, want_tensor] = want[i];
    INFO("field " << i << " '" << want_name << "'");
    CHECK(name == want_name);
    CHECK(tensor.dtype() == want_tensor.dtype());
    CHECK(tensor.shape() == want_tensor.shape());
    CHECK(tensor.nbytes() == want_tensor.nbytes());
    CHECK(tensor.is_view());
    CHECK(tensor.raw_data() == base.data() + offsets[i]);
    CHECK(std::memcmp(tensor.raw_data(), want_tensor.raw_data(), want_tensor.nbytes()) == 0);
  }
}

}  // namespace

TEST_CASE("field codec: write_field_table writes the layout field_codec.hpp documents",
          "[field_codec]") {
  const std::vector<std::int64_t> dims{2, 3};
  const std::vector<FieldRecord> records{
      {"abc", DType::kInt32, dims, 64, 24},
      {"scalar_field", DType::kFloat64, {}, 128, 8},
  };
  std::vector<std::byte> written(field_table_bytes(records));
  write_field_table(written.data(), records);

  RawTable raw(2);
  raw.add(record("abc", DType::kInt32, {2, 3}, 64, 24));
  raw.add(record("scalar_field", DType::kFloat64, {}, 128, 8));
  REQUIRE(written.size() == raw.size());
  // 8 (head) + 24 + 2 x 8 + "abc" padded to 8, + 24 + "scalar_field" padded to 16.
  CHECK(written.size() == 8 + 24 + 16 + 8 + 24 + 16);
  CHECK(written == raw.bytes());
}

TEST_CASE("field codec: a round trip through a table after the fields (the batch slot)",
          "[field_codec]") {
  const std::vector<Field> fields = sample_fields();
  std::vector<std::uint64_t> offsets;
  const std::size_t start = 200;  // after a slot header and indices, not aligned
  const std::size_t end = place_fields(start, fields, offsets);
  const std::vector<FieldRecord> records = records_of(fields, offsets);
  const std::size_t table_at = (end + 7) / 8 * 8;
  const std::size_t table_bytes = field_table_bytes(records);
  Base base(table_at + table_bytes);
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto& [name, tensor] = fields[i];
    if (tensor.nbytes() > 0)
      std::memcpy(base.data() + offsets[i], tensor.raw_data(), tensor.nbytes());
  }
  write_field_table(base.data() + table_at, records);

  std::vector<Field> got =
      read_field_table(base.data() + table_at, table_bytes, base.data(), base.size(), base.storage);
  check_same(got, fields, base, offsets);

  // The views keep the base alive after every other owner let it go.
  const std::vector<std::byte> copy(*base.storage);
  base.storage.reset();
  const auto& [name, image] = got[0];
  CHECK(name == "image");
  CHECK(std::memcmp(image.raw_data(), copy.data() + offsets[0], image.nbytes()) == 0);
}

TEST_CASE("field codec: a round trip through a table before the fields (the cache entry)",
          "[field_codec]") {
  const std::vector<Field> fields = sample_fields();
  // The table's size does not depend on the offsets: size it first, then place after it.
  std::vector<std::uint64_t> offsets(fields.size(), 0);
  const std::size_t table_bytes = field_table_bytes(records_of(fields, offsets));
  offsets.clear();
  const std::size_t end = place_fields(table_bytes, fields, offsets);
  const std::vector<FieldRecord> records = records_of(fields, offsets);
  REQUIRE(field_table_bytes(records) == table_bytes);
  Base base(end);
  write_field_table(base.data(), records);
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto& [name, tensor] = fields[i];
    if (tensor.nbytes() > 0)
      std::memcpy(base.data() + offsets[i], tensor.raw_data(), tensor.nbytes());
  }
  check_same(read_field_table(base.data(), table_bytes, base.data(), base.size(), base.storage),
             fields, base, offsets);
}

TEST_CASE("field codec: no fields, and a field that ends exactly at the capacity",
          "[field_codec]") {
  std::vector<std::byte> empty_table(field_table_bytes({}));
  CHECK(empty_table.size() == 8);
  write_field_table(empty_table.data(), {});
  const Base base(64);
  CHECK(read_field_table(empty_table.data(), empty_table.size(), base.data(), base.size(),
                         base.storage)
            .empty());

  RawTable t(1);
  t.add(record("x", DType::kInt32, {16}, 0, 64));
  const std::vector<Field> got = read(t, base);
  REQUIRE(got.size() == 1);
  const auto& [name, tensor] = got[0];
  CHECK(name == "x");
  CHECK(tensor.numel() == 16);
  // An empty field may sit at the very end.
  RawTable at_end(1);
  at_end.add(record("e", DType::kUInt8, {0}, 64, 0));
  CHECK(read(at_end, base).size() == 1);
}

TEST_CASE("field codec: a table shorter than its head", "[field_codec]") {
  RawTable t(0);
  t.bytes().resize(7);
  CHECK(rejection(t) == "a table of 7 bytes");
  t.bytes().clear();
  CHECK(rejection(t) == "a table of 0 bytes");
}

TEST_CASE("field codec: a field count beyond the table's bytes", "[field_codec]") {
  RawTable t(3);  // three fields need at least 3 x 24 bytes after the head
  t.add(record("a", DType::kUInt8, {}, 0, 1));
  t.add(record("b", DType::kUInt8, {}, 0, 1));
  CHECK(t.size() == 8 + 2 * 32);
  CHECK(rejection(t) == "3 fields in 72 bytes");
  RawTable huge(0xffffffffU);
  CHECK(rejection(huge) == "4294967295 fields in 8 bytes");
}

TEST_CASE("field codec: a truncated record", "[field_codec]") {
  SECTION("the second record's head is cut off") {
    // Two record heads fit the count check, but the first record's dimensions use the room.
    RawTable t(2);
    t.add(record("", DType::kUInt8, {1}, 0, 1));  // 24 + 8 bytes
    t.pad(16);                                    // 8 + 32 + 16 = 56 >= 8 + 2 x 24
    CHECK(rejection(t) == "truncated field record");
  }
  SECTION("the dimensions are cut off") {
    RawTable t(1);
    RawRecord r = record("", DType::kUInt8, {2, 2}, 0, 4);
    r.ndim = 3;  // says three, two follow
    t.add(r);
    CHECK(rejection(t) == "truncated field record");
  }
  SECTION("the name is cut off") {
    RawTable t(1);
    RawRecord r = record("abcdefgh", DType::kUInt8, {}, 0, 1);
    r.name_length = 9;  // padded to 16, 8 follow
    t.add(r);
    CHECK(rejection(t) == "truncated field record");
  }
  SECTION("the name's padding is cut off") {
    RawTable t(1);
    t.add(record("abcdefghi", DType::kUInt8, {}, 0, 1));  // 9 bytes, padded to 16
    t.bytes().pop_back();                                 // the name fits; its padding does not
    CHECK(rejection(t) == "truncated field record");
  }
  SECTION("a name length past anything") {
    RawTable t(1);
    RawRecord r = record("abc", DType::kUInt8, {}, 0, 1);
    r.name_length = 0xffffffffU;
    t.add(r);
    CHECK(rejection(t) == "truncated field record");
  }
}

TEST_CASE("field codec: a dtype outside the enum", "[field_codec]") {
  RawTable t(1);
  RawRecord r = record("x", DType::kUInt8, {1}, 0, 1);
  r.dtype = static_cast<std::uint8_t>(kNumDTypes);
  t.add(r);
  CHECK(rejection(t) == "dtype 13");
  RawTable t2(1);
  r.dtype = 200;
  t2.add(r);
  CHECK(rejection(t2) == "dtype 200");
}

TEST_CASE("field codec: more than Shape::kMaxDims dimensions", "[field_codec]") {
  RawTable t(1);
  t.add(record("x", DType::kUInt8, {1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, 1));
  CHECK(rejection(t) == "9 dimensions");
  RawTable t2(1);
  RawRecord r = record("x", DType::kUInt8, {}, 0, 1);
  r.ndim = 255;
  t2.add(r);
  CHECK(rejection(t2) == "255 dimensions");
}

TEST_CASE("field codec: a negative dimension", "[field_codec]") {
  RawTable t(1);
  t.add(record("pixels", DType::kUInt8, {4, -1}, 0, 4));
  CHECK(rejection(t) == "negative dimension in field 'pixels'");
}

TEST_CASE("field codec: an element count that overflows", "[field_codec]") {
  SECTION("the elements alone") {
    RawTable t(1);
    t.add(record("big", DType::kUInt8, {std::int64_t{1} << 32, std::int64_t{1} << 32}, 0, 0));
    CHECK(rejection(t) == "field 'big' has more elements than memory");
  }
  SECTION("the elements times the element size") {
    RawTable t(1);
    t.add(record("f", DType::kFloat64, {std::int64_t{1} << 62}, 0, 8));
    CHECK(rejection(t) == "field 'f' has more elements than memory");
  }
  SECTION("a prefix that overflows before a zero dimension") {
    // 0 bytes in all, but Tensor::view refuses the shape: found by field_table_fuzz, when the
    // reader multiplied the elements first and the element size last (512 x 1.4e16 fits in 64
    // bits, 4 x 512 x 1.4e16 does not).
    RawTable t(1);
    t.add(record("z", DType::kUInt32, {512, 14073748835532800, 0, 34359738368}, 0, 0));
    CHECK(rejection(t) == "field 'z' has more elements than memory");
  }
  SECTION("a zero dimension after dimensions that fit is an empty field") {
    RawTable t(1);
    t.add(record("e", DType::kUInt32, {512, 1 << 20, 0}, 0, 0));
    const Base base(64);
    const std::vector<Field> got = read(t, base);
    REQUIRE(got.size() == 1);
    const auto& [name, tensor] = got[0];
    CHECK(tensor.numel() == 0);
    CHECK(tensor.shape() == Shape{512, 1 << 20, 0});
  }
}

TEST_CASE("field codec: a field outside the base's capacity", "[field_codec]") {
  SECTION("offset past the end") {
    RawTable t(1);
    t.add(record("a", DType::kUInt8, {0}, 4097, 0));
    CHECK(rejection(t) == "field 'a' at 4097 of 0 bytes");
  }
  SECTION("bytes past the end") {
    RawTable t(1);
    t.add(record("a", DType::kUInt8, {64}, 4096 - 63, 64));
    CHECK(rejection(t) == "field 'a' at 4033 of 64 bytes");
  }
  SECTION("offset + nbytes wraps around") {
    RawTable t(1);
    t.add(record("a", DType::kUInt8, {16}, 16, ~std::uint64_t{0} - 8));
    CHECK(rejection(t) == "field 'a' at 16 of 18446744073709551607 bytes");
  }
}

TEST_CASE("field codec: nbytes that does not match the shape", "[field_codec]") {
  SECTION("too few") {
    RawTable t(1);
    t.add(record("f", DType::kFloat32, {2, 3}, 64, 23));
    CHECK(rejection(t) == "field 'f' at 64 of 23 bytes");
  }
  SECTION("too many") {
    RawTable t(1);
    t.add(record("f", DType::kFloat32, {2, 3}, 64, 25));
    CHECK(rejection(t) == "field 'f' at 64 of 25 bytes");
  }
  SECTION("a later field is checked as well as the first") {
    RawTable t(2);
    t.add(record("ok", DType::kUInt8, {8}, 0, 8));
    t.add(record("bad", DType::kInt64, {}, 64, 4));
    CHECK(rejection(t) == "field 'bad' at 64 of 4 bytes");
  }
}

TEST_CASE("field codec: place_fields aligns each field to kFieldAlignment", "[field_codec]") {
  STATIC_REQUIRE(kFieldAlignment == 64);
  std::vector<Field> fields;
  fields.push_back(Field{"a", Tensor::empty(DType::kUInt8, Shape{1})});
  fields.push_back(Field{"b", Tensor::empty(DType::kUInt8, Shape{64})});
  fields.push_back(Field{"c", Tensor::empty(DType::kUInt8, Shape{0})});
  fields.push_back(Field{"d", Tensor::empty(DType::kInt32, Shape{17})});  // 68 bytes
  std::vector<std::uint64_t> offsets{12345};  // appended to, not replaced
  const std::size_t end = place_fields(3, fields, offsets);
  CHECK(offsets == std::vector<std::uint64_t>{12345, 64, 128, 192, 192});
  CHECK(end == 192 + 68);
  for (std::size_t i = 1; i < offsets.size(); ++i) CHECK(offsets[i] % kFieldAlignment == 0);

  std::vector<std::uint64_t> aligned;
  CHECK(place_fields(128, fields, aligned) == 256 + 68);
  CHECK(aligned == std::vector<std::uint64_t>{128, 192, 256, 256});  // an aligned start is kept
  std::vector<std::uint64_t> none;
  CHECK(place_fields(5, {}, none) == 5);
  CHECK(none.empty());
}
