// stoker: a PyTorch-style DataLoader for C++ training programs. Include this one header.
#pragma once

#include "stoker/batch.hpp"
#include "stoker/collate.hpp"
#include "stoker/data_loader.hpp"
#include "stoker/dataset.hpp"
#include "stoker/errors.hpp"
#include "stoker/npy_dataset.hpp"
#include "stoker/options.hpp"
#include "stoker/random.hpp"
#include "stoker/sample.hpp"
#include "stoker/sampler.hpp"
#include "stoker/stats.hpp"
#include "stoker/tensor.hpp"
#include "stoker/tensor_dataset.hpp"
#include "stoker/token_dataset.hpp"
#include "stoker/worker_info.hpp"
