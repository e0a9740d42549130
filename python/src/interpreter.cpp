// Fork hooks for CPython, the signal check of a waiting fetch, the cached Python objects, and a
// stoker::Tensor handed to torch through DLPack.
#include "interpreter.hpp"

#include <mutex>
#include <stdexcept>

#include "stoker/dlpack.hpp"
#include "stoker/fork_hooks.hpp"

namespace stoker::python {
namespace {

// The GIL state of a fork in progress: prepare and the parent / child step run on the same
// thread, one fork at a time per thread.
thread_local PyGILState_STATE t_fork_gil;

constexpr const char* kCapsuleName = "dltensor";

// A capsule torch never consumed still owns its DLPack struct.
void release_capsule(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kCapsuleName) == 0) return;  // consumed (renamed) by torch
  auto* managed =
      static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

}  // namespace

void install_fork_hooks() {
  static std::once_flag once;
  std::call_once(once, [] {
    add_fork_hooks(ForkHooks{[] {
                               t_fork_gil = PyGILState_Ensure();
                               PyOS_BeforeFork();
                             },
                             [] {
                               PyOS_AfterFork_Parent();
                               PyGILState_Release(t_fork_gil);
                             },
                             [] {
                               // Resets the GIL, the import lock and the thread states of the other
                               // threads (gone in the child), and runs
                               // os.register_at_fork(after_in_child=...) callbacks.
                               PyOS_AfterFork_Child();
                               PyGILState_Release(t_fork_gil);
                             }});
  });
}

void check_signals() {
  const py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// A reference kept for the process's life.
PyObject* keep(py::object o) { return o.release().ptr(); }

const Interop& interop() {
  // Built on first use, under the GIL; never freed (the objects live as long as the modules).
  static const Interop* cached = [] {
    auto* i = new Interop();
    const py::module_ torch = py::module_::import("torch");
    const py::module_ numpy = py::module_::import("numpy");
    i->torch_tensor_type = keep(torch.attr("Tensor"));
    i->torch_bool = keep(torch.attr("bool"));
    i->torch_uint8 = keep(torch.attr("uint8"));
    const py::module_ abc = py::module_::import("collections.abc");
    i->mapping_abc = keep(abc.attr("Mapping"));
    i->sequence_abc = keep(abc.attr("Sequence"));
    i->ndarray_type = keep(numpy.attr("ndarray"));
    i->numpy_generic_type = keep(numpy.attr("generic"));
    i->ascontiguousarray = keep(numpy.attr("ascontiguousarray"));
    i->from_dlpack = keep(py::module_::import("torch.utils.dlpack").attr("from_dlpack"));
    return i;
  }();
  return *cached;
}

py::object to_torch(const Tensor& tensor) {
  const DType dtype = tensor.dtype();
  if (dtype == DType::kUInt16 || dtype == DType::kUInt32 || dtype == DType::kUInt64) {
    throw py::type_error(std::string("stoker: a field of dtype ") + std::string(dtype_name(dtype)) +
                         " cannot become a torch.Tensor (torch 1.13 has no such dtype); "
                         "give the dataset a signed dtype (int32 or int64)");
  }
  dlpack::DLManagedTensor* managed = tensor.to_dlpack_legacy();
  // torch 1.13 imports no DLPack bool: it arrives as uint8 and is viewed as bool below.
  if (dtype == DType::kBool) managed->dl_tensor.dtype = {dlpack::kDLUInt, 8, 1};
  PyObject* capsule = PyCapsule_New(managed, kCapsuleName, release_capsule);
  if (capsule == nullptr) {
    managed->deleter(managed);
    throw py::error_already_set();
  }
  const py::object owned = py::reinterpret_steal<py::object>(capsule);
  py::object out = py::reinterpret_borrow<py::object>(interop().from_dlpack)(owned);
  if (dtype == DType::kBool) {
    out = out.attr("view")(py::reinterpret_borrow<py::object>(interop().torch_bool));
  }
  return out;
}

}  // namespace stoker::python
