// Unit tests for include/stoker/vision/transforms.hpp and pipeline.hpp without decoding:
// torchvision's sizes, crop boxes and rounding, the random draws, option checking, the
// Pipeline's builder rules, and the output conversions (float32, bfloat16, float16).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "stoker/vision.hpp"
#include "support/random_image.hpp"
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

namespace {

Image test_image(int width, int height, std::uint64_t seed = 1) {
  return stoker::test::random_image(width, height, 3, seed);
}

}  // namespace

TEST_CASE("RandomCrop's reflect and symmetric padding pads twice, as torchvision", "[vision]") {
  // torchvision pads `padding` first, then pad_if_needed's shortfall on the padded image;
  // reflecting the padded image is not one larger reflection of the original.
  const Image image = test_image(17, 13, 4);
  for (PaddingMode mode : {PaddingMode::kReflect, PaddingMode::kSymmetric, PaddingMode::kEdge,
                           PaddingMode::kConstant}) {
    const RandomCrop crop(40, Padding(2), true, {10, 20, 30}, mode);
    const Padding more = crop.shortfall_padding({13, 17});
    REQUIRE(more.left == 40 - 21);
    REQUIRE(more.top == 40 - 17);
    const Pipeline pipeline{crop};
    for (std::uint64_t seed = 0; seed < 5; ++seed) {
      Generator rng(seed);
      Trace trace;
      const Tensor got = pipeline.run(image, rng, "small", &trace);
      Image once;
      functional::crop(image, Rect{-2, -2, 21, 17}, once, {10, 20, 30}, mode);
      Image twice;
      functional::crop(once, Rect{-more.left, -more.top, 21 + 2 * more.left, 17 + 2 * more.top},
                       twice, {10, 20, 30}, mode);
      Image expected;
      functional::crop(twice, trace.boxes.at(0), expected);
      Image single;  // one padding by the total, which torchvision does not do
      const Padding total = crop.total_padding({13, 17});
      functional::crop(image,
                       Rect{-total.left, -total.top, 17 + 2 * total.left, 13 + 2 * total.top},
                       single, {10, 20, 30}, mode);
      const bool differs_from_single =
          mode == PaddingMode::kReflect || mode == PaddingMode::kSymmetric;
      Image single_crop;
      functional::crop(single, trace.boxes.at(0), single_crop);
      INFO("mode " << static_cast<int>(mode) << ", seed " << seed);
      REQUIRE(got.shape() == Shape({3, 40, 40}));
      const std::uint8_t* t = got.data<std::uint8_t>();
      bool equal_expected = true;
      bool equal_single = true;
      for (int c = 0; c < 3; ++c) {
        for (int y = 0; y < 40; ++y) {
          for (int x = 0; x < 40; ++x) {
            const std::uint8_t v = t[(c * 40 + y) * 40 + x];
            equal_expected &= v == expected.row(y)[x * 3 + c];
            equal_single &= v == single_crop.row(y)[x * 3 + c];
          }
        }
      }
      REQUIRE(equal_expected);
      REQUIRE(equal_single != differs_from_single);
    }
  }
}

TEST_CASE("a zero-sized output is an error naming the sizes, and an empty crop box is black",
          "[vision]") {
  // Resize(2, max_size=10) on a 1 x 37 image: 74 x 2 capped to 10 x int(10 * 2 / 74) = 0.
  const Image thin = test_image(1, 37);
  const Pipeline resize{Resize(2, Interpolation::kBilinear, 10)};
  Generator rng(0);
  REQUIRE(resize.transforms().size() == 1);
  REQUIRE_THROWS_AS(resize.run(thin, rng, "thin.png"), Error);
  REQUIRE_THROWS_WITH(resize.run(thin, rng, "thin.png"),
                      Contains("vision::Pipeline: thin.png (1 x 37): vision::Resize(2, "
                               "max_size=10): the image would become 10 x 0 (height x width)") &&
                          Contains("raise max_size"));
  // The other way round it fits: 37 wide, 1 tall becomes 0 x 10 as well.
  REQUIRE_THROWS_WITH(resize.run(test_image(37, 1), rng), Contains("would become 0 x 10"));
  // torchvision's RandomResizedCrop fallback on a 1 x 1 image with ratios (0.1, 0.2) is a box
  // 0 pixels wide; Pillow resizes the empty crop to black, and so does stoker.
  Image dot = test_image(1, 1);
  dot.pixels[0] = dot.pixels[1] = dot.pixels[2] = 200;
  const RandomResizedCrop sliver(4, {0.08, 1.0}, {0.1, 0.2});
  REQUIRE(sliver.sample(rng, {1, 1}) == Rect{0, 0, 0, 1});
  const Tensor black = Pipeline{sliver, RandomHorizontalFlip()}.run(dot, rng);
  REQUIRE(black.shape() == Shape({3, 4, 4}));
  const auto bytes = black.bytes();
  REQUIRE(std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; }));
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
  REQUIRE(vision::detail::to_bfloat16(1.0f) == 0x3f80);
  REQUIRE(vision::detail::to_bfloat16(-2.5f) == 0xc020);
  // 1 + 2^-8 is halfway between two bfloat16 values: ties go to the even one (1.0).
  REQUIRE(vision::detail::to_bfloat16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  REQUIRE(vision::detail::to_bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  REQUIRE(vision::detail::to_float16(1.0f) == 0x3c00);
  REQUIRE(vision::detail::to_float16(-2.0f) == 0xc000);
  REQUIRE(vision::detail::to_float16(65504.0f) == 0x7bff);
  REQUIRE(vision::detail::to_float16(70000.0f) == 0x7c00);               // overflow to infinity
  REQUIRE(vision::detail::to_float16(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  REQUIRE(vision::detail::to_float16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie to even
  REQUIRE(vision::detail::to_float16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie to even
}

TEST_CASE("padding modes map indices as numpy.pad", "[vision]") {
  // n = 4: reflect  ... 2 1 | 0 1 2 3 | 2 1 0 1 ...; symmetric ... 1 0 | 0 1 2 3 | 3 2 ...
  REQUIRE(vision::detail::pad_index(-1, 4, PaddingMode::kReflect) == 1);
  REQUIRE(vision::detail::pad_index(-3, 4, PaddingMode::kReflect) == 3);
  REQUIRE(vision::detail::pad_index(4, 4, PaddingMode::kReflect) == 2);
  REQUIRE(vision::detail::pad_index(7, 4, PaddingMode::kReflect) == 1);
  REQUIRE(vision::detail::pad_index(-1, 4, PaddingMode::kSymmetric) == 0);
  REQUIRE(vision::detail::pad_index(4, 4, PaddingMode::kSymmetric) == 3);
  REQUIRE(vision::detail::pad_index(9, 4, PaddingMode::kSymmetric) == 1);
  REQUIRE(vision::detail::pad_index(-5, 4, PaddingMode::kEdge) == 0);
  REQUIRE(vision::detail::pad_index(5, 4, PaddingMode::kConstant) == -1);
  REQUIRE(vision::detail::pad_index(2, 4, PaddingMode::kConstant) == 2);
}
