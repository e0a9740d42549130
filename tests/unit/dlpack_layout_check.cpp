// With libtorch: stoker's DLPack declarations have the layout of the dlpack.h libtorch ships
// (DLPack 0.x: DLTensor and DLManagedTensor), and including the two in either order compiles.
// This file includes libtorch's header first; dlpack_layout_check_after.cpp includes it last.
#include <ATen/dlpack.h>

#include <cstddef>

#include "stoker/stoker.hpp"

namespace sd = stoker::dlpack;

static_assert(sizeof(sd::DLTensor) == sizeof(::DLTensor));
static_assert(offsetof(sd::DLTensor, data) == offsetof(::DLTensor, data));
static_assert(offsetof(sd::DLTensor, device) == offsetof(::DLTensor, device));
static_assert(offsetof(sd::DLTensor, ndim) == offsetof(::DLTensor, ndim));
static_assert(offsetof(sd::DLTensor, dtype) == offsetof(::DLTensor, dtype));
static_assert(offsetof(sd::DLTensor, shape) == offsetof(::DLTensor, shape));
static_assert(offsetof(sd::DLTensor, strides) == offsetof(::DLTensor, strides));
static_assert(offsetof(sd::DLTensor, byte_offset) == offsetof(::DLTensor, byte_offset));
static_assert(sizeof(sd::DLManagedTensor) == sizeof(::DLManagedTensor));
static_assert(offsetof(sd::DLManagedTensor, manager_ctx) ==
              offsetof(::DLManagedTensor, manager_ctx));
static_assert(offsetof(sd::DLManagedTensor, deleter) == offsetof(::DLManagedTensor, deleter));
static_assert(sd::kDLCPU == static_cast<std::int32_t>(::kDLCPU));
static_assert(sd::kDLFloat == static_cast<std::uint8_t>(::kDLFloat));
static_assert(sd::kDLBfloat == static_cast<std::uint8_t>(::kDLBfloat));

int stoker_dlpack_layout_checked_before() { return 1; }
