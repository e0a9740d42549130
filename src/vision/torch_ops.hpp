// torch's float32 arithmetic that torchvision's transforms go through on their way back to a PIL
// image (private to libstoker): ATen's linspace and sum kernels as they run on an AVX2 CPU, and
// GaussianBlur's kernel and convolution (blur.cpp). Used by GaussianBlur and by the magnitude
// bins of TrivialAugmentWide / RandAugment.
#pragma once

#include <cstdint>
#include <vector>

#include "stoker/vision/image.hpp"

namespace stoker::vision::detail {

// Element `index` of torch.linspace(start, end, steps) in float32.
float torch_linspace(float start, float end, int steps, int index) noexcept;
// torch.sum of n contiguous float32 values.
float torch_sum(const float* values, std::int64_t n) noexcept;
// torchvision's _get_gaussian_kernel1d(size, sigma): `size` float32 weights.
std::vector<float> gaussian_kernel1d(int size, double sigma);
// conv2d of the reflect-padded image with the outer product of the two kernels, rounded half to
// even: F.gaussian_blur's pixels. The kernels' halves must be shorter than the image's sides.
void gaussian_blur_image(const Image& in, const std::vector<float>& kernel_x,
                         const std::vector<float>& kernel_y, Image& out);

}  // namespace stoker::vision::detail
