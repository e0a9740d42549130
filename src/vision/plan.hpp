// How a Pipeline runs on one image (private to libstoker): the transforms turned into fused
// geometric stages, with the random parameters already drawn. Planning needs only the image's
// size, so it runs on the header, before decoding, and the first stage tells the decoder
// which region (and, in fast mode, which DCT scale) it needs.
#pragma once

#include <array>
#include <optional>
#include <variant>
#include <vector>

#include "stoker/vision/pipeline.hpp"

namespace stoker::vision::detail {

// One fused geometric pass over its input: crop `box` (inside the input), resize it to
// `resized` when `resize`, take `window` of that (pixels of the window outside the resized
// box are `fill`: torchvision's constant padding), and mirror it left-right when `flip`,
// top-bottom when `vflip`. `empty`: the box holds no pixel (a RandomResizedCrop fallback on a
// sliver of an image), so the whole output is `fill`, as Pillow resizes an empty image.
struct Stage {
  Rect box;
  bool resize = false;
  Size resized;
  Interpolation interpolation = Interpolation::kBilinear;
  Rect window;
  std::array<std::uint8_t, 3> fill{0, 0, 0};
  bool flip = false;
  bool vflip = false;
  bool empty = false;

  Size base() const noexcept { return resize ? resized : Size{box.height, box.width}; }
};

// What runs on a stage's output (an RGB or grey image) before the next stage reads it.
struct Between {
  struct Pad {  // edge, reflect or symmetric padding (constant padding is fused)
    Padding padding;
    PaddingMode mode = PaddingMode::kEdge;
  };
  struct Gray {
    int channels = 1;
  };
  struct Blur {
    int kernel_x = 1;
    int kernel_y = 1;
    double sigma = 1.0;
  };
  struct Rotate {
    double angle = 0;
    Interpolation interpolation = Interpolation::kNearest;
    bool expand = false;
    std::optional<Point> center;
    std::array<std::uint8_t, 3> fill{};
  };
  struct Augment {
    std::vector<AugmentStep> steps;
    Interpolation interpolation = Interpolation::kNearest;
    std::array<std::uint8_t, 3> fill{};
  };
  std::variant<std::monostate, ColorJitter::Params, Pad, Gray, Blur, Rotate, Augment> op;
};

// A RandomErasing that erases, applied to the output tensor: `values` hold one value per
// channel, or channels x height x width of them; `normalised` when a Normalize follows it
// (the values are then normalised as the pixels are).
struct Erasure {
  Rect box;
  std::vector<float> values;
  bool normalised = false;
};

struct Plan {
  std::vector<Stage> stages;     // at least one; the last writes the output tensor
  std::vector<Between> between;  // between[i] runs after stages[i] (one fewer than stages)
  Size output;
  int channels = 3;  // of the output
  std::vector<Erasure> erasures;
};

// The plan for an input of `input` size. Random transforms draw from *rng (which must be
// non-null when the pipeline is random) and are recorded in *trace when given. Throws
// std::invalid_argument for what this image's size makes impossible (a zero-sized resize, a
// blur kernel wider than the image).
void make_plan(const std::vector<Transform>& transforms, Size input, Generator* rng, Plan& plan,
               Trace* trace);

// The size Pillow's Image.rotate gives an image of `input` size (the input's size without
// `expand`).
Size rotated_size(Size input, double angle, bool expand, const std::optional<Point>& center);

}  // namespace stoker::vision::detail
