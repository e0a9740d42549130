// Tensor::to_dlpack(): the DLPack fields, the deleter, and a batch's slot staying reserved
// (not overwritten by later batches) until the receiver calls the deleter.
#include <catch2/catch.hpp>

#include "support/datasets.hpp"

using namespace stoker;
using stoker::test::IndexDataset;

TEST_CASE("to_dlpack describes the tensor in DLPack's terms", "[dlpack]") {
  const Tensor t = Tensor::from<std::int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  dlpack::DLManagedTensorVersioned* m = t.to_dlpack();
  REQUIRE(m->version.major == 1);
  REQUIRE(m->flags == 0);
  const dlpack::DLTensor& dl = m->dl_tensor;
  REQUIRE(dl.data == t.raw_data());
  REQUIRE(dl.device.device_type == dlpack::kDLCPU);
  REQUIRE(dl.ndim == 2);
  REQUIRE(dl.dtype.code == dlpack::kDLInt);
  REQUIRE(dl.dtype.bits == 32);
  REQUIRE(dl.dtype.lanes == 1);
  REQUIRE(dl.shape[0] == 2);
  REQUIRE(dl.shape[1] == 3);
  REQUIRE(dl.strides[0] == 3);
  REQUIRE(dl.strides[1] == 1);
  REQUIRE(dl.byte_offset == 0);
  m->deleter(m);

  const struct {
    DType dtype;
    std::uint8_t code;
    std::uint8_t bits;
  } kinds[] = {{DType::kUInt8, dlpack::kDLUInt, 8},       {DType::kFloat16, dlpack::kDLFloat, 16},
               {DType::kBFloat16, dlpack::kDLBfloat, 16}, {DType::kBool, dlpack::kDLBool, 8},
               {DType::kFloat64, dlpack::kDLFloat, 64},   {DType::kInt64, dlpack::kDLInt, 64}};
  for (const auto& k : kinds) {
    dlpack::DLManagedTensor* legacy = Tensor::zeros(k.dtype, {4}).to_dlpack_legacy();
    REQUIRE(legacy->dl_tensor.dtype.code == k.code);
    REQUIRE(legacy->dl_tensor.dtype.bits == k.bits);
    legacy->deleter(legacy);
  }
  dlpack::DLManagedTensor* scalar = Tensor::scalar<double>(2.5).to_dlpack_legacy();
  REQUIRE(scalar->dl_tensor.ndim == 0);
  REQUIRE(*static_cast<double*>(scalar->dl_tensor.data) == 2.5);
  scalar->deleter(scalar);
  REQUIRE_THROWS_AS(Tensor().to_dlpack(), std::invalid_argument);
}

TEST_CASE("a DLPack export keeps its memory alive until the deleter runs", "[dlpack]") {
  SECTION("an owning tensor") {
    dlpack::DLManagedTensorVersioned* m = nullptr;
    {
      const Tensor t = Tensor::from<float>({4.5f, 5.5f});
      m = t.to_dlpack();
    }
    REQUIRE(static_cast<float*>(m->dl_tensor.data)[1] == 5.5f);
    m->deleter(m);
  }
  SECTION("a batch view: its slot is not reused") {
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = 1;
    opt.prefetch_factor = 2;
    DataLoader loader(IndexDataset{64, {}}, opt);
    dlpack::DLManagedTensorVersioned* exported = nullptr;
    std::size_t batches = 0;
    for (const Batch& batch : loader) {
      if (batch.index() == 1) exported = batch["index"].to_dlpack();
      ++batches;
    }
    REQUIRE(batches == 16);
    // 14 batches went through the worker's other slot while this one stayed reserved.
    const auto* values = static_cast<const std::int64_t*>(exported->dl_tensor.data);
    REQUIRE(values[0] == 4);
    REQUIRE(values[3] == 7);
    exported->deleter(exported);
    // Released: the next epoch can use both slots again (holding one batch would now fail if
    // the slot had stayed reserved with only one left).
    std::vector<Batch> held;
    auto it = loader.begin();
    held.push_back(*it);
    ++it;
    REQUIRE(it->indices()[0] == 4);
  }
}
