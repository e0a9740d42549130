// DLPack, under stoker's own names: the ABI (memory layout) of DLPack 1.x's
// DLManagedTensorVersioned and of the legacy DLManagedTensor that older frameworks (libtorch
// 1.13) accept, declared in namespace stoker::dlpack so this header never collides with a
// framework's own dlpack.h, whichever is included first. Hand a tensor to a framework by
// reinterpret_cast to its type: at::fromDLPack(reinterpret_cast<DLManagedTensor*>(p)).
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker::dlpack {

inline constexpr std::uint32_t kMajorVersion = 1;
inline constexpr std::uint32_t kMinorVersion = 1;

// DLDeviceType values.
inline constexpr std::int32_t kDLCPU = 1;
inline constexpr std::int32_t kDLCUDA = 2;
inline constexpr std::int32_t kDLCUDAHost = 3;  // page-locked host memory

// DLDataTypeCode values.
inline constexpr std::uint8_t kDLInt = 0;
inline constexpr std::uint8_t kDLUInt = 1;
inline constexpr std::uint8_t kDLFloat = 2;
inline constexpr std::uint8_t kDLBfloat = 4;
inline constexpr std::uint8_t kDLBool = 6;

// DLManagedTensorVersioned::flags bits.
inline constexpr std::uint64_t kFlagReadOnly = std::uint64_t{1} << 0;
inline constexpr std::uint64_t kFlagIsCopied = std::uint64_t{1} << 1;

struct DLPackVersion {
  std::uint32_t major;
  std::uint32_t minor;
};

struct DLDevice {
  std::int32_t device_type;
  std::int32_t device_id;
};

struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements
  std::uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  std::uint64_t flags;
  DLTensor dl_tensor;
};

// The layout DLPack specifies, on the 64-bit platforms stoker runs on.
static_assert(sizeof(DLTensor) == 48 && offsetof(DLTensor, shape) == 24);
static_assert(sizeof(DLManagedTensor) == 64 && offsetof(DLManagedTensor, deleter) == 56);
static_assert(sizeof(DLManagedTensorVersioned) == 80 &&
              offsetof(DLManagedTensorVersioned, dl_tensor) == 32);

}  // namespace stoker::dlpack
