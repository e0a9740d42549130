// TrivialAugmentWide / RandAugment steps as the Pipeline runs them (private to libstoker): on
// the stage's image, with a second image as scratch, so that no step allocates.
#pragma once

#include <array>
#include <cstdint>

#include "stoker/vision/transforms.hpp"

namespace stoker::vision::detail {

// functional::apply_augment into `image`; the geometric steps write `spare` and swap.
void apply_augment(Image& image, Image& spare, const AugmentStep& step, Interpolation interpolation,
                   std::array<std::uint8_t, 3> fill);

}  // namespace stoker::vision::detail
