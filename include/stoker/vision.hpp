// stoker::vision: images the way torchvision makes them. decode() (JPEG, PNG, WebP bytes from
// anywhere), the torchvision transforms (Resize, CenterCrop, RandomResizedCrop, RandomCrop,
// RandomHorizontalFlip, RandomVerticalFlip, ColorJitter, Grayscale, RandomGrayscale,
// GaussianBlur, RandomRotation, TrivialAugmentWide, RandAugment, Normalize, RandomErasing)
// with torchvision's pixels, and the Pipeline that composes them into a sample's tensor in
// exact (torchvision's pixels) or fast mode.
#pragma once

#include "stoker/vision/image.hpp"
#include "stoker/vision/pipeline.hpp"
#include "stoker/vision/transforms.hpp"
