// Tensor: a dtype, a shape and contiguous bytes. A tensor either owns heap memory (datasets build
// samples from owning tensors made by Tensor::empty / from / scalar) or is a view into a batch
// slot in shared memory (what a consumer reads out of a Batch). Copies are shallow, as in
// PyTorch: two copies share the same bytes; clone() makes a deep, owning copy.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "stoker/dlpack.hpp"

namespace stoker {

// Element types. The numbering is part of the shared-memory batch format: append only.
enum class DType : std::uint8_t {
  kUInt8,
  kInt8,
  kUInt16,
  kInt16,
  kUInt32,
  kInt32,
  kUInt64,
  kInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kBool,
};
inline constexpr std::size_t kNumDTypes = 13;

// Bytes per element (bool is one byte).
std::size_t dtype_size(DType dtype) noexcept;
// "uint8", "float32", ...; "invalid" for a value outside the enum.
std::string_view dtype_name(DType dtype) noexcept;
bool is_valid_dtype(std::uint8_t value) noexcept;

// 16-bit floating-point storage types: raw bits, no arithmetic (stoker moves them, never computes).
struct Float16 {
  std::uint16_t bits;
};
struct BFloat16 {
  std::uint16_t bits;
};

template <class T>
struct dtype_of;  // dtype_of<T>::value is the DType stored as T; undefined for other types.
#define STOKER_DTYPE_OF(T, D)                \
  template <>                                \
  struct dtype_of<T> {                       \
    static constexpr DType value = DType::D; \
  }
STOKER_DTYPE_OF(std::uint8_t, kUInt8);
STOKER_DTYPE_OF(std::int8_t, kInt8);
STOKER_DTYPE_OF(std::uint16_t, kUInt16);
STOKER_DTYPE_OF(std::int16_t, kInt16);
STOKER_DTYPE_OF(std::uint32_t, kUInt32);
STOKER_DTYPE_OF(std::int32_t, kInt32);
STOKER_DTYPE_OF(std::uint64_t, kUInt64);
STOKER_DTYPE_OF(std::int64_t, kInt64);
STOKER_DTYPE_OF(Float16, kFloat16);
STOKER_DTYPE_OF(BFloat16, kBFloat16);
STOKER_DTYPE_OF(float, kFloat32);
STOKER_DTYPE_OF(double, kFloat64);
STOKER_DTYPE_OF(bool, kBool);
#undef STOKER_DTYPE_OF

// The other integer types (long long and unsigned long long are distinct from the fixed-width
// types on Linux) are stored by their size and signedness. Character types are left out: the
// signedness of char differs between platforms, and text is not a tensor.
template <class T>
concept OtherIntegerType =
    std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, char> &&
    !std::is_same_v<T, wchar_t> && !std::is_same_v<T, char8_t> && !std::is_same_v<T, char16_t> &&
    !std::is_same_v<T, char32_t> && !std::is_same_v<T, std::uint8_t> &&
    !std::is_same_v<T, std::int8_t> && !std::is_same_v<T, std::uint16_t> &&
    !std::is_same_v<T, std::int16_t> && !std::is_same_v<T, std::uint32_t> &&
    !std::is_same_v<T, std::int32_t> && !std::is_same_v<T, std::uint64_t> &&
    !std::is_same_v<T, std::int64_t> && sizeof(T) <= 8;
template <OtherIntegerType T>
struct dtype_of<T> {
  static constexpr DType value =
      sizeof(T) == 1   ? (std::is_signed_v<T> ? DType::kInt8 : DType::kUInt8)
      : sizeof(T) == 2 ? (std::is_signed_v<T> ? DType::kInt16 : DType::kUInt16)
      : sizeof(T) == 4 ? (std::is_signed_v<T> ? DType::kInt32 : DType::kUInt32)
                       : (std::is_signed_v<T> ? DType::kInt64 : DType::kUInt64);
};

template <class T>
concept HasDType = requires {
  dtype_of<T>::value;
};

template <class T>
consteval DType dtype_for() {
  using U = std::remove_cv_t<T>;
  static_assert(HasDType<U>,
                "stoker: this C++ type has no DType; use an integer type, float, double, bool, "
                "stoker::Float16 or stoker::BFloat16");
  if constexpr (HasDType<U>) {
    return dtype_of<U>::value;
  } else {
    return DType::kUInt8;
  }
}
template <class T>
inline constexpr DType kDTypeOf = dtype_for<T>();

// The dimensions of a tensor: at most kMaxDims, stored inline (no allocation per tensor).
class Shape {
 public:
  static constexpr std::size_t kMaxDims = 8;

  Shape() = default;
  // Throws std::invalid_argument for a negative dimension or more than kMaxDims dimensions.
  // Implicit, so a braced list, a span or a std::vector<std::int64_t> can be passed wherever a
  // Shape is taken (Tensor::empty(DType::kFloat32, dims)).
  Shape(std::initializer_list<std::int64_t> dims);
  Shape(std::span<const std::int64_t> dims);
  Shape(const std::vector<std::int64_t>& dims) : Shape(std::span<const std::int64_t>(dims)) {}

  std::size_t size() const noexcept { return ndim_; }
  bool empty() const noexcept { return ndim_ == 0; }
  std::int64_t operator[](std::size_t i) const noexcept { return dims_[i]; }
  const std::int64_t* begin() const noexcept { return dims_.data(); }
  const std::int64_t* end() const noexcept { return dims_.data() + ndim_; }
  std::span<const std::int64_t> dims() const noexcept { return {dims_.data(), ndim_}; }
  // Product of the dimensions; 1 for a scalar (no dimensions).
  std::size_t numel() const noexcept;
  // This shape with `leading` prepended: the shape of a stacked batch.
  Shape prepend(std::int64_t leading) const;
  std::string to_string() const;  // "[3, 224, 224]"; "[]" for a scalar

  friend bool operator==(const Shape& a, const Shape& b) noexcept {
    if (a.ndim_ != b.ndim_) return false;
    for (std::size_t i = 0; i < a.ndim_; ++i) {
      if (a.dims_[i] != b.dims_[i]) return false;
    }
    return true;
  }

 private:
  void assign(std::span<const std::int64_t> dims);
  std::array<std::int64_t, kMaxDims> dims_{};
  std::size_t ndim_ = 0;
};

class Tensor {
 public:
  // An undefined tensor: no storage, defined() is false.
  Tensor() = default;

  // Owning tensor with uninitialised contents. Storage of 32 KiB and more comes from a
  // per-process cache of recently freed blocks, so a dataset that builds one image-sized tensor
  // per sample reuses memory that is already paged in. Either process; throws std::bad_alloc.
  static Tensor empty(DType dtype, const Shape& shape);
  static Tensor zeros(DType dtype, const Shape& shape);

  // Owning tensor holding a copy of `values`; shape defaults to 1-D [values.size()].
  // Throws std::invalid_argument when the shape's element count differs from values.size().
  template <class T>
  static Tensor from(std::span<const T> values, const Shape& shape) {
    Tensor t = empty(kDTypeOf<T>, shape);
    t.check_numel(values.size());
    copy_bytes(t.raw_data(), values.data(), values.size_bytes());
    return t;
  }
  template <class T>
  static Tensor from(std::span<const T> values) {
    return from(values, Shape{static_cast<std::int64_t>(values.size())});
  }
  template <class T>
  static Tensor from(const std::vector<T>& values, const Shape& shape) {
    return from(std::span<const T>(values), shape);
  }
  template <class T>
  static Tensor from(const std::vector<T>& values) {
    return from(std::span<const T>(values));
  }
  template <class T>
  static Tensor from(std::initializer_list<T> values, const Shape& shape) {
    return from(std::span<const T>(values.begin(), values.size()), shape);
  }
  template <class T>
  static Tensor from(std::initializer_list<T> values) {
    return from(std::span<const T>(values.begin(), values.size()));
  }
  // Zero-dimensional tensor holding one value; stacking scalars gives a [B] batch field.
  template <class T>
  static Tensor scalar(T value) {
    return from(std::span<const T>(&value, 1), Shape{});
  }

  // A view of memory owned by someone else; `owner` is kept alive as long as the view (and any
  // copy of it) exists. `data` must hold shape.numel() * dtype_size(dtype) bytes.
  static Tensor view(DType dtype, const Shape& shape, void* data,
                     std::shared_ptr<const void> owner);

  bool defined() const noexcept { return owner_ != nullptr || data_ != nullptr; }
  DType dtype() const noexcept { return dtype_; }
  const Shape& shape() const noexcept { return shape_; }
  std::size_t dim() const noexcept { return shape_.size(); }
  std::int64_t size(std::size_t d) const noexcept { return shape_[d]; }
  std::size_t numel() const noexcept { return shape_.numel(); }
  std::size_t nbytes() const noexcept { return nbytes_; }
  std::size_t element_size() const noexcept { return dtype_size(dtype_); }
  // True for a view into memory this tensor does not own (a batch slot, or Tensor::view).
  bool is_view() const noexcept { return view_; }

  // Typed access. Throws std::invalid_argument when T does not match dtype(), naming both.
  template <class T>
  T* data() {
    check_dtype(kDTypeOf<T>);
    return reinterpret_cast<T*>(data_);
  }
  template <class T>
  const T* data() const {
    check_dtype(kDTypeOf<T>);
    return reinterpret_cast<const T*>(data_);
  }
  // The single element of a one-element tensor. Throws std::invalid_argument otherwise.
  template <class T>
  T item() const {
    check_dtype(kDTypeOf<T>);
    check_single();
    T value;
    copy_bytes(&value, data_, sizeof(T));
    return value;
  }
  std::byte* raw_data() noexcept { return data_; }
  const std::byte* raw_data() const noexcept { return data_; }
  std::span<const std::byte> bytes() const noexcept { return {data_, nbytes_}; }

  // Deep copy into a new owning tensor.
  Tensor clone() const;
  // DLPack: this tensor for another framework, without a copy. The returned struct owns a
  // reference to the memory (for a batch view, to its slot, which is not reused until the
  // deleter runs); the receiver must call its deleter exactly once. to_dlpack() is DLPack 1.x;
  // to_dlpack_legacy() the pre-1.0 DLManagedTensor that libtorch 1.13 takes. Either process.
  // Throws std::invalid_argument for an undefined tensor.
  dlpack::DLManagedTensorVersioned* to_dlpack() const;
  dlpack::DLManagedTensor* to_dlpack_legacy() const;

  // Row i along the first dimension, as a view sharing this tensor's memory (and keeping it
  // alive): shape()[1:]. Throws std::out_of_range for i >= size(0), std::invalid_argument for
  // a scalar.
  Tensor row(std::size_t i) const;

 private:
  void check_dtype(DType requested) const;
  void check_numel(std::size_t count) const;
  void check_single() const;
  static void copy_bytes(void* dst, const void* src, std::size_t n) noexcept;

  std::shared_ptr<const void> owner_;
  std::byte* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::kUInt8;
  bool view_ = false;
};

}  // namespace stoker
