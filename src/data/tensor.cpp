#include "stoker/tensor.hpp"

#include <array>
#include <cstring>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "data/buffer_cache.hpp"

namespace stoker {
namespace {

struct DTypeInfo {
  std::size_t size;
  std::string_view name;
};
constexpr std::array<DTypeInfo, kNumDTypes> kDTypes = {{
    {1, "uint8"},
    {1, "int8"},
    {2, "uint16"},
    {2, "int16"},
    {4, "uint32"},
    {4, "int32"},
    {8, "uint64"},
    {8, "int64"},
    {2, "float16"},
    {2, "bfloat16"},
    {4, "float32"},
    {8, "float64"},
    {1, "bool"},
}};

std::size_t checked_nbytes(DType dtype, const Shape& shape) {
  std::size_t n = dtype_size(dtype);
  for (const std::int64_t d : shape) {
    const auto dim = static_cast<std::size_t>(d);
    if (dim != 0 && n > std::numeric_limits<std::size_t>::max() / dim) {
      throw std::length_error(fmt::format("Tensor: {} x {} is too large to address",
                                          shape.to_string(), dtype_name(dtype)));
    }
    n *= dim;
  }
  return n;
}

}  // namespace

std::size_t dtype_size(DType dtype) noexcept {
  const auto i = static_cast<std::size_t>(dtype);
  return i < kDTypes.size() ? kDTypes[i].size : 0;
}

std::string_view dtype_name(DType dtype) noexcept {
  const auto i = static_cast<std::size_t>(dtype);
  return i < kDTypes.size() ? kDTypes[i].name : std::string_view("invalid");
}

bool is_valid_dtype(std::uint8_t value) noexcept { return value < kNumDTypes; }

Shape::Shape(std::initializer_list<std::int64_t> dims) {
  assign(std::span<const std::int64_t>(dims.begin(), dims.size()));
}

Shape::Shape(std::span<const std::int64_t> dims) { assign(dims); }

void Shape::assign(std::span<const std::int64_t> dims) {
  if (dims.size() > kMaxDims) {
    throw std::invalid_argument(fmt::format(
        "Shape: {} dimensions given; stoker supports at most {} (a batch adds one, so a sample "
        "may have {})",
        dims.size(), kMaxDims, kMaxDims - 1));
  }
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      throw std::invalid_argument(
          fmt::format("Shape: dimension {} is {}; dimensions must be >= 0", i, dims[i]));
    }
    dims_[i] = dims[i];
  }
  ndim_ = dims.size();
}

std::size_t Shape::numel() const noexcept {
  std::size_t n = 1;
  for (std::size_t i = 0; i < ndim_; ++i) n *= static_cast<std::size_t>(dims_[i]);
  return n;
}

Shape Shape::prepend(std::int64_t leading) const {
  if (leading < 0) {
    throw std::invalid_argument(
        fmt::format("Shape::prepend: dimension {} is negative; dimensions must be >= 0", leading));
  }
  if (ndim_ == kMaxDims) {
    throw std::invalid_argument(fmt::format(
        "Shape: cannot add a batch dimension to {}: stoker supports at most {} dimensions",
        to_string(), kMaxDims));
  }
  Shape out;
  out.dims_[0] = leading;
  for (std::size_t i = 0; i < ndim_; ++i) out.dims_[i + 1] = dims_[i];
  out.ndim_ = ndim_ + 1;
  return out;
}

std::string Shape::to_string() const { return fmt::format("[{}]", fmt::join(dims(), ", ")); }

Tensor Tensor::empty(DType dtype, const Shape& shape) {
  if (dtype_size(dtype) == 0) {
    throw std::invalid_argument(fmt::format("Tensor::empty: dtype value {} is not a stoker::DType",
                                            static_cast<int>(dtype)));
  }
  Tensor t;
  t.nbytes_ = checked_nbytes(dtype, shape);
  std::shared_ptr<std::byte> storage = detail::allocate_storage(t.nbytes_);
  t.data_ = storage.get();
  t.owner_ = std::move(storage);
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(DType dtype, const Shape& shape) {
  Tensor t = empty(dtype, shape);
  std::memset(t.data_, 0, t.nbytes_);
  return t;
}

Tensor Tensor::view(DType dtype, const Shape& shape, void* data,
                    std::shared_ptr<const void> owner) {
  if (dtype_size(dtype) == 0) {
    throw std::invalid_argument(fmt::format("Tensor::view: dtype value {} is not a stoker::DType",
                                            static_cast<int>(dtype)));
  }
  if (data == nullptr) throw std::invalid_argument("Tensor::view: data is null");
  Tensor t;
  t.nbytes_ = checked_nbytes(dtype, shape);
  t.data_ = static_cast<std::byte*>(data);
  t.owner_ = std::move(owner);
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.view_ = true;
  return t;
}

Tensor Tensor::clone() const {
  if (!defined()) return Tensor();
  Tensor t = empty(dtype_, shape_);
  copy_bytes(t.data_, data_, nbytes_);
  return t;
}

Tensor Tensor::row(std::size_t i) const {
  if (dim() == 0) throw std::invalid_argument("Tensor::row: a scalar has no rows");
  if (i >= static_cast<std::size_t>(shape_[0])) {
    throw std::out_of_range(
        fmt::format("Tensor::row: row {} of a tensor of shape {}", i, shape_.to_string()));
  }
  Tensor t;
  t.shape_ = Shape(shape_.dims().subspan(1));
  t.dtype_ = dtype_;
  t.nbytes_ = t.shape_.numel() * dtype_size(dtype_);
  t.data_ = data_ + i * t.nbytes_;
  t.owner_ = owner_;
  t.view_ = true;
  return t;
}

void Tensor::check_dtype(DType requested) const {
  if (requested != dtype_) {
    throw std::invalid_argument(fmt::format(
        "Tensor::data<T>: the tensor holds {} but T is {}; use data<T>() with the matching "
        "type (or raw_data())",
        dtype_name(dtype_), dtype_name(requested)));
  }
}

void Tensor::check_numel(std::size_t count) const {
  if (count != numel()) {
    throw std::invalid_argument(fmt::format("Tensor: shape {} holds {} elements but {} were given",
                                            shape_.to_string(), numel(), count));
  }
}

void Tensor::check_single() const {
  if (numel() != 1) {
    throw std::invalid_argument(
        fmt::format("Tensor::item: the tensor has shape {} ({} elements); item() needs exactly one",
                    shape_.to_string(), numel()));
  }
}

void Tensor::copy_bytes(void* dst, const void* src, std::size_t n) noexcept {
  if (n != 0) std::memcpy(dst, src, n);
}

}  // namespace stoker
