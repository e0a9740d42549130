// Unit tests for include/stoker/vision/transforms.hpp and pipeline.hpp without decoding:
// torchvision's sizes, crop boxes and rounding, the random draws, option checking, the
// Pipeline's builder rules, and the output conversions (float32, bfloat16, float16).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <set>

#include "stoker/vision.hpp"
#include "vision/output.hpp"
#include "vision/resample.hpp"

using namespace stoker;
using namespace stoker::vision;
using Catch::Contains;

TEST_CASE("Resize sizes as torchvision: floor of size * long / short, max_size", "[vision]") {
  REQUIRE(Resize(256).output_size({300, 400}) == Size{256, 341});  // 341.33 -> 341
  REQUIRE(Resize(256).output_size({500, 333}) == Size{384, 256});  // 384.38 -> 384
  REQUIRE(Resize(256).output_size({257, 257}) == Size{256, 256});
  REQUIRE(Resize(224).output_size({1000, 100}) == Size{2240, 224});
  REQUIRE(Resize(224, Interpolation::kBilinear, 1000).output_size({1000, 100}) ==
          Size{1000, 100});  // long side capped, short int(1000 * 224 / 2240)
  REQUIRE(Resize(Size{10, 20}).output_size({300, 400}) == Size{10, 20});
  REQUIRE_THROWS_AS(Resize(0), std::invalid_argument);
  REQUIRE_THROWS_WITH(Resize(256, Interpolation::kBilinear, 200), Contains("max_size is 200"));
}

TEST_CASE("CenterCrop offsets round half to even, larger crops pad as torchvision", "[vision]") {
  REQUIRE(CenterCrop(224).box({257, 257}) == Rect{16, 16, 224, 224});  // 16.5 -> 16
  REQUIRE(CenterCrop(224).box({259, 259}) == Rect{18, 18, 224, 224});  // 17.5 -> 18
  REQUIRE(CenterCrop(224).box({256, 341}) == Rect{58, 16, 224, 224});  // 58.5 -> 58
  // Padding: (crop - side) // 2 on the left and top.
  REQUIRE(CenterCrop(Size{10, 9}).box({5, 4}) == Rect{-2, -2, 9, 10});
  REQUIRE(CenterCrop(Size{3, 9}).box({5, 4}) == Rect{-2, 1, 9, 3});
}

TEST_CASE("RandomResizedCrop draws boxes inside the image with area and ratio in range",
          "[vision]") {
  const RandomResizedCrop rrc(224);
  Generator rng(5);
  for (int i = 0; i < 2000; ++i) {
    const Rect b = rrc.sample(rng, Size{375, 500});
    REQUIRE(b.x >= 0);
    REQUIRE(b.y >= 0);
    REQUIRE(b.x + b.width <= 500);
    REQUIRE(b.y + b.height <= 375);
    const double area = static_cast<double>(b.width) * b.height / (500.0 * 375.0);
    REQUIRE(area >= 0.079);
    REQUIRE(area <= 1.0);
    const double ratio = static_cast<double>(b.width) / b.height;
    REQUIRE(ratio >= 0.74);
    REQUIRE(ratio <= 1.34);
  }
  // No attempt fits a 1 x 1000 strip: torchvision's fallback, the centred box at the nearest
  // ratio in range (here the full width, height round(1 / (4/3)) = 1).
  const Rect fallback =
      RandomResizedCrop(8, {0.9, 1.0}, {3.0 / 4.0, 4.0 / 3.0}).sample(rng, {1, 1000});
  REQUIRE(fallback == Rect{499, 0, 1, 1});
  // A 10-wide, 1000-tall image: the full width, height round(10 / 0.75) = 13.
  const Rect tall = RandomResizedCrop(8, {0.9, 1.0}).sample(rng, {1000, 10});
  REQUIRE(tall == Rect{0, 493, 10, 13});
}

TEST_CASE("RandomCrop pads as torchvision and draws uniform offsets", "[vision]") {
  const RandomCrop crop(32, Padding(4));
  const Padding p = crop.total_padding({32, 32});
  REQUIRE(p.left == 4);
  REQUIRE(p.bottom == 4);
  const RandomCrop grow(Size{40, 50}, Padding(1, 2), true);
  const Padding q = grow.total_padding({30, 30});  // padded 34 x 32: both sides by the shortfall
  REQUIRE(q.left == 1 + 18);
  REQUIRE(q.right == 1 + 18);
  REQUIRE(q.top == 2 + 6);
  REQUIRE(q.bottom == 2 + 6);
  Generator rng(3);
  std::set<int> lefts;
  for (int i = 0; i < 500; ++i) {
    const Rect b = crop.sample(rng, {40, 40});
    REQUIRE(b.width == 32);
    REQUIRE(b.x >= 0);
    REQUIRE(b.x <= 8);
    lefts.insert(b.x);
  }
  REQUIRE(lefts.size() == 9);
  REQUIRE_THROWS_WITH(crop.sample(rng, {20, 40}), Contains("larger than the (padded) image"));
}

TEST_CASE("ColorJitter ranges and draws follow torchvision", "[vision]") {
  const ColorJitter j(0.4, 1.5, 0, 0.1);
  REQUIRE(j.brightness == ColorJitter::Range{0.6, 1.4});
  REQUIRE(j.contrast == ColorJitter::Range{0.0, 2.5});  // max(0, 1 - 1.5)
  REQUIRE_FALSE(j.saturation);
  REQUIRE(j.hue == ColorJitter::Range{-0.1, 0.1});
  Generator rng(9);
  std::set<std::array<std::uint8_t, 4>> orders;
  for (int i = 0; i < 300; ++i) {
    const ColorJitter::Params p = j.sample(rng);
    REQUIRE(*p.brightness >= 0.6);
    REQUIRE(*p.brightness < 1.4);
    REQUIRE(*p.hue >= -0.1);
    REQUIRE(*p.hue < 0.1);
    REQUIRE_FALSE(p.saturation);
    std::array<std::uint8_t, 4> sorted = p.order;
    std::sort(sorted.begin(), sorted.end());
    REQUIRE(sorted == std::array<std::uint8_t, 4>{0, 1, 2, 3});
    orders.insert(p.order);
  }
  REQUIRE(orders.size() == 24);  // every permutation of the four adjustments occurs
  REQUIRE_THROWS_WITH(ColorJitter(0, 0, 0, 0.6), Contains("hue is 0.6"));
  REQUIRE_THROWS_WITH(ColorJitter(-1.0), Contains("brightness is -1"));
}

TEST_CASE("Pipeline rejects what torchvision would: after Normalize, uint8 normalised",
          "[vision]") {
  Pipeline p;
  p.then(Resize(8)).then(Normalize(kImageNetMean, kImageNetStd));
  REQUIRE(p.dtype() == DType::kFloat32);
  REQUIRE_THROWS_WITH(p.then(CenterCrop(4)), Contains("after Normalize"));
  REQUIRE_THROWS_WITH(p.output(DType::kUInt8), Contains("uint8 with Normalize"));
  REQUIRE_THROWS_WITH(Pipeline().output(DType::kInt32), Contains("dtype int32"));
  REQUIRE_THROWS_WITH(Normalize({0, 0, 0}, {1, 0, 1}), Contains("non-zero"));
  REQUIRE(Pipeline().dtype() == DType::kUInt8);
  REQUIRE(p.to_string() ==
          "Resize(8) -> Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, "
          "0.224, 0.225)) -> float32 CHW, exact");
}

TEST_CASE("Pipeline::output_size and is_random", "[vision]") {
  REQUIRE_FALSE(Pipeline().output_size());
  REQUIRE_FALSE(Pipeline{Resize(256)}.output_size());
  REQUIRE(Pipeline{Resize(256), CenterCrop(224)}.output_size() == Size{224, 224});
  REQUIRE(Pipeline{RandomResizedCrop(Size{100, 50}), RandomHorizontalFlip()}.output_size() ==
          Size{100, 50});
  REQUIRE_FALSE(Pipeline{Resize(256), CenterCrop(224)}.is_random());
  REQUIRE(Pipeline{Resize(256), RandomHorizontalFlip()}.is_random());
  // Copies are independent values.
  Pipeline a{Resize(10)};
  Pipeline b = a;
  b.then(CenterCrop(5)).mode(Mode::kFast);
  REQUIRE(a.transforms().size() == 1);
  REQUIRE(a.mode() == Mode::kExact);
  REQUIRE(b.transforms().size() == 2);
}

TEST_CASE("bfloat16 and float16 conversions round to nearest even", "[vision]") {
  REQUIRE(detail::to_bfloat16(1.0f) == 0x3f80);
  REQUIRE(detail::to_bfloat16(-2.5f) == 0xc020);
  // 1 + 2^-8 is halfway between two bfloat16 values: ties go to the even one (1.0).
  REQUIRE(detail::to_bfloat16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  REQUIRE(detail::to_bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  REQUIRE(detail::to_float16(1.0f) == 0x3c00);
  REQUIRE(detail::to_float16(-2.0f) == 0xc000);
  REQUIRE(detail::to_float16(65504.0f) == 0x7bff);
  REQUIRE(detail::to_float16(70000.0f) == 0x7c00);                          // overflow to infinity
  REQUIRE(detail::to_float16(std::ldexp(1.0f, -24)) == 0x0001);             // smallest subnormal
  REQUIRE(detail::to_float16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie to even
  REQUIRE(detail::to_float16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie to even
}

TEST_CASE("padding modes map indices as numpy.pad", "[vision]") {
  // n = 4: reflect  ... 2 1 | 0 1 2 3 | 2 1 0 1 ...; symmetric ... 1 0 | 0 1 2 3 | 3 2 ...
  REQUIRE(detail::pad_index(-1, 4, PaddingMode::kReflect) == 1);
  REQUIRE(detail::pad_index(-3, 4, PaddingMode::kReflect) == 3);
  REQUIRE(detail::pad_index(4, 4, PaddingMode::kReflect) == 2);
  REQUIRE(detail::pad_index(7, 4, PaddingMode::kReflect) == 1);
  REQUIRE(detail::pad_index(-1, 4, PaddingMode::kSymmetric) == 0);
  REQUIRE(detail::pad_index(4, 4, PaddingMode::kSymmetric) == 3);
  REQUIRE(detail::pad_index(9, 4, PaddingMode::kSymmetric) == 1);
  REQUIRE(detail::pad_index(-5, 4, PaddingMode::kEdge) == 0);
  REQUIRE(detail::pad_index(5, 4, PaddingMode::kConstant) == -1);
  REQUIRE(detail::pad_index(2, 4, PaddingMode::kConstant) == 2);
}
