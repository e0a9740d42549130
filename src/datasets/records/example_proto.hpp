// A reader of serialized tf.train.Example messages, the protobuf wire format for just the four
// message types involved (no libprotobuf): Example{Features features = 1},
// Features{map<string, Feature> feature = 1}, Feature{oneof BytesList bytes_list = 1,
// FloatList float_list = 2, Int64List int64_list = 3}, each list a `repeated value = 1`, packed
// or not. Parsing validates everything once and keeps views into the record's bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "stoker/errors.hpp"

namespace stoker::detail {

// Bytes that are not a valid Example. what() says what and where (byte offset in the record);
// the dataset adds the file and record.
class ExampleFormatError : public Error {
 public:
  using Error::Error;
};

enum class FeatureKind : std::uint8_t { kNone, kBytes, kFloat, kInt64 };
std::string_view feature_kind_name(FeatureKind kind) noexcept;  // "bytes_list", ...

struct ExampleFeature {
  std::string_view name;
  FeatureKind kind = FeatureKind::kNone;  // kNone: a Feature with no list set
  std::uint32_t first_segment = 0;        // its list messages: segments[first, first + count)
  std::uint32_t segment_count = 0;
  std::size_t values = 0;       // number of values in the list
  std::size_t value_bytes = 0;  // bytes_list: the values' total length
};

// One parsed Example. Reuse one object across records: parse() keeps its vectors' capacity.
class ParsedExample {
 public:
  // Parses `record` (the bytes of one TFRecord). Features keep the order in which their names
  // first appear; a name that appears again takes the later value, as protobuf maps do. Views
  // point into `record`. Throws ExampleFormatError for bytes that are not an Example.
  void parse(std::span<const std::byte> record);

  const std::vector<ExampleFeature>& features() const noexcept { return features_; }
  // nullptr when there is no such feature.
  const ExampleFeature* find(std::string_view name) const noexcept;

  // The values of `feature`, which must be of the matching kind; `out` holds feature.values.
  void copy_int64(const ExampleFeature& feature, std::int64_t* out) const noexcept;
  void copy_float(const ExampleFeature& feature, float* out) const noexcept;
  // Appends the bytes values' views to `out`.
  void bytes_values(const ExampleFeature& feature,
                    std::vector<std::span<const std::byte>>& out) const;

 private:
  std::vector<ExampleFeature> features_;
  std::vector<std::span<const std::byte>> segments_;
  std::unordered_map<std::string_view, std::size_t> by_name_;  // used past a few features
};

// A serialized Example of `features` (tests, benchmarks and the example program), written
// in the packed form TensorFlow writes.
struct ExampleValue {
  std::string name;
  FeatureKind kind = FeatureKind::kBytes;
  std::vector<std::string> bytes;
  std::vector<float> floats;
  std::vector<std::int64_t> ints;
};
std::vector<std::byte> serialize_example(const std::vector<ExampleValue>& features);

}  // namespace stoker::detail
