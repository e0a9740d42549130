// Unit tests for include/stoker/collate.hpp: StackCollator and collate_stack, writing into a
// heap-backed BatchBuilder defined here (the loader's builder writes into a shared-memory slot;
// the collate code is the same).
#include "stoker/collate.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/errors.hpp"
#include "stoker/sample.hpp"
#include "stoker/tensor.hpp"

namespace stoker {
namespace {

using Catch::Contains;

constexpr std::byte kUnwritten{0xCD};

// A BatchBuilder over owning heap tensors. alloc() fills each field with kUnwritten, so a test
// can tell which rows the collator wrote.
class HeapBatchBuilder final : public BatchBuilder {
 public:
  explicit HeapBatchBuilder(std::vector<std::size_t> indices, std::uint64_t epoch = 0)
      : indices_(std::move(indices)), epoch_(epoch) {}

  Tensor alloc(std::string_view name, DType dtype, const Shape& shape) override {
    if (name.empty()) throw std::invalid_argument("HeapBatchBuilder::alloc: empty name");
    for (const Field& field : fields_) {
      if (field.name == name) throw std::invalid_argument("HeapBatchBuilder::alloc: repeated");
    }
    Tensor t = Tensor::empty(dtype, shape);
    std::memset(t.raw_data(), static_cast<int>(kUnwritten), t.nbytes());
    fields_.emplace_back(std::string(name), t);
    return t;
  }
  std::span<const std::size_t> indices() const noexcept override { return indices_; }
  std::size_t batch_size() const noexcept override { return indices_.size(); }
  std::uint64_t epoch() const noexcept override { return epoch_; }

  const std::vector<Field>& fields() const { return fields_; }
  const Tensor& operator[](std::string_view name) const {
    const Tensor* t = detail::find_field(fields_, name);
    REQUIRE(t != nullptr);
    return *t;
  }

 private:
  std::vector<std::size_t> indices_;
  std::uint64_t epoch_;
  std::vector<Field> fields_;
};

std::vector<std::string> field_names(const std::vector<Field>& fields) {
  std::vector<std::string> names;
  for (const Field& field : fields) names.push_back(field.name);
  return names;
}

// A [3, 4] float32 tensor whose element j is base + j.
Tensor grid(float base) {
  std::vector<float> values(12);
  for (std::size_t j = 0; j < values.size(); ++j) values[j] = base + static_cast<float>(j);
  return Tensor::from(values, Shape{3, 4});
}

// A sample with "x" = grid(100 * i) and "y" = int64 scalar i.
Sample xy_sample(std::size_t i) {
  Sample s;
  s.set("x", grid(100.0f * static_cast<float>(i)));
  s.set("y", Tensor::scalar(static_cast<std::int64_t>(i)));
  return s;
}

// Runs `add` on samples 0, 1 and 2 of a batch of dataset indices {10, 11, 12}, where sample
// `bad` is replaced by `odd`, and returns the CollateError it throws.
CollateError collate_error(std::size_t bad, const Sample& odd) {
  HeapBatchBuilder out({10, 11, 12});
  std::vector<Sample> samples{xy_sample(0), xy_sample(1), xy_sample(2)};
  samples[bad] = odd;
  try {
    collate_stack(samples, out);
  } catch (const CollateError& e) {
    return e;
  }
  FAIL("collate_stack did not throw CollateError");
  return CollateError("", {}, "");
}

TEST_CASE("HeapBatchBuilder: the test builder reports its indices and epoch", "[collate]") {
  const HeapBatchBuilder out({4, 9, 2}, 6);
  REQUIRE(out.batch_size() == 3);
  REQUIRE(out.epoch() == 6);
  REQUIRE(out.indices()[1] == 9);
}

TEST_CASE("collate_stack: scalars stack into a [B] tensor", "[collate]") {
  HeapBatchBuilder out({5, 6, 7, 8});
  std::vector<Sample> samples;
  for (std::size_t i = 0; i < 4; ++i) {
    Sample s;
    s.set("label", Tensor::scalar(static_cast<std::int64_t>(i * 10 + 1)));
    samples.push_back(s);
  }
  collate_stack(samples, out);
  REQUIRE(out.fields().size() == 1);
  const Tensor& label = out["label"];
  REQUIRE(label.dtype() == DType::kInt64);
  REQUIRE(label.shape() == Shape{4});
  const std::int64_t* p = label.data<std::int64_t>();
  REQUIRE(p[0] == 1);
  REQUIRE(p[1] == 11);
  REQUIRE(p[2] == 21);
  REQUIRE(p[3] == 31);
}

TEST_CASE("collate_stack: [3, 4] tensors stack into [B, 3, 4], one row per sample", "[collate]") {
  HeapBatchBuilder out({0, 1, 2});
  const std::vector<Sample> samples{xy_sample(0), xy_sample(1), xy_sample(2)};
  collate_stack(samples, out);
  const Tensor& x = out["x"];
  REQUIRE(x.dtype() == DType::kFloat32);
  REQUIRE(x.shape() == Shape{3, 3, 4});
  REQUIRE(x.nbytes() == 3 * 12 * sizeof(float));
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const Tensor& row = samples[i]["x"];
    INFO("row " << i);
    REQUIRE(std::memcmp(x.raw_data() + i * row.nbytes(), row.raw_data(), row.nbytes()) == 0);
  }
  REQUIRE(x.data<float>()[2 * 12 + 5] == 205.0f);
  const Tensor& y = out["y"];
  REQUIRE(y.shape() == Shape{3});
  REQUIRE(y.data<std::int64_t>()[2] == 2);
}

TEST_CASE("StackCollator: add() writes row count() and counts", "[collate]") {
  HeapBatchBuilder out({0, 1, 2});
  StackCollator stack(out);
  REQUIRE(stack.count() == 0);
  REQUIRE(out.fields().empty());  // nothing is allocated before the first sample

  stack.add(xy_sample(0));
  REQUIRE(stack.count() == 1);
  REQUIRE(field_names(out.fields()) == std::vector<std::string>{"x", "y"});
  const Tensor& x = out["x"];
  const std::size_t row_bytes = 12 * sizeof(float);
  // Rows 1 and 2 are untouched so far.
  for (std::size_t b = row_bytes; b < x.nbytes(); ++b) REQUIRE(x.raw_data()[b] == kUnwritten);

  stack.add(xy_sample(1));
  REQUIRE(stack.count() == 2);
  REQUIRE(x.data<float>()[12] == 100.0f);
  REQUIRE(x.data<float>()[23] == 111.0f);
  for (std::size_t b = 2 * row_bytes; b < x.nbytes(); ++b) {
    REQUIRE(x.raw_data()[b] == kUnwritten);
  }

  stack.add(xy_sample(2));
  REQUIRE(stack.count() == 3);
  REQUIRE(x.data<float>()[24] == 200.0f);
  REQUIRE(out["y"].data<std::int64_t>()[1] == 1);
}

TEST_CASE("collate_stack: batch fields keep the first sample's field order", "[collate]") {
  HeapBatchBuilder out({0, 1, 2});
  std::vector<Sample> samples(3);
  samples[0]
      .set("b", Tensor::scalar(1.0f))
      .set("a", Tensor::scalar(2))
      .set("c", Tensor::scalar(true));
  // Later samples list their fields in other orders: matched by name.
  samples[1]
      .set("c", Tensor::scalar(false))
      .set("a", Tensor::scalar(20))
      .set("b", Tensor::scalar(10.0f));
  samples[2]
      .set("a", Tensor::scalar(200))
      .set("b", Tensor::scalar(100.0f))
      .set("c", Tensor::scalar(true));
  collate_stack(samples, out);
  REQUIRE(field_names(out.fields()) == std::vector<std::string>{"b", "a", "c"});
  const float* b = out["b"].data<float>();
  REQUIRE(b[0] == 1.0f);
  REQUIRE(b[1] == 10.0f);
  REQUIRE(b[2] == 100.0f);
  const std::int32_t* a = out["a"].data<std::int32_t>();
  REQUIRE(a[0] == 2);
  REQUIRE(a[1] == 20);
  REQUIRE(a[2] == 200);
  const bool* c = out["c"].data<bool>();
  REQUIRE(c[0]);
  REQUIRE_FALSE(c[1]);
  REQUIRE(c[2]);
}

TEST_CASE("collate_stack: a shape mismatch is a CollateError naming both shapes", "[collate]") {
  Sample odd = xy_sample(1);
  odd.set("x", Tensor::zeros(DType::kFloat32, Shape{3, 5}));
  const CollateError e = collate_error(1, odd);
  REQUIRE(e.field() == "x");
  REQUIRE(e.sample_indices() == std::vector<std::size_t>{10, 11});
  REQUIRE_THAT(e.what(), Contains("field 'x' of sample 11 has shape [3, 5]") &&
                             Contains("sample 10 (the batch's first) has [3, 4]") &&
                             Contains("pad"));

  // CollateError is a stoker::Error, like every error stoker raises.
  const std::vector<Sample> samples{xy_sample(0), odd, xy_sample(2)};
  HeapBatchBuilder out({10, 11, 12});
  REQUIRE_THROWS_AS(collate_stack(samples, out), Error);
}

TEST_CASE("collate_stack: a rank mismatch with equal element count is a CollateError",
          "[collate]") {
  Sample odd = xy_sample(2);
  odd.set("x", Tensor::zeros(DType::kFloat32, Shape{12}));
  const CollateError e = collate_error(2, odd);
  REQUIRE(e.field() == "x");
  REQUIRE(e.sample_indices() == std::vector<std::size_t>{10, 12});
  REQUIRE_THAT(e.what(), Contains("has shape [12]") && Contains("has [3, 4]"));
}

TEST_CASE("collate_stack: a dtype mismatch is a CollateError naming both dtypes", "[collate]") {
  // int32 has float32's size: the check is on the dtype, not the byte count.
  Sample odd = xy_sample(2);
  odd.set("x", Tensor::zeros(DType::kInt32, Shape{3, 4}));
  const CollateError e = collate_error(2, odd);
  REQUIRE(e.field() == "x");
  REQUIRE(e.sample_indices() == std::vector<std::size_t>{10, 12});
  REQUIRE_THAT(e.what(), Contains("field 'x' of sample 12 is int32") &&
                             Contains("sample 10 (the batch's first) has float32") &&
                             Contains("same dtype"));

  Sample scalar_odd = xy_sample(1);
  scalar_odd.set("y", Tensor::scalar(1.0));
  const CollateError f = collate_error(1, scalar_odd);
  REQUIRE(f.field() == "y");
  REQUIRE(f.sample_indices() == std::vector<std::size_t>{10, 11});
  REQUIRE_THAT(f.what(), Contains("is float64") && Contains("has int64"));
}

TEST_CASE("collate_stack: a missing field is a CollateError", "[collate]") {
  Sample odd;
  odd.set("x", grid(0.0f));
  const CollateError e = collate_error(1, odd);
  REQUIRE(e.field() == "y");
  REQUIRE(e.sample_indices() == std::vector<std::size_t>{10, 11});
  REQUIRE_THAT(e.what(), Contains("sample 11 has no field 'y'") &&
                             Contains("which sample 10 (the batch's first) has") &&
                             Contains("same fields"));
}

TEST_CASE("collate_stack: a field renamed is reported as the missing one", "[collate]") {
  Sample odd;
  odd.set("x", grid(0.0f)).set("z", Tensor::scalar<std::int64_t>(0));
  const CollateError e = collate_error(2, odd);
  REQUIRE(e.field() == "y");
  REQUIRE(e.sample_indices() == std::vector<std::size_t>{10, 12});
  REQUIRE_THAT(e.what(), Contains("no field 'y'"));
}

TEST_CASE("collate_stack: an extra field is a CollateError", "[collate]") {
  Sample odd = xy_sample(1);
  odd.set("mask", Tensor::scalar(true));
  const CollateError e = collate_error(1, odd);
  REQUIRE(e.field() == "mask");
  REQUIRE(e.sample_indices() == std::vector<std::size_t>{10, 11});
  REQUIRE_THAT(e.what(), Contains("sample 11 has a field 'mask'") &&
                             Contains("sample 10 (the batch's first) does not have") &&
                             Contains("same fields"));
}

TEST_CASE("StackCollator: more samples than batch_size is std::out_of_range", "[collate]") {
  HeapBatchBuilder out({3, 4});
  StackCollator stack(out);
  stack.add(xy_sample(0));
  stack.add(xy_sample(1));
  REQUIRE_THROWS_AS(stack.add(xy_sample(2)), std::out_of_range);
  REQUIRE_THROWS_WITH(stack.add(xy_sample(2)), Contains("holds 2 samples already"));
  REQUIRE(stack.count() == 2);
  // The rows already written are intact.
  REQUIRE(out["y"].shape() == Shape{2});
  REQUIRE(out["y"].data<std::int64_t>()[1] == 1);

  HeapBatchBuilder small({0});
  const std::vector<Sample> two{xy_sample(0), xy_sample(1)};
  REQUIRE_THROWS_AS(collate_stack(two, small), std::out_of_range);
}

TEST_CASE("collate_stack: a sample of kMaxDims dimensions cannot be stacked", "[collate]") {
  HeapBatchBuilder out({0, 1});
  Sample s;
  s.set("x", Tensor::zeros(DType::kUInt8, Shape{1, 1, 1, 1, 1, 1, 1, 1}));
  const std::vector<Sample> samples{s, s};
  REQUIRE_THROWS_AS(collate_stack(samples, out), std::invalid_argument);
  REQUIRE_THROWS_WITH(collate_stack(samples, out), Contains("cannot add a batch dimension"));

  HeapBatchBuilder seven_out({0, 1});
  Sample seven;
  seven.set("x", Tensor::zeros(DType::kUInt8, Shape{1, 2, 1, 2, 1, 2, 1}));
  collate_stack(std::vector<Sample>{seven, seven}, seven_out);
  REQUIRE(seven_out["x"].shape() == Shape{2, 1, 2, 1, 2, 1, 2, 1});
}

TEST_CASE("collate_stack works as a CollateFn", "[collate]") {
  const CollateFn fn = collate_stack;
  HeapBatchBuilder out({0, 1});
  const std::vector<Sample> samples{xy_sample(0), xy_sample(1)};
  fn(samples, out);
  REQUIRE(out["y"].shape() == Shape{2});
  REQUIRE(out["x"].data<float>()[12] == 100.0f);
}

}  // namespace
}  // namespace stoker
