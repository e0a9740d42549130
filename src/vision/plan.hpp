// How a Pipeline runs on one image (private to libstoker): the transforms turned into fused
// geometric stages, with the random parameters already drawn. Planning needs only the image's
// size, so it runs on the header, before decoding, and the first stage tells the decoder
// which region (and, in fast mode, which DCT scale) it needs.
#pragma once

#include <array>
#include <vector>

#include "stoker/vision/pipeline.hpp"

namespace stoker::vision::detail {

// One fused geometric pass over its input: crop `box` (inside the input), resize it to
// `resized` when `resize`, take `window` of that (pixels of the window outside the resized
// box are `fill`: torchvision's constant padding), and mirror it left-right when `flip`.
// `empty`: the box holds no pixel (a RandomResizedCrop fallback on a sliver of an image), so
// the whole output is `fill`, as Pillow resizes an empty image.
struct Stage {
  Rect box;
  bool resize = false;
  Size resized;
  Interpolation interpolation = Interpolation::kBilinear;
  Rect window;
  std::array<std::uint8_t, 3> fill{0, 0, 0};
  bool flip = false;
  bool empty = false;

  Size base() const noexcept { return resize ? resized : Size{box.height, box.width}; }
};

// What runs on a stage's output (an RGB image) before the next stage reads it.
struct Between {
  enum class Kind : std::uint8_t { kNothing, kJitter, kPad };
  Kind kind = Kind::kNothing;
  ColorJitter::Params jitter;
  Padding padding;  // kPad: edge, reflect or symmetric padding (constant padding is fused)
  PaddingMode mode = PaddingMode::kEdge;
};

struct Plan {
  std::vector<Stage> stages;     // at least one; the last writes the output tensor
  std::vector<Between> between;  // between[i] runs after stages[i] (one fewer than stages)
  Size output;
};

// The plan for an input of `input` size. Random transforms draw from *rng (which must be
// non-null when the pipeline is random) and are recorded in *trace when given.
void make_plan(const std::vector<Transform>& transforms, Size input, Generator* rng, Plan& plan,
               Trace* trace);

}  // namespace stoker::vision::detail
