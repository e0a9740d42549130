// Unit tests for the augmentations of include/stoker/vision/transforms.hpp that recipes add to
// the crops: RandomVerticalFlip, Grayscale / RandomGrayscale, GaussianBlur, RandomRotation,
// TrivialAugmentWide, RandAugment and RandomErasing: their options, the ranges and
// reproducibility of their draws, the Pipeline's rules for them, and properties of their
// functional forms that hold without torchvision (tests/vision/parity.py compares the pixels
// with torchvision's).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "stoker/vision.hpp"
#include "support/random_image.hpp"
#include "vision/plan.hpp"
#include "vision/torch_ops.hpp"

using namespace stoker;
using namespace stoker::vision;
using Catch::Contains;

namespace {

using stoker::test::same_pixels;
Image test_image(int width, int height, int channels = 3, std::uint64_t seed = 1) {
  return stoker::test::random_image(width, height, channels, seed);
}

std::uint8_t at(const Image& image, int x, int y, int c = 0) {
  return image.row(y)[x * image.channels + c];
}

bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::equal(a.bytes().begin(), a.bytes().end(), b.bytes().begin());
}

}  // namespace

TEST_CASE("the new transforms check their options as torchvision does", "[vision]") {
  REQUIRE_THROWS_WITH(RandomVerticalFlip(1.5), Contains("RandomVerticalFlip: p is 1.5"));
  REQUIRE_THROWS_WITH(Grayscale(2), Contains("num_output_channels is 2; it must be 1 or 3"));
  REQUIRE_THROWS_WITH(RandomGrayscale(-0.1), Contains("RandomGrayscale: p is -0.1"));
  REQUIRE_THROWS_WITH(GaussianBlur(4), Contains("kernel_size is (4, 4); each must be odd"));
  REQUIRE_THROWS_WITH(GaussianBlur(std::pair{3, -1}), Contains("kernel_size is (3, -1)"));
  REQUIRE_THROWS_WITH(GaussianBlur(3, {2.0, 1.0}), Contains("sigma is (2, 1)"));
  REQUIRE_THROWS_WITH(GaussianBlur(3, 0.0), Contains("sigma is 0"));
  REQUIRE_THROWS_WITH(RandomRotation(-5.0), Contains("degrees is -5; a single value d"));
  REQUIRE_THROWS_WITH(RandomRotation({10.0, -10.0}), Contains("degrees is (10, -10)"));
  REQUIRE_THROWS_WITH(TrivialAugmentWide(1), Contains("num_magnitude_bins is 1"));
  REQUIRE_THROWS_WITH(RandAugment(2, 31), Contains("magnitude is 31; it must be a bin in"));
  REQUIRE_THROWS_WITH(RandAugment(-1), Contains("num_ops is -1"));
  REQUIRE_THROWS_WITH(RandomErasing(0.5, {0.2, 1.5}), Contains("scale is (0.2, 1.5)"));
  REQUIRE_THROWS_WITH(RandomErasing(0.5, {0.02, 0.33}, {0.0, 3.3}), Contains("ratio is (0, 3.3)"));
  REQUIRE_THROWS_WITH(RandomErasing(2.0), Contains("RandomErasing: p is 2"));
  REQUIRE(RandomRotation(30.0).degrees == std::pair{-30.0, 30.0});
  REQUIRE(GaussianBlur(std::pair{5, 3}).kernel_x == 5);
  REQUIRE(GaussianBlur(std::pair{5, 3}).kernel_y == 3);
  REQUIRE(Normalize(0.5f, 0.25f).std == std::array<float, 3>{0.25f, 0.25f, 0.25f});
}

TEST_CASE("the random parameters stay in range and repeat with the generator", "[vision]") {
  const RandomRotation rotation({-10.0, 40.0});
  const GaussianBlur blur(5, {0.1, 2.0});
  Generator rng(21);
  double lowest = 1e9;
  double highest = -1e9;
  for (int i = 0; i < 3000; ++i) {
    const double angle = rotation.sample(rng);
    REQUIRE(angle >= -10.0);
    REQUIRE(angle < 40.0);
    lowest = std::min(lowest, angle);
    highest = std::max(highest, angle);
    const double sigma = blur.sample(rng);
    REQUIRE(sigma >= 0.1);
    REQUIRE(sigma < 2.0);
  }
  REQUIRE(lowest < -9.9);  // the whole range is drawn
  REQUIRE(highest > 39.9);
  // TrivialAugmentWide: every op and bin occurs; only the signed ops are ever negative.
  const TrivialAugmentWide trivial;
  std::set<AugmentOp> ops;
  std::set<int> bins;
  std::map<AugmentOp, int> negative;
  for (int i = 0; i < 5000; ++i) {
    const std::vector<AugmentStep> steps = trivial.sample(rng, {224, 224});
    REQUIRE(steps.size() == 1);
    const AugmentStep& s = steps[0];
    ops.insert(s.op);
    bins.insert(s.bin);
    REQUIRE(s.bin >= 0);
    REQUIRE(s.bin < 31);
    REQUIRE(std::abs(s.magnitude) == augment_magnitude(s.op, s.bin, 31, true, {224, 224}));
    if (s.magnitude < 0) ++negative[s.op];
    if (s.magnitude < 0) REQUIRE(augment_op_signed(s.op));
  }
  REQUIRE(ops.size() == kAugmentOps);
  REQUIRE(bins.size() == 31);
  REQUIRE(negative.size() == 9);  // the shears, translations, rotation and the four enhances
  // RandAugment: num_ops steps, all at bin `magnitude`.
  const RandAugment rand_augment(3, 12);
  for (int i = 0; i < 500; ++i) {
    for (const AugmentStep& s : rand_augment.sample(rng, {100, 300})) {
      const bool plain = s.op == AugmentOp::kIdentity || s.op == AugmentOp::kAutoContrast ||
                         s.op == AugmentOp::kEqualize;
      REQUIRE(s.bin == (plain ? 0 : 12));
    }
    REQUIRE(rand_augment.sample(rng, {100, 300}).size() == 3);
  }
  // RandomErasing: boxes inside the image, area and aspect ratio in range.
  const RandomErasing erasing(1.0, {0.02, 0.33}, {0.3, 3.3});
  int erased = 0;
  for (int i = 0; i < 2000; ++i) {
    const RandomErasing::Params p = erasing.sample(rng, {60, 80}, 3);
    if (!p.erase) continue;
    ++erased;
    const Rect& b = p.box;
    REQUIRE(b.x >= 0);
    REQUIRE(b.y >= 0);
    REQUIRE(b.x + b.width <= 80);
    REQUIRE(b.y + b.height <= 60);
    REQUIRE(b.width < 80);
    REQUIRE(b.height < 60);
    REQUIRE(p.values.empty());
  }
  REQUIRE(erased > 1900);
  const RandomErasing noise(1.0, {0.02, 0.33}, {0.3, 3.3}, RandomErasing::kRandom);
  const RandomErasing::Params p = noise.sample(rng, {60, 80}, 3);
  REQUIRE(p.erase);
  REQUIRE(p.values.size() == static_cast<std::size_t>(3 * p.box.width * p.box.height));
  REQUIRE_FALSE(RandomErasing(0.0).sample(rng, {60, 80}, 3).erase);
  // The same seed draws the same parameters.
  Generator a(77);
  Generator b(77);
  for (int i = 0; i < 50; ++i) {
    REQUIRE(rotation.sample(a) == rotation.sample(b));
    REQUIRE(trivial.sample(a, {50, 60}) == trivial.sample(b, {50, 60}));
    REQUIRE(rand_augment.sample(a, {50, 60}) == rand_augment.sample(b, {50, 60}));
    REQUIRE(noise.sample(a, {60, 80}, 3).values == noise.sample(b, {60, 80}, 3).values);
  }
}

TEST_CASE("the augment ops' magnitude bins are torchvision's", "[vision]") {
  // torchvision: torch.linspace(0, 0.99, 31), (0, 32), (0, 135); posterize 8 - round(i / 5);
  // solarize from 255 down to 0. Spot values (the parity test compares every bin).
  REQUIRE(augment_magnitude(AugmentOp::kShearX, 0, 31, true, {}) == 0.0);
  REQUIRE(augment_magnitude(AugmentOp::kShearX, 30, 31, true, {}) == static_cast<double>(0.99f));
  REQUIRE(augment_magnitude(AugmentOp::kRotate, 30, 31, true, {}) == 135.0);
  REQUIRE(augment_magnitude(AugmentOp::kRotate, 30, 31, false, {}) == 30.0);
  REQUIRE(augment_magnitude(AugmentOp::kTranslateX, 30, 31, false, {100, 331}) == 150.0);
  REQUIRE(augment_magnitude(AugmentOp::kPosterize, 0, 31, true, {}) == 8.0);
  REQUIRE(augment_magnitude(AugmentOp::kPosterize, 30, 31, true, {}) == 2.0);
  REQUIRE(augment_magnitude(AugmentOp::kPosterize, 30, 31, false, {}) == 4.0);
  REQUIRE(augment_magnitude(AugmentOp::kSolarize, 0, 31, true, {}) == 255.0);
  REQUIRE(augment_magnitude(AugmentOp::kSolarize, 30, 31, true, {}) == 0.0);
  REQUIRE(augment_magnitude(AugmentOp::kEqualize, 7, 31, true, {}) == 0.0);
  REQUIRE(augment_op_name(AugmentOp::kAutoContrast) == "AutoContrast");
  // torch.linspace(-2, 2, 5) and GaussianBlur's kernel: symmetric, summing to one.
  for (int i = 0; i < 5; ++i) {
    REQUIRE(vision::detail::torch_linspace(-2.0f, 2.0f, 5, i) == static_cast<float>(i) - 2.0f);
  }
  for (int size : {1, 3, 9, 23, 41}) {
    const std::vector<float> k = vision::detail::gaussian_kernel1d(size, 1.7);
    REQUIRE(k.size() == static_cast<std::size_t>(size));
    double sum = 0;
    for (float v : k) sum += v;
    REQUIRE(sum == Approx(1.0).epsilon(1e-6));
    REQUIRE(std::equal(k.begin(), k.end(), k.rbegin()));
  }
}

TEST_CASE("functional geometry: flips, quarter turns and rotations", "[vision]") {
  const Image image = test_image(5, 3, 3, 2);
  Image flipped = image;
  functional::vflip(flipped);
  REQUIRE(at(flipped, 1, 0, 2) == at(image, 1, 2, 2));
  functional::vflip(flipped);
  REQUIRE(same_pixels(flipped, image));
  Image out;
  // Pillow's rotate by 90 (counter-clockwise) with expand: the top row comes from the right
  // column.
  functional::rotate(image, 90, Interpolation::kBilinear, true, std::nullopt, {0, 0, 0}, out);
  REQUIRE(out.width == 3);
  REQUIRE(out.height == 5);
  for (int x = 0; x < 5; ++x) {
    for (int y = 0; y < 3; ++y) REQUIRE(at(out, y, 4 - x, 1) == at(image, x, y, 1));
  }
  functional::rotate(image, -180, Interpolation::kNearest, false, std::nullopt, {0, 0, 0}, out);
  Image both = image;
  functional::hflip(both);
  functional::vflip(both);
  REQUIRE(same_pixels(out, both));
  functional::rotate(image, 720, Interpolation::kBicubic, false, std::nullopt, {0, 0, 0}, out);
  REQUIRE(same_pixels(out, image));
  // 45 degrees with expand: Pillow's size, ceil(max) - floor(min) of the turned corners.
  REQUIRE(vision::detail::rotated_size({100, 200}, 45, true, std::nullopt) == Size{214, 214});
  REQUIRE(vision::detail::rotated_size({100, 200}, 45, false, std::nullopt) == Size{100, 200});
  REQUIRE(vision::detail::rotated_size({100, 200}, 90, true, std::nullopt) == Size{200, 100});
  // A rotation uncovers corners: they take the fill.
  const Image square = test_image(20, 20);
  functional::rotate(square, 45, Interpolation::kNearest, false, std::nullopt, {1, 2, 3}, out);
  REQUIRE(at(out, 0, 0, 0) == 1);
  REQUIRE(at(out, 0, 0, 2) == 3);
  functional::affine(square, 0, {5, 0}, 1.0, {0, 0}, Interpolation::kNearest, {9, 9, 9},
                     std::nullopt, out);
  REQUIRE(at(out, 4, 7, 1) == 9);
  REQUIRE(at(out, 5, 7, 1) == at(square, 0, 7, 1));
  // A grey image takes one fill value.
  const Image grey = test_image(8, 8, 1);
  REQUIRE_THROWS_WITH(
      functional::rotate(grey, 10, Interpolation::kNearest, false, std::nullopt, {1, 2, 3}, out),
      Contains("fill is (1, 2, 3) but the image is grey"));
  REQUIRE_THROWS_WITH(functional::affine(square, 0, {0, 0}, 0.0, {0, 0}, Interpolation::kNearest,
                                         {0, 0, 0}, std::nullopt, out),
                      Contains("scale is 0"));
}

TEST_CASE("functional colour ops: grayscale, blur, posterize, solarize, autocontrast, equalize",
          "[vision]") {
  Image image = test_image(6, 4);
  Image grey;
  functional::rgb_to_grayscale(image, 1, grey);
  REQUIRE(grey.channels == 1);
  const std::uint8_t* p = image.row(2) + 3 * 3;
  REQUIRE(at(grey, 3, 2) == (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
  Image grey3;
  functional::rgb_to_grayscale(image, 3, grey3);
  REQUIRE(at(grey3, 3, 2, 1) == at(grey, 3, 2));
  // A blur of a flat image is the image; a kernel wider than the image is refused.
  Image flat;
  flat.reset(9, 7, 3);
  std::fill(flat.pixels.begin(), flat.pixels.end(), std::uint8_t{77});
  Image blurred;
  functional::gaussian_blur(flat, 5, 5, 1.5, 1.5, blurred);
  REQUIRE(same_pixels(blurred, flat));
  REQUIRE_THROWS_WITH(functional::gaussian_blur(flat, 19, 3, 1.0, 1.0, blurred),
                      Contains("too small for a (19, 3) kernel"));
  REQUIRE_THROWS_WITH(functional::gaussian_blur(flat, 4, 3, 1.0, 1.0, blurred),
                      Contains("kernel_size is (4, 3)"));
  Image lut;
  lut.reset(4, 1, 1);
  lut.pixels[0] = 0;
  lut.pixels[1] = 100;
  lut.pixels[2] = 127;
  lut.pixels[3] = 255;
  Image poster = lut;
  functional::posterize(poster, 2);
  REQUIRE(std::vector<int>(poster.pixels.begin(), poster.pixels.begin() + 4) ==
          std::vector<int>{0, 64, 64, 192});
  Image sun = lut;
  functional::solarize(sun, 127);
  REQUIRE(std::vector<int>(sun.pixels.begin(), sun.pixels.begin() + 4) ==
          std::vector<int>{0, 100, 128, 0});
  Image stretch = lut;
  stretch.pixels[0] = 50;
  stretch.pixels[3] = 150;
  functional::autocontrast(stretch);
  REQUIRE(std::vector<int>(stretch.pixels.begin(), stretch.pixels.begin() + 4) ==
          std::vector<int>{0, 127, 196, 255});  // int(i * 2.55 - 127.5)
  Image eq = lut;
  functional::equalize(eq);  // step (4 - 1) // 255 = 0: left as it is
  REQUIRE(same_pixels(eq, lut));
  REQUIRE_THROWS_WITH(functional::posterize(poster, 9), Contains("bits is 9"));
  // Sharpness 1 is the image itself; 0 is Pillow's SMOOTH inside a border left as it is.
  Image sharp = image;
  functional::adjust_sharpness(sharp, 1.0);
  REQUIRE(same_pixels(sharp, image));
  functional::adjust_sharpness(sharp, 0.0);
  REQUIRE(at(sharp, 0, 1, 0) == at(image, 0, 1, 0));
  REQUIRE(at(sharp, 5, 3, 2) == at(image, 5, 3, 2));
  // Identity leaves the image; an op on a copy equals the functional form.
  Image copy = image;
  functional::apply_augment(copy, {AugmentOp::kIdentity, 0, 0}, Interpolation::kNearest, {0, 0, 0});
  REQUIRE(same_pixels(copy, image));
  functional::apply_augment(copy, {AugmentOp::kSolarize, 127, 0}, Interpolation::kNearest,
                            {0, 0, 0});
  Image solarized = image;
  functional::solarize(solarized, 127);
  REQUIRE(same_pixels(copy, solarized));
}

TEST_CASE("functional::erase writes a box of a tensor in its dtype and layout", "[vision]") {
  Tensor chw = Tensor::empty(DType::kFloat32, {3, 4, 5});
  std::fill_n(chw.data<float>(), chw.numel(), 1.0f);
  const std::vector<float> values{0.25f, 0.5f, 0.75f};
  functional::erase(chw, Layout::kCHW, Rect{1, 2, 3, 2}, values);
  const float* f = chw.data<float>();
  REQUIRE(f[(0 * 4 + 2) * 5 + 1] == 0.25f);
  REQUIRE(f[(2 * 4 + 3) * 5 + 3] == 0.75f);
  REQUIRE(f[(1 * 4 + 1) * 5 + 1] == 1.0f);  // above the box
  REQUIRE(f[(1 * 4 + 2) * 5 + 4] == 1.0f);  // right of it
  Tensor hwc = Tensor::empty(DType::kUInt8, {4, 5, 3});
  std::fill_n(hwc.data<std::uint8_t>(), hwc.numel(), std::uint8_t{9});
  const std::vector<float> one{300.7f};  // torch's cast: truncated, then modulo 256
  functional::erase(hwc, Layout::kHWC, Rect{0, 0, 2, 1}, one);
  REQUIRE(hwc.data<std::uint8_t>()[0] == 44);
  REQUIRE(hwc.data<std::uint8_t>()[5] == 44);
  REQUIRE(hwc.data<std::uint8_t>()[6] == 9);
  REQUIRE_THROWS_WITH(functional::erase(hwc, Layout::kHWC, Rect{4, 0, 2, 1}, one),
                      Contains("is not inside the 5 x 4 image"));
  const std::vector<float> two{1.0f, 2.0f};
  REQUIRE_THROWS_WITH(functional::erase(hwc, Layout::kHWC, Rect{0, 0, 2, 1}, two),
                      Contains("2 values for a 3-channel box"));
}

TEST_CASE("Pipeline rules for grey outputs and the tensor transforms", "[vision]") {
  // Grayscale(1): a [1, H, W] tensor; Normalize then takes one value for all channels.
  const Image image = test_image(30, 20);
  Generator rng(1);
  const Pipeline grey{Grayscale(), CenterCrop(10), Normalize(0.5f, 0.25f)};
  REQUIRE(grey.channels() == 1);
  const Tensor g = grey.run(image, rng);
  REQUIRE(g.shape() == Shape({1, 10, 10}));
  Image luma;
  functional::rgb_to_grayscale(image, 1, luma);
  REQUIRE(g.data<float>()[0] == (static_cast<float>(at(luma, 10, 5)) / 255.0f - 0.5f) / 0.25f);
  REQUIRE_THROWS_WITH((Pipeline{Grayscale(), Normalize(kImageNetMean, kImageNetStd)}),
                      Contains("Normalize has mean (0.485"));
  REQUIRE_THROWS_WITH((Pipeline{Grayscale(), RandomRotation(10.0, Interpolation::kNearest, false,
                                                            std::nullopt, {1, 2, 3})}),
                      Contains("RandomRotation has fill (1, 2, 3)"));
  REQUIRE(Pipeline{Grayscale(3)}.channels() == 3);
  REQUIRE(Pipeline{Grayscale(3)}.run(image, rng).shape() == Shape({3, 20, 30}));
  // RandomErasing works on the tensor: only Normalize or RandomErasing may follow it.
  REQUIRE_THROWS_WITH((Pipeline{RandomErasing(), CenterCrop(4)}),
                      Contains("an image transform after RandomErasing"));
  REQUIRE_THROWS_WITH((Pipeline{Normalize(kImageNetMean, kImageNetStd), CenterCrop(4)}),
                      Contains("an image transform after Normalize"));
  REQUIRE_THROWS_WITH(
      (Pipeline{Normalize(kImageNetMean, kImageNetStd), Normalize(kImageNetMean, kImageNetStd)}),
      Contains("a second Normalize"));
  REQUIRE_NOTHROW(Pipeline{CenterCrop(8), RandomErasing(), Normalize(kImageNetMean, kImageNetStd),
                           RandomErasing()});
  // Erasing before Normalize normalises the value; after, it is written as it is.
  const RandomErasing always(1.0, {0.1, 0.3}, {0.5, 2.0}, 0.5f);
  for (bool before : {true, false}) {
    Pipeline p{CenterCrop(16)};
    if (before) p.then(always);
    p.then(Normalize(kImageNetMean, kImageNetStd));
    if (!before) p.then(always);
    Generator g1(4);
    Trace trace;
    const Tensor t = p.run(image, g1, "", &trace);
    REQUIRE(trace.erasures.size() == 1);
    REQUIRE(trace.erasures[0].erase);
    const Rect& b = trace.erasures[0].box;
    const float v = t.data<float>()[(2 * 16 + b.y) * 16 + b.x];  // the blue channel
    REQUIRE(v == (before ? (0.5f - kImageNetMean[2]) / kImageNetStd[2] : 0.5f));
  }
  // Output sizes, randomness, names.
  REQUIRE_FALSE(
      Pipeline{CenterCrop(10), RandomRotation(10.0, Interpolation::kNearest, true)}.output_size());
  REQUIRE(Pipeline{CenterCrop(10), RandomRotation(10.0)}.output_size() == Size{10, 10});
  REQUIRE(Pipeline{GaussianBlur(3)}.is_random());
  REQUIRE(Pipeline{RandAugment()}.is_random());
  REQUIRE_FALSE(Pipeline{Grayscale(), Resize(8)}.is_random());
  REQUIRE(Pipeline{RandomVerticalFlip(), TrivialAugmentWide(), RandomErasing()}.to_string() ==
          "RandomVerticalFlip(p=0.5) -> TrivialAugmentWide(num_magnitude_bins=31, "
          "interpolation=nearest) -> "
          "RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=(0, 0, 0)) -> uint8 "
          "CHW, exact");
}

TEST_CASE("a pipeline of the new transforms repeats with its seed and records its draws",
          "[vision]") {
  const Image image = test_image(64, 48, 3, 5);
  const Pipeline p{RandomVerticalFlip(),
                   RandomGrayscale(0.5),
                   GaussianBlur(3),
                   RandomRotation(20.0, Interpolation::kBilinear),
                   TrivialAugmentWide(),
                   RandAugment(2, 9),
                   CenterCrop(32),
                   Normalize(kImageNetMean, kImageNetStd),
                   RandomErasing(0.5, {0.02, 0.33}, {0.3, 3.3}, RandomErasing::kRandom)};
  std::set<std::vector<std::byte>> outputs;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    Generator a(seed);
    Generator b(seed);
    Trace trace;
    const Tensor x = p.run(image, a, "", &trace);
    const Tensor y = p.run(image, b);
    REQUIRE(same_tensor(x, y));
    REQUIRE(x.shape() == Shape({3, 32, 32}));
    REQUIRE(trace.vflips.size() == 1);
    REQUIRE(trace.grays.size() == 1);
    REQUIRE(trace.sigmas.size() == 1);
    REQUIRE(trace.angles.size() == 1);
    REQUIRE(trace.augments.size() == 2);
    REQUIRE(trace.augments[0].size() == 1);
    REQUIRE(trace.augments[1].size() == 2);
    REQUIRE(trace.erasures.size() == 1);
    outputs.insert(std::vector<std::byte>(x.bytes().begin(), x.bytes().end()));
  }
  REQUIRE(outputs.size() == 20);  // other seeds, other draws
}
