// stoker's C++ errors as Python exceptions. The classes live in stoker/errors.py (Error is a
// RuntimeError, as torch's loader errors are); this translator hands each C++ error's text and
// details to errors._from_engine(), which builds the instance. A Python exception raised in a
// worker comes back as its own type, with torch's "Caught ... in DataLoader worker process N"
// text and the worker's traceback; with num_workers=0 the original exception is raised as is.
#include "errors.hpp"

#include <exception>
#include <optional>
#include <string>

#include "stoker/errors.hpp"
#include "stoker/mds_dataset.hpp"
#include "stoker/memory.hpp"
#include "stoker/mnist_dataset.hpp"
#include "stoker/npy_dataset.hpp"
#include "stoker/pinned_allocator.hpp"
#include "stoker/tfrecord_dataset.hpp"
#include "stoker/vision/image.hpp"
#include "to_sample.hpp"

namespace stoker::python {
namespace {

template <class T>
py::object optional(const std::optional<T>& v) {
  return v ? py::cast(*v) : py::none();
}

// Sets the Python error (a translator sets it and returns).
void raise(const char* kind, const std::string& message, const py::dict& details) {
  const py::object make = py::module_::import("stoker.errors").attr("_from_engine");
  const py::object error = make(kind, message, details);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
}

void raise_worker_exception(const WorkerException& e) {
  // num_workers=0: the Python exception itself, unchanged (torch raises it directly too).
  try {
    std::rethrow_if_nested(e);
  } catch (const PythonError& original) {
    if (original.original) {
      original.original->restore();
      return;
    }
  } catch (...) {
  }
  const WorkerException::Details& d = e.details();
  py::dict details;
  details["type_name"] = d.type_name;
  details["original_message"] = d.message;
  details["worker_id"] = optional(d.worker_id);
  details["pid"] = d.pid;
  details["batch"] = optional(d.batch);
  details["index"] = optional(d.sample_index);
  details["where"] = d.where;
  raise("WorkerException", e.what(), details);
}

void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const PythonError& e) {
    // Raised in this process outside a batch (a size probe's get(), a native dataset's).
    if (e.original) {
      e.original->restore();
      return;
    }
    py::dict details;
    details["type_name"] = e.type_name();
    raise("PythonError", e.what(), details);
  } catch (const HeldBatchesTimeout& e) {
    py::dict details;
    details["held_batches"] = e.held_batches();
    details["waited_ms"] = e.details().waited.count();
    details["timeout_ms"] = e.details().timeout.count();
    raise("HeldBatchesTimeout", e.what(), details);
  } catch (const LoaderTimeout& e) {
    const LoaderTimeout::Details& d = e.details();
    py::dict details;
    details["worker_id"] = optional(d.worker_id);
    details["pid"] = d.pid;
    details["batch"] = d.batch;
    details["index"] = optional(d.sample_index);
    details["waited_ms"] = d.waited.count();
    details["timeout_ms"] = d.timeout.count();
    raise("LoaderTimeout", e.what(), details);
  } catch (const WorkerCrashed& e) {
    const WorkerCrashed::Details& d = e.details();
    py::dict details;
    details["worker_id"] = d.worker_id;
    details["pid"] = d.pid;
    details["signal"] = d.signal;
    details["exit_code"] = d.exit_code;
    details["batch"] = optional(d.batch);
    details["index"] = optional(d.sample_index);
    details["cause"] = d.cause;
    raise("WorkerCrashed", e.what(), details);
  } catch (const WorkerException& e) {
    raise_worker_exception(e);
  } catch (const TextNeedsRaggedCollate& e) {
    raise("TextNeedsRaggedCollate", e.what(), py::dict());
  } catch (const MemoryBudgetError& e) {
    raise("MemoryBudgetError", e.what(), py::dict());
  } catch (const PinnedMemoryError& e) {
    raise("PinnedMemoryError", e.what(), py::dict());
  } catch (const CollateError& e) {
    py::dict details;
    details["field"] = e.field();
    details["indices"] = e.sample_indices();
    raise("CollateError", e.what(), details);
  } catch (const vision::DecodeError& e) {
    raise("DecodeError", e.what(), py::dict());
  } catch (const NpyFormatError& e) {
    raise("FormatError", e.what(), py::dict());
  } catch (const IdxFormatError& e) {
    raise("FormatError", e.what(), py::dict());
  } catch (const TFRecordError& e) {
    raise("FormatError", e.what(), py::dict());
  } catch (const MdsError& e) {
    raise("FormatError", e.what(), py::dict());
  } catch (const Error& e) {
    raise("Error", e.what(), py::dict());
  }
  // Anything else goes to pybind11's own translation (std::invalid_argument: ValueError,
  // std::out_of_range: IndexError, std::exception: RuntimeError).
}

}  // namespace

void register_errors() { py::register_exception_translator(&translate); }

}  // namespace stoker::python
