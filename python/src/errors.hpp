// The translation of stoker's C++ errors into the Python exceptions of stoker/errors.py.
#pragma once

#include <pybind11/pybind11.h>

namespace stoker::python {

namespace py = pybind11;

// Registers the translator (module initialisation).
void register_errors();

}  // namespace stoker::python
