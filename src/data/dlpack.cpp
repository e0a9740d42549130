#include <stdexcept>
#include <vector>

#include "stoker/dlpack.hpp"
#include "stoker/tensor.hpp"

namespace stoker {
namespace {

dlpack::DLDataType to_dl_type(DType dtype) {
  const auto bits = static_cast<std::uint8_t>(8 * dtype_size(dtype));
  switch (dtype) {
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
      return {dlpack::kDLInt, bits, 1};
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
      return {dlpack::kDLUInt, bits, 1};
    case DType::kFloat16:
    case DType::kFloat32:
    case DType::kFloat64:
      return {dlpack::kDLFloat, bits, 1};
    case DType::kBFloat16:
      return {dlpack::kDLBfloat, bits, 1};
    case DType::kBool:
      return {dlpack::kDLBool, 8, 1};
  }
  return {dlpack::kDLUInt, 8, 1};
}

// What a DLPack struct owns: the tensor (so its memory stays alive), its shape and strides,
// and the struct itself. Deleted by the deleter.
template <class Managed>
struct Context {
  Tensor tensor;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  Managed managed{};
};

template <class Managed>
Managed* export_tensor(const Tensor& t) {
  if (!t.defined()) throw std::invalid_argument("Tensor::to_dlpack: the tensor is undefined");
  auto* ctx = new Context<Managed>{t, {t.shape().begin(), t.shape().end()}, {}, {}};
  ctx->strides.resize(ctx->shape.size());
  std::int64_t stride = 1;
  for (std::size_t d = ctx->shape.size(); d > 0; --d) {
    ctx->strides[d - 1] = stride;
    stride *= ctx->shape[d - 1];
  }
  dlpack::DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = t.nbytes() == 0 ? nullptr : const_cast<std::byte*>(ctx->tensor.raw_data());
  dl.device = {dlpack::kDLCPU, 0};
  dl.ndim = static_cast<std::int32_t>(ctx->shape.size());
  dl.dtype = to_dl_type(t.dtype());
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = [](Managed* self) {
    if (self != nullptr) delete static_cast<Context<Managed>*>(self->manager_ctx);
  };
  return &ctx->managed;
}

}  // namespace

dlpack::DLManagedTensorVersioned* Tensor::to_dlpack() const {
  dlpack::DLManagedTensorVersioned* m = export_tensor<dlpack::DLManagedTensorVersioned>(*this);
  m->version = {dlpack::kMajorVersion, dlpack::kMinorVersion};
  m->flags = 0;
  return m;
}

dlpack::DLManagedTensor* Tensor::to_dlpack_legacy() const {
  return export_tensor<dlpack::DLManagedTensor>(*this);
}

}  // namespace stoker
