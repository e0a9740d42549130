// Batches into libtorch without a copy: each field goes through DLPack (the legacy struct
// libtorch 1.13 takes) into a torch::Tensor that shares the batch's shared-memory slot; the
// slot is reused only after libtorch has dropped the tensor. A tiny linear model trains for a
// few steps on them. Built when CMake finds libtorch (Debian: libtorch-dev).
#include <ATen/DLConvertor.h>  // before stoker on purpose: the two DLPack headers do not clash
#include <torch/torch.h>

#include <cstdio>

#include <stoker/stoker.hpp>

#include "cli.hpp"

namespace {

// y = 3 x0 - 2 x1 + 1, with x = (i % 17, i % 5) / 10.
struct Linear {
  std::size_t size() const { return 4096; }
  stoker::Sample get(std::size_t i) const {
    const float x0 = static_cast<float>(i % 17) / 10.0f;
    const float x1 = static_cast<float>(i % 5) / 10.0f;
    stoker::Sample s;
    s.set("x", stoker::Tensor::from<float>({x0, x1}));
    s.set("y", stoker::Tensor::scalar<float>(3 * x0 - 2 * x1 + 1));
    return s;
  }
};

torch::Tensor as_torch(const stoker::Tensor& t) {
  return at::fromDLPack(reinterpret_cast<DLManagedTensor*>(t.to_dlpack_legacy()));
}

}  // namespace

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: libtorch_interop\n  batches into libtorch through DLPack, without a "
                   "copy.\n  It takes no arguments.");
  cli.done();
  stoker::LoaderOptions opt;
  opt.batch_size = 128;
  opt.num_workers = 2;
  opt.shuffle = true;
  stoker::DataLoader loader(Linear{}, opt);
  torch::nn::Linear model(2, 1);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.5));
  float loss_value = 0;
  for (int epoch = 0; epoch < 8; ++epoch) {
    for (const stoker::Batch& batch : loader) {
      const torch::Tensor x = as_torch(batch["x"]);  // [128, 2], the slot's memory
      const torch::Tensor y = as_torch(batch["y"]).unsqueeze(1);
      if (x.data_ptr() != batch["x"].raw_data()) {
        std::fprintf(stderr, "libtorch_interop: the tensor was copied\n");
        return 1;
      }
      sgd.zero_grad();
      const torch::Tensor loss = torch::mse_loss(model(x), y);
      loss.backward();
      sgd.step();
      loss_value = loss.item<float>();
    }
  }
  const torch::Tensor w = model->weight.detach();
  std::printf("libtorch_interop: loss %.5f, weights %.3f %.3f, bias %.3f (expected 3, -2, 1)\n",
              loss_value, w[0][0].item<float>(), w[0][1].item<float>(),
              model->bias.detach()[0].item<float>());
  return loss_value < 1e-3f ? 0 : 1;
}
