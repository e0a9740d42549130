// Unit tests for include/stoker/vision/image.hpp: format sniffing, headers, JPEG / PNG / WebP
// decoding (colour modes, regions, DCT scales) and errors for corrupt, truncated or unknown
// bytes, which must never crash, and a truncated file failing the same way whatever region a
// pipeline decodes; and a Pipeline run on decoded bytes.
#include <catch2/catch.hpp>

#include <functional>
#include <string>

#include "stoker/vision.hpp"
#include "support/images.hpp"

using namespace stoker;
using namespace stoker::vision;
using Catch::Contains;

namespace {

double mean_abs_diff(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
  double d = 0;
  for (std::size_t i = 0; i < n; ++i) d += std::abs(int(a[i]) - int(b[i]));
  return d / static_cast<double>(n);
}

}  // namespace

TEST_CASE("sniff_format and read_info read the magic numbers and headers", "[vision]") {
  const auto rgb = test::photo_pixels(40, 30);
  const auto jpeg = test::encode_jpeg(rgb, 40, 30);
  const auto png = test::encode_png(rgb, 40, 30);
  const auto webp = test::encode_webp(rgb, 40, 30);
  REQUIRE(sniff_format(jpeg) == ImageFormat::kJpeg);
  REQUIRE(sniff_format(png) == ImageFormat::kPng);
  REQUIRE(sniff_format(webp) == ImageFormat::kWebp);
  REQUIRE(sniff_format(std::vector<std::uint8_t>{'G', 'I', 'F', '8'}) == ImageFormat::kUnknown);
  for (const auto* bytes : {&jpeg, &png, &webp}) {
    const ImageInfo info = read_info(*bytes);
    REQUIRE(info.width == 40);
    REQUIRE(info.height == 30);
    REQUIRE(info.channels == 3);
  }
  REQUIRE(format_name(ImageFormat::kWebp) == "WebP");
}

TEST_CASE("decode gives RGB, grey and RGBA, lossless formats give the pixels back", "[vision]") {
  const auto rgb = test::photo_pixels(33, 17, 4);
  const Image png = decode(test::encode_png(rgb, 33, 17));
  REQUIRE(png.width == 33);
  REQUIRE(png.height == 17);
  REQUIRE(png.channels == 3);
  REQUIRE(std::equal(rgb.begin(), rgb.end(), png.pixels.begin()));
  const Image webp = decode(test::encode_webp(rgb, 33, 17, true));
  REQUIRE(std::equal(rgb.begin(), rgb.end(), webp.pixels.begin()));
  const Image jpeg = decode(test::encode_jpeg(rgb, 33, 17, TJSAMP_444));
  REQUIRE(mean_abs_diff(jpeg.pixels.data(), rgb.data(), rgb.size()) < 3.0);

  DecodeOptions grey;
  grey.color = ColorMode::kGray;
  const Image g = decode(test::encode_png(rgb, 33, 17), grey);
  REQUIRE(g.channels == 1);
  // Pillow's L: (19595 R + 38470 G + 7471 B + 2^15) >> 16.
  REQUIRE(g.pixels[0] == ((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 32768) >> 16));
  DecodeOptions rgba;
  rgba.color = ColorMode::kRGBA;
  const Image a = decode(test::encode_jpeg(rgb, 33, 17), rgba);
  REQUIRE(a.channels == 4);
  REQUIRE(a.pixels[3] == 255);
}

TEST_CASE("a region decodes only what it needs and matches the full decode", "[vision]") {
  const auto rgb = test::photo_pixels(300, 200, 6);
  for (const auto& bytes : {test::encode_jpeg(rgb, 300, 200, TJSAMP_420),
                            test::encode_jpeg(rgb, 300, 200, TJSAMP_444, true),
                            test::encode_png(rgb, 300, 200), test::encode_webp(rgb, 300, 200)}) {
    const Image full = decode(bytes);
    DecodeOptions o;
    o.roi = Rect{101, 37, 80, 90};
    const Image part = decode(bytes, o);
    // At least the region: JPEG starts at an MCU boundary at or left of x = 101.
    REQUIRE(part.x <= 101);
    REQUIRE(part.y <= 37);
    REQUIRE(part.x + part.width >= 181);
    REQUIRE(part.y + part.height >= 127);
    // Away from the region's cut edges (libjpeg upsamples a cut edge as an image edge), the
    // same pixels as the full decode.
    for (int y = 45; y < 120; ++y) {
      const std::uint8_t* a = full.row(y) + 110 * 3;
      const std::uint8_t* b = part.row(y - part.y) + (110 - part.x) * 3;
      REQUIRE(std::equal(a, a + 60 * 3, b));
    }
  }
}

TEST_CASE("JPEG DCT scaling: 1/2, 1/4, 1/8 of the size, others rejected", "[vision]") {
  const auto rgb = test::photo_pixels(250, 130, 2);
  const auto bytes = test::encode_jpeg(rgb, 250, 130);
  for (int d : {2, 4, 8}) {
    DecodeOptions o;
    o.scale_denom = d;
    const Image image = decode(bytes, o);
    REQUIRE(image.width == (250 + d - 1) / d);
    REQUIRE(image.height == (130 + d - 1) / d);
    REQUIRE(image.scale_denom == d);
    REQUIRE(image.full_width == 250);
  }
  DecodeOptions bad;
  bad.scale_denom = 3;
  REQUIRE_THROWS_WITH(decode(bytes, bad), Contains("scale_denom is 3"));
  // PNG decodes at full size and says so.
  DecodeOptions half;
  half.scale_denom = 2;
  REQUIRE(decode(test::encode_png(rgb, 250, 130), half).scale_denom == 1);
}

TEST_CASE("corrupt, truncated and unknown bytes are DecodeErrors naming the source", "[vision]") {
  const auto rgb = test::photo_pixels(64, 48, 3);
  REQUIRE_THROWS_WITH(decode(std::vector<std::uint8_t>{}, {}, "empty.jpg"),
                      Contains("cannot decode empty.jpg: it is empty"));
  REQUIRE_THROWS_WITH(decode(std::vector<std::uint8_t>{'n', 'o', 'p', 'e'}, {}, "x.png"),
                      Contains("6e 6f 70 65"));
  auto jpeg = test::encode_jpeg(rgb, 64, 48);
  jpeg.resize(jpeg.size() / 2);
  REQUIRE_THROWS_AS(decode(jpeg, {}, "half.jpg"), DecodeError);
  REQUIRE_THROWS_WITH(decode(jpeg, {}, "half.jpg"), Contains("truncated"));
  auto png = test::encode_png(rgb, 64, 48);
  png.resize(png.size() - 30);
  REQUIRE_THROWS_WITH(decode(png, {}, "cut.png"), Contains("cannot decode cut.png"));
  auto webp = test::encode_webp(rgb, 64, 48);
  webp.resize(webp.size() / 2);
  REQUIRE_THROWS_WITH(decode(webp, {}, "cut.webp"), Contains("cannot decode cut.webp"));
  DecodeOptions outside;
  outside.roi = Rect{100, 100, 5, 5};
  REQUIRE_THROWS_WITH(decode(test::encode_png(rgb, 64, 48), outside), Contains("lies outside"));
  // Flipped bytes anywhere: an image or a DecodeError, never a crash; decoding goes on after.
  Generator rng(17);
  for (const auto& good : {test::encode_jpeg(rgb, 64, 48), test::encode_png(rgb, 64, 48),
                           test::encode_webp(rgb, 64, 48)}) {
    int errors = 0;
    for (int trial = 0; trial < 150; ++trial) {
      auto bad = good;
      for (int k = 0; k < 4; ++k)
        bad[rng.below(bad.size())] = static_cast<std::uint8_t>(rng.next());
      if (trial % 3 == 0) bad.resize(rng.below(bad.size()));
      try {
        const Image image = decode(bad);
        REQUIRE(image.width > 0);
      } catch (const DecodeError&) {
        ++errors;
      }
    }
    REQUIRE(errors > 0);
    REQUIRE(decode(good).width == 64);
  }
}

TEST_CASE("Pipeline on encoded bytes: the fixed val pipeline, explicit generators", "[vision]") {
  const auto rgb = test::photo_pixels(320, 240, 8);
  const auto bytes = test::encode_jpeg(rgb, 320, 240);
  const Pipeline val{Resize(256), CenterCrop(224)};
  // A pipeline without random transforms runs anywhere (no sample_rng() needed).
  const Tensor t = val(bytes, "a.jpg");
  REQUIRE(t.shape() == Shape({3, 224, 224}));
  REQUIRE(t.dtype() == DType::kUInt8);
  // The same image decoded first gives the same tensor.
  const Tensor u = val(decode(bytes));
  REQUIRE(std::equal(t.bytes().begin(), t.bytes().end(), u.bytes().begin()));
  // Random transforms draw from the generator given: the same seed, the same draws.
  const Pipeline train =
      Pipeline{RandomResizedCrop(64), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4, 0.1),
               Normalize(kImageNetMean, kImageNetStd)};
  Generator g1(5);
  Generator g2(5);
  Trace trace;
  const Tensor a = train.run(bytes, g1, "a.jpg", &trace);
  const Tensor b = train.run(bytes, g2);
  REQUIRE(a.dtype() == DType::kFloat32);
  REQUIRE(a.shape() == Shape({3, 64, 64}));
  REQUIRE(std::equal(a.bytes().begin(), a.bytes().end(), b.bytes().begin()));
  REQUIRE(trace.decoded == Size{240, 320});
  REQUIRE(trace.boxes.size() == 1);
  REQUIRE(trace.flips.size() == 1);
  REQUIRE(trace.jitters.size() == 1);
  // Outside a dataset's get(), a random pipeline's operator() is a logic_error.
  REQUIRE_THROWS_AS(train(bytes), std::logic_error);
  // Data-dependent impossibilities are errors naming the image.
  const Pipeline crop{RandomCrop(400)};
  Generator g3(1);
  REQUIRE_THROWS_WITH(crop.run(bytes, g3, "small.jpg"), Contains("small.jpg (320 x 240)"));
}

TEST_CASE("fast mode decodes at a DCT scale only where the output keeps its resolution",
          "[vision]") {
  const auto rgb = test::photo_pixels(1600, 1200, 9);
  const auto bytes = test::encode_jpeg(rgb, 1600, 1200);
  const Pipeline exact{Resize(200), CenterCrop(180)};
  const Pipeline fast = Pipeline(exact).mode(Mode::kFast);
  const Tensor a = exact(bytes);
  const Tensor b = fast(bytes);
  REQUIRE(a.shape() == b.shape());
  const double d = mean_abs_diff(a.data<std::uint8_t>(), b.data<std::uint8_t>(), a.nbytes());
  INFO("mean |exact - fast| " << d);
  REQUIRE(d > 0.0);  // 1200 -> 200 at 1/4 scale: not the same pixels...
  REQUIRE(d < 2.0);  // ... but nearly
  // A small image has no scale that keeps the resolution: fast is exact.
  const auto small = test::encode_jpeg(test::photo_pixels(300, 260, 2), 300, 260);
  const Tensor c = exact(small);
  const Tensor e = fast(small);
  REQUIRE(std::equal(c.bytes().begin(), c.bytes().end(), e.bytes().begin()));
}

namespace {

// What a decode or pipeline run did with the bytes: "" for a tensor, else the DecodeError's
// text (any other exception fails the test).
std::string outcome(const std::function<void()>& run) {
  try {
    run();
    return "";
  } catch (const DecodeError& e) {
    return e.what();
  }
}

}  // namespace

TEST_CASE("a truncated image fails the same way whatever the crop, as Pillow's load does",
          "[vision]") {
  const int w = 600;
  const int h = 450;
  const auto rgb = test::photo_pixels(w, h, 11);
  const auto jpeg = test::encode_jpeg(rgb, w, h);
  const auto progressive = test::encode_jpeg(rgb, w, h, TJSAMP_420, true);
  const auto png = test::encode_png(rgb, w, h);
  auto cut = [](std::vector<std::uint8_t> bytes, double keep) {
    bytes.resize(static_cast<std::size_t>(static_cast<double>(bytes.size()) * keep));
    return bytes;
  };
  auto without_eoi = [](std::vector<std::uint8_t> bytes) {
    REQUIRE(bytes[bytes.size() - 2] == 0xff);
    REQUIRE(bytes[bytes.size() - 1] == 0xd9);
    bytes.resize(bytes.size() - 2);
    return bytes;
  };
  const std::vector<std::pair<std::string, std::vector<std::uint8_t>>> damaged = {
      {"jpeg cut at 99%", cut(jpeg, 0.99)},
      {"jpeg without its end-of-image marker", without_eoi(jpeg)},
      {"progressive jpeg cut at 99%", cut(progressive, 0.99)},
      {"png cut at 90%", cut(png, 0.90)},
  };
  const Pipeline val{Resize(256), CenterCrop(224)};
  const Pipeline train{RandomResizedCrop(224)};
  for (const auto& [name, bytes] : damaged) {
    INFO(name);
    const std::string full = outcome([&] { decode(bytes, {}, "cut.img"); });
    REQUIRE_THAT(full, Contains("cannot decode cut.img: it is truncated: its " +
                                std::to_string(bytes.size()) + " bytes end before the image does"));
    REQUIRE_THAT(full, Contains("replace or remove it, or let a DataLoader skip such samples"));
    // The region decodes stop above the missing rows; the error must not depend on that.
    REQUIRE(outcome([&] { val(bytes, "cut.img"); }) == full);
    DecodeOptions top;
    top.roi = Rect{0, 0, 50, 20};
    REQUIRE(outcome([&] { decode(bytes, top, "cut.img"); }) == full);
    for (std::uint64_t seed = 0; seed < 100; ++seed) {
      Generator rng(seed);
      INFO("seed " << seed);
      REQUIRE(outcome([&] { train.run(bytes, rng, "cut.img"); }) == full);
    }
  }
  // Not truncated: bytes after a JPEG's end-of-image marker or a PNG's IEND, a PNG without its
  // IEND chunk (all of which Pillow loads) decode, region by region, to the whole file's
  // pixels.
  auto trailing = jpeg;
  trailing.insert(trailing.end(), {'e', 'x', 't', 'r', 'a', 0, 0});
  auto no_iend = png;
  no_iend.resize(no_iend.size() - 12);
  auto after_iend = png;
  after_iend.insert(after_iend.end(), {'m', 'o', 'r', 'e'});
  for (const auto& [whole, changed] :
       {std::pair{&jpeg, &trailing}, std::pair{&png, &no_iend}, std::pair{&png, &after_iend}}) {
    const Tensor a = val(*whole);
    const Tensor b = val(*changed);
    REQUIRE(std::equal(a.bytes().begin(), a.bytes().end(), b.bytes().begin()));
    Generator g1(3);
    Generator g2(3);
    const Tensor c = train.run(*whole, g1);
    const Tensor d = train.run(*changed, g2);
    REQUIRE(std::equal(c.bytes().begin(), c.bytes().end(), d.bytes().begin()));
  }
}
