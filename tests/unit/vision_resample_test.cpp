// Unit tests for the resampler (src/vision/resample.hpp): Pillow's weights (normalised to one,
// the identity detected, supports that widen with the downscale factor), computing a window of
// the output equals cropping the whole output, and the AVX2 passes equal the portable loops.
#include <catch2/catch.hpp>

#include <numeric>

#include "stoker/vision.hpp"
#include "support/random_image.hpp"
#include "vision/resample.hpp"
#include "vision/resample_simd.hpp"

using namespace stoker;
using namespace stoker::vision;

namespace {

using stoker::test::random_image;
using stoker::test::same_pixels;

}  // namespace

TEST_CASE("Pillow's weights sum to one and widen with the downscale factor", "[vision]") {
  vision::detail::Axis axis;
  for (Interpolation interp : {Interpolation::kBilinear, Interpolation::kBicubic}) {
    for (int out : {7, 50, 100, 333}) {
      vision::detail::pillow_axis(axis, 100, 0.0, 100.0, out, interp, 0, out);
      REQUIRE(axis.count == out);
      for (int i = 0; i < out; ++i) {
        const auto* k = axis.weights.data() + static_cast<std::size_t>(i * axis.taps);
        const int n = axis.length[static_cast<std::size_t>(i)];
        const long sum = std::accumulate(k, k + n, 0L);
        // Each weight rounds on its own: the sum is 2^22 within one unit per tap.
        REQUIRE(std::abs(sum - (1L << vision::detail::kWeightBits)) <= n);
        REQUIRE(axis.start[static_cast<std::size_t>(i)] >= 0);
        REQUIRE(axis.start[static_cast<std::size_t>(i)] + n <= 100);
      }
    }
  }
  // Downscaling 100 -> 10 with the triangle filter: the support is 10 input pixels each side.
  vision::detail::pillow_axis(axis, 100, 0.0, 100.0, 10, Interpolation::kBilinear, 0, 10);
  REQUIRE(axis.length[5] == 20);
  vision::detail::pillow_axis(axis, 100, 0.0, 100.0, 100, Interpolation::kBicubic, 0, 100);
  REQUIRE(axis.identity);  // same size, whole box: Pillow skips the pass
}

TEST_CASE("a window of the output is the same pixels as the whole output cropped", "[vision]") {
  const Image in = random_image(97, 61, 3, 1);
  for (Interpolation interp :
       {Interpolation::kBilinear, Interpolation::kBicubic, Interpolation::kNearest}) {
    Image whole;
    functional::resize(in, Size{40, 150}, interp, whole);
    // Columns [30, 130) and rows [5, 35) only.
    vision::detail::Axis columns;
    vision::detail::Axis rows;
    vision::detail::pillow_axis(columns, 97, 0.0, 97.0, 150, interp, 30, 100);
    vision::detail::pillow_axis(rows, 61, 0.0, 61.0, 40, interp, 5, 30);
    Image part;
    part.reset(100, 30, 3);
    vision::detail::resample(
        vision::detail::view_of(in), columns, rows,
        [](void* out, int row, const std::uint8_t* pixels) {
          auto* image = static_cast<Image*>(out);
          std::copy_n(pixels, image->row_bytes(), image->row(row));
        },
        &part);
    Image cropped;
    functional::crop(whole, Rect{30, 5, 100, 30}, cropped);
    REQUIRE(same_pixels(part, cropped));
  }
}

TEST_CASE("the AVX2 passes give the portable loops' pixels", "[vision]") {
  if (!vision::detail::have_avx2()) {
    WARN("this CPU has no AVX2: only the portable loops run here");
    return;
  }
  Generator rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const int w = 1 + static_cast<int>(rng.below(300));
    const int h = 1 + static_cast<int>(rng.below(200));
    Image in = random_image(w, h, 3, rng.next());
    if (trial % 2 == 1) {
      // No spare bytes after the last row: the vector loads must stop short of the end.
      in.pixels = std::vector<std::uint8_t>(
          in.pixels.begin(), in.pixels.begin() + static_cast<std::ptrdiff_t>(
                                                     in.row_bytes() * static_cast<std::size_t>(h)));
    }
    const Size out{1 + static_cast<int>(rng.below(260)), 1 + static_cast<int>(rng.below(260))};
    const Interpolation interp =
        rng.bernoulli(0.5) ? Interpolation::kBilinear : Interpolation::kBicubic;
    Image simd;
    Image portable;
    functional::resize(in, out, interp, simd);
    vision::detail::use_portable_loops(true);
    functional::resize(in, out, interp, portable);
    vision::detail::use_portable_loops(false);
    INFO(w << "x" << h << " -> " << out.width << "x" << out.height);
    REQUIRE(same_pixels(simd, portable));
  }
}

TEST_CASE("a pipeline's tensor is the same with the portable loops, flipped or not", "[vision]") {
  const Image in = random_image(301, 203, 3, 21);
  for (double p : {0.0, 1.0}) {
    for (DType dtype : {DType::kUInt8, DType::kFloat32}) {
      const Pipeline pipeline =
          Pipeline{Resize(150), CenterCrop(Size{120, 133}), RandomHorizontalFlip(p)}.output(dtype);
      Generator g1(1);
      Generator g2(1);
      const Tensor fast = pipeline.run(in, g1);
      vision::detail::use_portable_loops(true);
      const Tensor portable = pipeline.run(in, g2);
      vision::detail::use_portable_loops(false);
      REQUIRE(std::equal(fast.bytes().begin(), fast.bytes().end(), portable.bytes().begin()));
    }
  }
}
