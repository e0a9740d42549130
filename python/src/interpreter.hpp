// The extension's side of the interpreter: the fork hooks that keep CPython usable in a forked
// worker, the check for signals while the main process waits for a batch, and the Python
// objects the conversions use often (torch.Tensor, numpy's types, torch's DLPack import), looked
// up once.
#pragma once

#include <pybind11/pybind11.h>

#include "stoker/tensor.hpp"

namespace stoker::python {

namespace py = pybind11;

// Registers, once per process, fork hooks (stoker/fork_hooks.hpp) that take the GIL and call
// PyOS_BeforeFork() before a loader forks, and PyOS_AfterFork_Parent() / _Child() after it,
// then release the GIL again: a worker forked from any thread, while any other thread ran
// Python, starts with a consistent interpreter.
void install_fork_hooks();

// LoaderOptions::on_wait for the main process: takes the GIL and runs the signal handlers;
// Ctrl-C's KeyboardInterrupt leaves as py::error_already_set, which ends the epoch.
void check_signals();

// Objects looked up once (GIL held). Each is a borrowed reference kept for the process's life.
struct Interop {
  PyObject* torch_tensor_type = nullptr;   // torch.Tensor
  PyObject* ndarray_type = nullptr;        // numpy.ndarray
  PyObject* numpy_generic_type = nullptr;  // numpy.generic (numpy's scalars)
  PyObject* from_dlpack = nullptr;         // torch.utils.dlpack.from_dlpack
  PyObject* ascontiguousarray = nullptr;   // numpy.ascontiguousarray
  PyObject* torch_bool = nullptr;          // torch.bool
  PyObject* torch_uint8 = nullptr;         // torch.uint8
  PyObject* mapping_abc = nullptr;         // collections.abc.Mapping
  PyObject* sequence_abc = nullptr;        // collections.abc.Sequence
};
const Interop& interop();

// A torch.Tensor over `tensor`'s memory (no copy): the tensor's storage (a batch slot) stays
// alive until torch frees the tensor. GIL held. Throws TypeError for a dtype torch 1.13 cannot
// hold (uint16, uint32, uint64).
py::object to_torch(const Tensor& tensor);

}  // namespace stoker::python
