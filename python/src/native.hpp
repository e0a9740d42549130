// stoker's own datasets from Python (ImageFolder, image lists, MNIST, .npy, token shards,
// WebDataset / TFRecord / MDS shards, and their compositions) and stoker.vision's transforms.
// A NativeDataset is a C++ source plus the structure its samples are shown in (a tuple
// (image, label) for ImageFolder, a dict of fields for shards); a DataLoader over one runs no
// Python per sample: decoding happens in C++ in the workers, without the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "sources.hpp"
#include "structure.hpp"

namespace stoker::python {

namespace py = pybind11;

struct NativeDataset {
  std::shared_ptr<MapSource> map;        // a map-style dataset, or
  std::shared_ptr<StreamSource> stream;  // an iterable one
  std::shared_ptr<const Structure> structure;
};

void bind_native(py::module_& m);
void bind_vision(py::module_& m);

}  // namespace stoker::python
