// _stoker.Loader and _stoker.Iterator: the C++ DataLoader behind stoker.DataLoader
// (stoker/dataloader.py), which checks the arguments as torch does and turns them into the
// options dict read here. A Loader holds one DataLoader<MapHandle> or DataLoader<StreamHandle>
// over a Python dataset or one of stoker's own; an Iterator is one epoch. Every call that may
// block (begin, a fetch, stopping workers) releases the GIL.
#pragma once

#include <pybind11/pybind11.h>

namespace stoker::python {

namespace py = pybind11;

void bind_loader(py::module_& m);

}  // namespace stoker::python
