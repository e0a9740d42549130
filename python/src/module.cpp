// The extension module stoker._stoker: the C++ half of the `stoker` Python package
// (python/stoker/ is the other). Importing it registers the fork hooks and the error
// translation; the rest is bindings.
#include <pybind11/pybind11.h>

#include "errors.hpp"
#include "interpreter.hpp"
#include "loader.hpp"
#include "native.hpp"
#include "stoker/random.hpp"
#include "stoker/worker_info.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_stoker, m) {
  m.doc() = "stoker's C++ engine: fork()ed workers writing whole batches into shared memory";
  stoker::python::install_fork_hooks();
  stoker::python::register_errors();
  stoker::python::bind_loader(m);
  stoker::python::bind_native(m);
  stoker::python::bind_vision(m);
  m.def(
      "worker_info",
      []() -> py::object {
        const stoker::WorkerInfo* info = stoker::worker_info();
        if (info == nullptr) return py::none();
        return py::make_tuple(info->id, info->num_workers, info->seed, info->pid);
      },
      "(id, num_workers, seed, pid) in a DataLoader worker process, None elsewhere.");
  m.def(
      "sample_seed", []() { return stoker::sample_rng().next(); },
      "Inside a dataset's __getitem__ run by a stoker.DataLoader: 64 random bits from the "
      "sample's generator, seeded from (seed, epoch, index) alone, so augmentation drawn from it "
      "is the same for any num_workers. RuntimeError outside __getitem__.");
}
