// Unit tests for include/stoker/tensor.hpp: DType, Shape and Tensor (owning, view, scalar,
// typed access, shallow copies, deep clones) and the storage cache behind large owning tensors.
#include "stoker/tensor.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/buffer_cache.hpp"

namespace stoker {
namespace {

using Catch::Contains;

constexpr std::size_t kKiB = std::size_t{1} << 10;
constexpr std::size_t kMiB = std::size_t{1} << 20;

std::int64_t as_dim(std::size_t n) { return static_cast<std::int64_t>(n); }

// Empties the storage cache and returns a tensor that must stay alive while the test needs the
// cache empty. Cycling a block of kMaxCachedBytesTotal evicts one older block per cycle (the
// cache is then over its byte budget), so after at most kMaxCachedBlocks + 1 cycles the cache
// holds that block alone; taking it out leaves the cache empty.
Tensor empty_the_cache() {
  const Shape whole_budget{as_dim(detail::kMaxCachedBytesTotal)};
  for (std::size_t i = 0; i <= detail::kMaxCachedBlocks + 1; ++i) {
    Tensor cycled = Tensor::empty(DType::kUInt8, whole_budget);
    cycled = Tensor();
    if (detail::cached_block_count() == 1) break;
  }
  REQUIRE(detail::cached_block_count() == 1);
  Tensor hog = Tensor::empty(DType::kUInt8, whole_budget);
  REQUIRE(detail::cached_block_count() == 0);
  return hog;
}

TEST_CASE("dtype_size gives the bytes per element of every dtype", "[tensor][dtype]") {
  REQUIRE(dtype_size(DType::kUInt8) == 1);
  REQUIRE(dtype_size(DType::kInt8) == 1);
  REQUIRE(dtype_size(DType::kUInt16) == 2);
  REQUIRE(dtype_size(DType::kInt16) == 2);
  REQUIRE(dtype_size(DType::kUInt32) == 4);
  REQUIRE(dtype_size(DType::kInt32) == 4);
  REQUIRE(dtype_size(DType::kUInt64) == 8);
  REQUIRE(dtype_size(DType::kInt64) == 8);
  REQUIRE(dtype_size(DType::kFloat16) == 2);
  REQUIRE(dtype_size(DType::kBFloat16) == 2);
  REQUIRE(dtype_size(DType::kFloat32) == 4);
  REQUIRE(dtype_size(DType::kFloat64) == 8);
  REQUIRE(dtype_size(DType::kBool) == 1);
  REQUIRE(dtype_size(static_cast<DType>(kNumDTypes)) == 0);
  REQUIRE(dtype_size(static_cast<DType>(255)) == 0);
}

TEST_CASE("dtype_name names every dtype and 'invalid' outside the enum", "[tensor][dtype]") {
  REQUIRE(dtype_name(DType::kUInt8) == "uint8");
  REQUIRE(dtype_name(DType::kInt8) == "int8");
  REQUIRE(dtype_name(DType::kUInt16) == "uint16");
  REQUIRE(dtype_name(DType::kInt16) == "int16");
  REQUIRE(dtype_name(DType::kUInt32) == "uint32");
  REQUIRE(dtype_name(DType::kInt32) == "int32");
  REQUIRE(dtype_name(DType::kUInt64) == "uint64");
  REQUIRE(dtype_name(DType::kInt64) == "int64");
  REQUIRE(dtype_name(DType::kFloat16) == "float16");
  REQUIRE(dtype_name(DType::kBFloat16) == "bfloat16");
  REQUIRE(dtype_name(DType::kFloat32) == "float32");
  REQUIRE(dtype_name(DType::kFloat64) == "float64");
  REQUIRE(dtype_name(DType::kBool) == "bool");
  REQUIRE(dtype_name(static_cast<DType>(kNumDTypes)) == "invalid");
  REQUIRE(dtype_name(static_cast<DType>(200)) == "invalid");
}

TEST_CASE("is_valid_dtype accepts exactly the enum's values", "[tensor][dtype]") {
  for (std::size_t v = 0; v < kNumDTypes; ++v) {
    REQUIRE(is_valid_dtype(static_cast<std::uint8_t>(v)));
  }
  REQUIRE_FALSE(is_valid_dtype(static_cast<std::uint8_t>(kNumDTypes)));
  REQUIRE_FALSE(is_valid_dtype(255));
}

TEST_CASE("kDTypeOf maps C++ types to dtypes", "[tensor][dtype]") {
  STATIC_REQUIRE(kDTypeOf<std::uint8_t> == DType::kUInt8);
  STATIC_REQUIRE(kDTypeOf<std::int8_t> == DType::kInt8);
  STATIC_REQUIRE(kDTypeOf<std::uint16_t> == DType::kUInt16);
  STATIC_REQUIRE(kDTypeOf<std::int16_t> == DType::kInt16);
  STATIC_REQUIRE(kDTypeOf<std::uint32_t> == DType::kUInt32);
  STATIC_REQUIRE(kDTypeOf<std::int32_t> == DType::kInt32);
  STATIC_REQUIRE(kDTypeOf<std::uint64_t> == DType::kUInt64);
  STATIC_REQUIRE(kDTypeOf<std::int64_t> == DType::kInt64);
  STATIC_REQUIRE(kDTypeOf<Float16> == DType::kFloat16);
  STATIC_REQUIRE(kDTypeOf<BFloat16> == DType::kBFloat16);
  STATIC_REQUIRE(kDTypeOf<float> == DType::kFloat32);
  STATIC_REQUIRE(kDTypeOf<double> == DType::kFloat64);
  STATIC_REQUIRE(kDTypeOf<bool> == DType::kBool);
  STATIC_REQUIRE(kDTypeOf<const float> == DType::kFloat32);
}

TEST_CASE("Shape: a default shape is a scalar", "[tensor][shape]") {
  const Shape s;
  REQUIRE(s.size() == 0);
  REQUIRE(s.empty());
  REQUIRE(s.numel() == 1);
  REQUIRE(s.dims().empty());
  REQUIRE(s.begin() == s.end());
  REQUIRE(s.to_string() == "[]");
  REQUIRE(s == Shape{});
}

TEST_CASE("Shape: construction from dimensions", "[tensor][shape]") {
  SECTION("initializer list") {
    const Shape s{3, 224, 224};
    REQUIRE(s.size() == 3);
    REQUIRE_FALSE(s.empty());
    REQUIRE(s[0] == 3);
    REQUIRE(s[1] == 224);
    REQUIRE(s[2] == 224);
    REQUIRE(s.numel() == 3 * 224 * 224);
    REQUIRE(std::vector<std::int64_t>(s.begin(), s.end()) ==
            std::vector<std::int64_t>{3, 224, 224});
    REQUIRE(s.dims().size() == 3);
    REQUIRE(s.dims()[2] == 224);
  }
  SECTION("span") {
    const std::vector<std::int64_t> dims{2, 5, 7, 1};
    const Shape s(std::span<const std::int64_t>(dims.data(), dims.size()));
    REQUIRE(s.size() == 4);
    REQUIRE(std::vector<std::int64_t>(s.begin(), s.end()) == dims);
    REQUIRE(s.numel() == 70);
    REQUIRE(s == Shape{2, 5, 7, 1});
  }
  SECTION("a zero dimension gives no elements") {
    const Shape s{4, 0, 3};
    REQUIRE(s.size() == 3);
    REQUIRE(s.numel() == 0);
  }
  SECTION("kMaxDims dimensions are allowed") {
    const Shape s{1, 2, 1, 2, 1, 2, 1, 2};
    REQUIRE(s.size() == Shape::kMaxDims);
    REQUIRE(s.numel() == 16);
  }
}

TEST_CASE("Shape: more than kMaxDims dimensions is an error", "[tensor][shape]") {
  STATIC_REQUIRE(Shape::kMaxDims == 8);
  REQUIRE_THROWS_AS((Shape{1, 1, 1, 1, 1, 1, 1, 1, 1}), std::invalid_argument);
  REQUIRE_THROWS_WITH((Shape{1, 1, 1, 1, 1, 1, 1, 1, 1}),
                      Contains("9 dimensions given") && Contains("at most 8"));
  const std::vector<std::int64_t> ten(10, 2);
  REQUIRE_THROWS_AS(Shape(std::span<const std::int64_t>(ten.data(), ten.size())),
                    std::invalid_argument);
  REQUIRE_THROWS_WITH(Shape(std::span<const std::int64_t>(ten.data(), ten.size())),
                      Contains("10 dimensions given") && Contains("at most 8"));
}

TEST_CASE("Shape: a negative dimension is an error", "[tensor][shape]") {
  REQUIRE_THROWS_AS((Shape{2, -1, 3}), std::invalid_argument);
  REQUIRE_THROWS_WITH((Shape{2, -1, 3}), Contains("dimension 1 is -1") && Contains("must be >= 0"));
  const std::vector<std::int64_t> dims{-5};
  REQUIRE_THROWS_WITH(Shape(std::span<const std::int64_t>(dims.data(), dims.size())),
                      Contains("dimension 0 is -5"));
}

TEST_CASE("Shape: equality compares rank and every dimension", "[tensor][shape]") {
  REQUIRE(Shape{3, 4} == Shape{3, 4});
  REQUIRE_FALSE(Shape{3, 4} == Shape{4, 3});
  REQUIRE_FALSE(Shape{3, 4} == Shape{3, 4, 1});
  REQUIRE_FALSE(Shape{} == Shape{1});
  REQUIRE_FALSE(Shape{0} == Shape{});
}

TEST_CASE("Shape: prepend adds a leading dimension", "[tensor][shape]") {
  const Shape sample{3, 4};
  const Shape batch = sample.prepend(5);
  REQUIRE(batch == Shape{5, 3, 4});
  REQUIRE(batch.numel() == 60);
  REQUIRE(sample == Shape{3, 4});  // unchanged
  REQUIRE(Shape{}.prepend(7) == Shape{7});
  REQUIRE(Shape{1, 2, 3, 4, 5, 6, 7}.prepend(9) == Shape{9, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("Shape: prepend of a negative dimension is an error", "[tensor][shape]") {
  REQUIRE_THROWS_WITH(Shape{3}.prepend(-1), Contains("dimension -1 is negative"));
}

TEST_CASE("Shape: prepend to a shape of kMaxDims dimensions is an error", "[tensor][shape]") {
  const Shape full{1, 2, 3, 4, 5, 6, 7, 8};
  REQUIRE_THROWS_AS(full.prepend(2), std::invalid_argument);
  REQUIRE_THROWS_WITH(full.prepend(2), Contains("cannot add a batch dimension to "
                                                "[1, 2, 3, 4, 5, 6, 7, 8]") &&
                                           Contains("at most 8"));
}

TEST_CASE("Shape: to_string", "[tensor][shape]") {
  REQUIRE(Shape{}.to_string() == "[]");
  REQUIRE(Shape{0}.to_string() == "[0]");
  REQUIRE(Shape{3, 224, 224}.to_string() == "[3, 224, 224]");
  REQUIRE(Shape{1, 2, 3, 4, 5, 6, 7, 8}.to_string() == "[1, 2, 3, 4, 5, 6, 7, 8]");
}

TEST_CASE("Tensor: a default tensor is undefined", "[tensor]") {
  const Tensor t;
  REQUIRE_FALSE(t.defined());
  REQUIRE(t.raw_data() == nullptr);
  REQUIRE(t.nbytes() == 0);
  REQUIRE(t.bytes().empty());
  REQUIRE_FALSE(t.is_view());
  REQUIRE_FALSE(t.clone().defined());
}

TEST_CASE("Tensor::empty: an owning tensor of the given dtype and shape", "[tensor]") {
  Tensor t = Tensor::empty(DType::kFloat32, Shape{2, 3});
  REQUIRE(t.defined());
  REQUIRE(t.dtype() == DType::kFloat32);
  REQUIRE(t.shape() == Shape{2, 3});
  REQUIRE(t.dim() == 2);
  REQUIRE(t.size(0) == 2);
  REQUIRE(t.size(1) == 3);
  REQUIRE(t.numel() == 6);
  REQUIRE(t.element_size() == 4);
  REQUIRE(t.nbytes() == 24);
  REQUIRE(t.bytes().size() == 24);
  REQUIRE_FALSE(t.is_view());
  REQUIRE(t.raw_data() != nullptr);
  REQUIRE(reinterpret_cast<std::uintptr_t>(t.raw_data()) % 64 == 0);
  REQUIRE(t.bytes().data() == t.raw_data());
  // The memory is writable through the typed pointer and readable back.
  float* p = t.data<float>();
  for (std::size_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(i) * 1.5f;
  REQUIRE(t.data<float>()[5] == 7.5f);
}

TEST_CASE("Tensor::empty: zero elements still gives a defined tensor", "[tensor]") {
  const Tensor t = Tensor::empty(DType::kInt64, Shape{0, 4});
  REQUIRE(t.defined());
  REQUIRE(t.numel() == 0);
  REQUIRE(t.nbytes() == 0);
  REQUIRE(t.shape() == Shape{0, 4});
}

TEST_CASE("Tensor::empty: a dtype outside the enum is an error", "[tensor]") {
  REQUIRE_THROWS_AS(Tensor::empty(static_cast<DType>(42), Shape{2}), std::invalid_argument);
  REQUIRE_THROWS_WITH(Tensor::empty(static_cast<DType>(42), Shape{2}),
                      Contains("dtype value 42 is not a stoker::DType"));
  REQUIRE_THROWS_AS(Tensor::zeros(static_cast<DType>(kNumDTypes), Shape{2}), std::invalid_argument);
}

TEST_CASE("Tensor::zeros: every byte is zero, even in recycled storage", "[tensor]") {
  SECTION("small") {
    const Tensor t = Tensor::zeros(DType::kInt32, Shape{7, 3});
    REQUIRE(t.nbytes() == 84);
    for (const std::byte b : t.bytes()) REQUIRE(b == std::byte{0});
  }
  SECTION("a cached block that held other data") {
    const Shape shape{as_dim(64 * kKiB)};
    std::byte* first = nullptr;
    {
      Tensor dirty = Tensor::empty(DType::kUInt8, shape);
      std::memset(dirty.raw_data(), 0xAB, dirty.nbytes());
      first = dirty.raw_data();
    }
    const Tensor t = Tensor::zeros(DType::kUInt8, shape);
    REQUIRE(t.raw_data() == first);  // the dirty block came back from the cache
    std::size_t nonzero = 0;
    for (const std::byte b : t.bytes())
      if (b != std::byte{0}) ++nonzero;
    REQUIRE(nonzero == 0);
  }
}

TEST_CASE("Tensor::from: initializer list, 1-D by default", "[tensor][from]") {
  const Tensor t = Tensor::from<float>({1.0f, 2.5f, -3.0f});
  REQUIRE(t.dtype() == DType::kFloat32);
  REQUIRE(t.shape() == Shape{3});
  REQUIRE(t.nbytes() == 12);
  REQUIRE_FALSE(t.is_view());
  const float* p = t.data<float>();
  REQUIRE(p[0] == 1.0f);
  REQUIRE(p[1] == 2.5f);
  REQUIRE(p[2] == -3.0f);
}

TEST_CASE("Tensor::from: initializer list with a shape", "[tensor][from]") {
  const Tensor t = Tensor::from<std::int32_t>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  REQUIRE(t.dtype() == DType::kInt32);
  REQUIRE(t.shape() == Shape{2, 3});
  const std::int32_t* p = t.data<std::int32_t>();
  for (std::size_t i = 0; i < 6; ++i) REQUIRE(p[i] == static_cast<std::int32_t>(i + 1));
}

TEST_CASE("Tensor::from: vector, with and without a shape", "[tensor][from]") {
  const std::vector<double> values{0.5, 1.5, 2.5, 3.5};
  const Tensor flat = Tensor::from(values);
  REQUIRE(flat.dtype() == DType::kFloat64);
  REQUIRE(flat.shape() == Shape{4});
  REQUIRE(std::memcmp(flat.raw_data(), values.data(), 4 * sizeof(double)) == 0);
  // The tensor holds a copy.
  REQUIRE(flat.data<double>() != values.data());

  const Tensor square = Tensor::from(values, Shape{2, 2});
  REQUIRE(square.shape() == Shape{2, 2});
  REQUIRE(square.data<double>()[3] == 3.5);
}

TEST_CASE("Tensor::from: span, with and without a shape", "[tensor][from]") {
  std::vector<std::uint16_t> values{10, 20, 30, 40, 50, 60};
  const std::span<const std::uint16_t> span(values);
  const Tensor flat = Tensor::from(span);
  REQUIRE(flat.dtype() == DType::kUInt16);
  REQUIRE(flat.shape() == Shape{6});
  const Tensor shaped = Tensor::from(span, Shape{3, 1, 2});
  REQUIRE(shaped.shape() == Shape{3, 1, 2});
  // Later changes to the source do not reach the copies.
  values[0] = 99;
  REQUIRE(flat.data<std::uint16_t>()[0] == 10);
  REQUIRE(shaped.data<std::uint16_t>()[0] == 10);
  REQUIRE(shaped.data<std::uint16_t>()[5] == 60);
}

TEST_CASE("Tensor::from: 16-bit float and bool storage types", "[tensor][from]") {
  const Tensor half = Tensor::from<Float16>({Float16{0x3c00}, Float16{0xc000}});
  REQUIRE(half.dtype() == DType::kFloat16);
  REQUIRE(half.nbytes() == 4);
  REQUIRE(half.data<Float16>()[1].bits == 0xc000);
  const Tensor brain = Tensor::from<BFloat16>({BFloat16{0x3f80}});
  REQUIRE(brain.dtype() == DType::kBFloat16);
  REQUIRE(brain.item<BFloat16>().bits == 0x3f80);
  const Tensor flags = Tensor::from<bool>({true, false, true});
  REQUIRE(flags.dtype() == DType::kBool);
  REQUIRE(flags.nbytes() == 3);
  REQUIRE(flags.data<bool>()[2]);
  REQUIRE_FALSE(flags.data<bool>()[1]);
}

TEST_CASE("Tensor::from: an element count that differs from the shape is an error",
          "[tensor][from]") {
  REQUIRE_THROWS_AS(Tensor::from<float>({1.0f, 2.0f, 3.0f}, Shape{2, 2}), std::invalid_argument);
  REQUIRE_THROWS_WITH(Tensor::from<float>({1.0f, 2.0f, 3.0f}, Shape{2, 2}),
                      Contains("shape [2, 2] holds 4 elements but 3 were given"));
  const std::vector<std::int64_t> five(5, 1);
  REQUIRE_THROWS_WITH(Tensor::from(five, Shape{2}),
                      Contains("shape [2] holds 2 elements but 5 were given"));
  REQUIRE_THROWS_WITH(Tensor::from(std::span<const std::int64_t>(five), Shape{}),
                      Contains("shape [] holds 1 elements but 5 were given"));
}

TEST_CASE("Tensor::scalar: a zero-dimensional tensor of one value", "[tensor][scalar]") {
  const Tensor label = Tensor::scalar<std::int64_t>(-42);
  REQUIRE(label.dtype() == DType::kInt64);
  REQUIRE(label.dim() == 0);
  REQUIRE(label.shape() == Shape{});
  REQUIRE(label.numel() == 1);
  REQUIRE(label.nbytes() == 8);
  REQUIRE(label.item<std::int64_t>() == -42);

  REQUIRE(Tensor::scalar(2.25).dtype() == DType::kFloat64);
  REQUIRE(Tensor::scalar(2.25).item<double>() == 2.25);
  REQUIRE(Tensor::scalar(true).item<bool>());
  REQUIRE(Tensor::scalar(std::uint8_t{200}).item<std::uint8_t>() == 200);
}

TEST_CASE("Tensor::item: reads any one-element tensor", "[tensor][scalar]") {
  REQUIRE(Tensor::from<float>({6.5f}).item<float>() == 6.5f);
  REQUIRE(Tensor::from<std::int16_t>({-7}, Shape{1, 1, 1}).item<std::int16_t>() == -7);
}

TEST_CASE("Tensor::item: more than one element is an error", "[tensor][scalar]") {
  REQUIRE_THROWS_WITH(Tensor::from<float>({1, 2, 3}).item<float>(),
                      Contains("Tensor::item: the tensor has shape [3] (3 elements)"));
  const Tensor t = Tensor::from<float>({1.0f, 2.0f, 3.0f});
  REQUIRE_THROWS_AS(t.item<float>(), std::invalid_argument);
  REQUIRE_THROWS_WITH(t.item<float>(), Contains("[3]") && Contains("3 elements"));
  const Tensor none = Tensor::empty(DType::kFloat32, Shape{0});
  REQUIRE_THROWS_AS(none.item<float>(), std::invalid_argument);
}

TEST_CASE("Tensor::item: the wrong type is an error naming both dtypes", "[tensor][scalar]") {
  const Tensor t = Tensor::scalar<std::int32_t>(3);
  REQUIRE_THROWS_AS(t.item<std::int64_t>(), std::invalid_argument);
  REQUIRE_THROWS_WITH(t.item<std::int64_t>(), Contains("holds int32") && Contains("T is int64"));
}

TEST_CASE("Tensor::data<T>: the wrong type is an error naming both dtypes", "[tensor]") {
  Tensor t = Tensor::zeros(DType::kFloat32, Shape{4});
  REQUIRE_THROWS_AS(t.data<double>(), std::invalid_argument);
  REQUIRE_THROWS_WITH(t.data<double>(), Contains("the tensor holds float32 but T is float64"));
  REQUIRE_THROWS_WITH(t.data<std::int32_t>(), Contains("holds float32") && Contains("T is int32"));
  const Tensor& constant = t;
  REQUIRE_THROWS_AS(constant.data<std::uint8_t>(), std::invalid_argument);
  REQUIRE_THROWS_WITH(constant.data<std::uint8_t>(),
                      Contains("holds float32") && Contains("T is uint8"));
  REQUIRE_THROWS_WITH(Tensor::scalar(true).data<std::uint8_t>(),
                      Contains("holds bool") && Contains("T is uint8"));
  // The matching type works, mutable and const, and both see the same memory.
  REQUIRE(t.data<float>() == constant.data<float>());
  REQUIRE(static_cast<const void*>(t.data<float>()) == static_cast<const void*>(t.raw_data()));
}

TEST_CASE("Tensor::view: points into the caller's memory and keeps the owner alive",
          "[tensor][view]") {
  bool freed = false;
  auto buffer = std::shared_ptr<float>(new float[6]{0, 1, 2, 3, 4, 5}, [&freed](float* p) {
    freed = true;
    delete[] p;
  });
  float* raw = buffer.get();
  Tensor view = Tensor::view(DType::kFloat32, Shape{2, 3}, raw, buffer);
  REQUIRE(view.defined());
  REQUIRE(view.is_view());
  REQUIRE(view.dtype() == DType::kFloat32);
  REQUIRE(view.shape() == Shape{2, 3});
  REQUIRE(view.nbytes() == 24);
  REQUIRE(view.data<float>() == raw);

  // Writes in either direction are visible: no copy was made.
  raw[4] = 40.0f;
  REQUIRE(view.data<float>()[4] == 40.0f);
  view.data<float>()[0] = -1.0f;
  REQUIRE(raw[0] == -1.0f);

  buffer.reset();
  REQUIRE_FALSE(freed);  // the view holds the owner

  Tensor copy = view;
  view = Tensor();
  REQUIRE_FALSE(freed);  // the copy holds it too
  REQUIRE(copy.is_view());
  REQUIRE(copy.data<float>()[5] == 5.0f);

  copy = Tensor();
  REQUIRE(freed);  // the last reference is gone
}

TEST_CASE("Tensor::view: no owner, null data and a bad dtype", "[tensor][view]") {
  std::int32_t values[3] = {7, 8, 9};
  const Tensor unowned = Tensor::view(DType::kInt32, Shape{3}, values, nullptr);
  REQUIRE(unowned.defined());
  REQUIRE(unowned.is_view());
  REQUIRE(unowned.data<std::int32_t>()[2] == 9);

  REQUIRE_THROWS_AS(Tensor::view(DType::kInt32, Shape{3}, nullptr, nullptr), std::invalid_argument);
  REQUIRE_THROWS_WITH(Tensor::view(DType::kInt32, Shape{3}, nullptr, nullptr),
                      Contains("data is null"));
  REQUIRE_THROWS_AS(Tensor::view(static_cast<DType>(99), Shape{3}, values, nullptr),
                    std::invalid_argument);
  REQUIRE_THROWS_WITH(Tensor::view(static_cast<DType>(99), Shape{3}, values, nullptr),
                      Contains("dtype value 99 is not a stoker::DType"));
}

TEST_CASE("Tensor: copies are shallow and share bytes", "[tensor]") {
  Tensor a = Tensor::from<std::int32_t>({1, 2, 3});
  Tensor b = a;
  REQUIRE(b.raw_data() == a.raw_data());
  b.data<std::int32_t>()[1] = 20;
  REQUIRE(a.data<std::int32_t>()[1] == 20);

  Tensor c;
  c = a;
  REQUIRE(c.raw_data() == a.raw_data());
  // The storage outlives the tensor it was made for.
  const std::byte* storage = a.raw_data();
  a = Tensor();
  REQUIRE_FALSE(a.defined());
  REQUIRE(c.raw_data() == storage);
  REQUIRE(c.data<std::int32_t>()[2] == 3);
}

TEST_CASE("Tensor::clone: a deep, owning copy", "[tensor]") {
  SECTION("of an owning tensor") {
    Tensor a = Tensor::from<float>({1.0f, 2.0f, 3.0f, 4.0f}, Shape{2, 2});
    const Tensor b = a.clone();
    REQUIRE(b.defined());
    REQUIRE(b.raw_data() != a.raw_data());
    REQUIRE(b.dtype() == DType::kFloat32);
    REQUIRE(b.shape() == Shape{2, 2});
    REQUIRE(b.nbytes() == a.nbytes());
    REQUIRE_FALSE(b.is_view());
    a.data<float>()[0] = 100.0f;
    REQUIRE(b.data<float>()[0] == 1.0f);
    REQUIRE(b.data<float>()[3] == 4.0f);
  }
  SECTION("of a view: owning, and independent of the view's owner") {
    bool freed = false;
    auto buffer =
        std::shared_ptr<std::int64_t>(new std::int64_t[3]{5, 6, 7}, [&freed](std::int64_t* p) {
          freed = true;
          delete[] p;
        });
    Tensor view = Tensor::view(DType::kInt64, Shape{3}, buffer.get(), buffer);
    buffer.reset();
    const Tensor owned = view.clone();
    REQUIRE_FALSE(owned.is_view());
    REQUIRE(owned.raw_data() != view.raw_data());
    view = Tensor();
    REQUIRE(freed);  // the clone does not hold the view's owner
    REQUIRE(owned.data<std::int64_t>()[0] == 5);
    REQUIRE(owned.data<std::int64_t>()[2] == 7);
  }
  SECTION("of a large tensor") {
    Tensor big = Tensor::empty(DType::kUInt8, Shape{as_dim(100 * kKiB)});
    std::uint8_t* p = big.data<std::uint8_t>();
    for (std::size_t i = 0; i < big.numel(); ++i) p[i] = static_cast<std::uint8_t>(i * 7);
    const Tensor copy = big.clone();
    REQUIRE(copy.raw_data() != big.raw_data());
    REQUIRE(std::memcmp(copy.raw_data(), big.raw_data(), big.nbytes()) == 0);
  }
}

TEST_CASE("Tensor: storage of 32 KiB and more is recycled through the cache", "[tensor][cache]") {
  const Tensor hog = empty_the_cache();

  const std::byte* block = nullptr;
  {
    const Tensor t = Tensor::empty(DType::kUInt8, Shape{as_dim(48 * kKiB)});
    block = t.raw_data();
    REQUIRE(detail::cached_block_count() == 0);
  }
  REQUIRE(detail::cached_block_count() == 1);

  // A tensor of the same byte size (another dtype and shape) gets the same block back.
  {
    const Tensor t = Tensor::empty(DType::kFloat32, Shape{3, as_dim(4 * kKiB)});
    REQUIRE(t.nbytes() == 48 * kKiB);
    REQUIRE(t.raw_data() == block);
    REQUIRE(detail::cached_block_count() == 0);
  }
  REQUIRE(detail::cached_block_count() == 1);

  // A block goes back only when the last copy is gone.
  {
    Tensor a = Tensor::empty(DType::kUInt8, Shape{as_dim(48 * kKiB)});
    REQUIRE(a.raw_data() == block);
    const Tensor b = a;
    a = Tensor();
    REQUIRE(detail::cached_block_count() == 0);
  }
  REQUIRE(detail::cached_block_count() == 1);
}

TEST_CASE("Tensor: storage below 32 KiB is not cached", "[tensor][cache]") {
  const Tensor hog = empty_the_cache();
  STATIC_REQUIRE(detail::kMinCachedBytes == 32 * kKiB);
  { const Tensor t = Tensor::empty(DType::kUInt8, Shape{as_dim(32 * kKiB - 1)}); }
  { const Tensor t = Tensor::from<float>({1.0f, 2.0f}); }
  REQUIRE(detail::cached_block_count() == 0);
  { const Tensor t = Tensor::empty(DType::kUInt8, Shape{as_dim(32 * kKiB)}); }
  REQUIRE(detail::cached_block_count() == 1);
}

TEST_CASE("Tensor: the cache keeps at most kMaxCachedBlocks blocks", "[tensor][cache]") {
  const Tensor hog = empty_the_cache();
  {
    std::vector<Tensor> many;
    for (std::size_t i = 0; i < detail::kMaxCachedBlocks + 5; ++i) {
      many.push_back(Tensor::empty(DType::kUInt8, Shape{as_dim(32 * kKiB)}));
    }
  }
  REQUIRE(detail::cached_block_count() == detail::kMaxCachedBlocks);
}

// A large block arriving evicts as many old blocks as the byte budget needs (it once evicted
// only one, leaving 2 x 40 MiB cached against a 64 MiB limit).
TEST_CASE("Tensor: the cache keeps at most kMaxCachedBytesTotal bytes", "[tensor][cache]") {
  const Tensor hog = empty_the_cache();
  { const Tensor small = Tensor::empty(DType::kUInt8, Shape{as_dim(32 * kKiB)}); }
  REQUIRE(detail::cached_block_count() == 1);
  {
    const Tensor a = Tensor::empty(DType::kUInt8, Shape{as_dim(40 * kMiB)});
    const Tensor b = Tensor::empty(DType::kUInt8, Shape{as_dim(40 * kMiB)});
  }
  // 40 MiB + 40 MiB cannot both stay within 64 MiB: at most one of them may remain.
  REQUIRE(detail::cached_block_count() == 1);
}

}  // namespace
}  // namespace stoker
