// What a DataLoader loads from, behind two small interfaces: a map-style source and an
// iterable one, each either a Python dataset (its samples flattened by to_sample.hpp, its
// calls made under the GIL) or one of stoker's C++ datasets (no Python in the loop). The
// extension instantiates DataLoader<MapHandle> and DataLoader<StreamHandle> only.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "stoker/collate.hpp"
#include "stoker/sample.hpp"
#include "structure.hpp"
#include "to_sample.hpp"

namespace stoker::python {

namespace py = pybind11;

class MapSource {
 public:
  virtual ~MapSource() = default;
  virtual std::size_t size() const = 0;
  virtual Sample get(std::size_t index) = 0;
};

class StreamSource {
 public:
  virtual ~StreamSource() = default;
  virtual std::optional<Sample> next() = 0;
  virtual void start_epoch(std::uint64_t epoch) = 0;
};

// The dataset types DataLoader<D> is instantiated with; copies share the source (a forked
// worker has its own copy of everything anyway).
struct MapHandle {
  std::shared_ptr<MapSource> source;
  std::size_t size() const { return source->size(); }
  Sample get(std::size_t index) { return source->get(index); }
};
struct StreamHandle {
  std::shared_ptr<StreamSource> source;
  std::optional<Sample> next() { return source->next(); }
  void start_epoch(std::uint64_t epoch) { source->start_epoch(epoch); }
};

// How a Python dataset's samples reach the slot.
enum class Collation : std::uint8_t {
  kStack,   // the engine's default (streaming) stack: arrays, tensors and numbers only
  kRagged,  // str / bytes too: the samples are held, their text fields collated ragged
  kPython,  // a collate_fn, or no auto-batching: the samples are handed to Python whole
};

// What the worker start-up and the Python collate need, shared by a loader's sources. Set in
// the main process before the workers fork; each worker reads its own copy.
struct PythonHooks {
  py::object dataset;
  py::object collate_fn;      // None: default_convert's "as is" (no auto-batching)
  py::object worker_init_fn;  // None: none
  bool unbatched = false;     // batch_size=None: collate_fn receives one sample, not a list
  std::size_t num_workers = 0;
  std::int64_t base_seed = 0;  // this epoch's: worker w is seeded with base_seed + w
};

// The Python side of a worker's start (stoker/_worker.py: seeds, worker info, torch's thread
// count, then worker_init_fn), once per process: by LoaderOptions::worker_init in a worker, or
// by the first get() in the size-probe child (`from_get`). Nothing in the main process. GIL
// held.
void start_worker_once(const PythonHooks& hooks, std::size_t worker_id, bool from_get = false);
// True in the size-probe child (its start-up ran from its first get()).
bool in_size_probe() noexcept;

// A Python map-style dataset.
class PyMapSource final : public MapSource {
 public:
  PyMapSource(std::shared_ptr<PythonHooks> hooks, Collation collation);
  std::size_t size() const override;
  Sample get(std::size_t index) override;
  // The collate_fn path: the Python samples of the batch being collated (the last `n` loaded;
  // earlier ones belonged to a batch that failed), and forgets them all.
  std::vector<py::object> take(std::size_t n);

 private:
  std::shared_ptr<PythonHooks> hooks_;
  Collation collation_;
  Flattener flattener_;
  std::vector<py::object> held_;
};

// A Python iterable dataset: iter(dataset) at each epoch's start in each process.
class PyStreamSource final : public StreamSource {
 public:
  PyStreamSource(std::shared_ptr<PythonHooks> hooks, Collation collation);
  ~PyStreamSource() override;
  std::optional<Sample> next() override;
  void start_epoch(std::uint64_t epoch) override;
  std::vector<py::object> take(std::size_t n);

 private:
  std::shared_ptr<PythonHooks> hooks_;
  Collation collation_;
  Flattener flattener_;
  py::object iterator_;
  std::vector<py::object> held_;
};

// The collate of Collation::kRagged: the engine's stack, with every str / bytes field of the
// samples' structure collated ragged (values + offsets, collate_ragged()).
CollateFn ragged_text_collate();

// The collate of Collation::kPython: the samples handed back to Python (a list, or the one
// sample when unbatched), through collate_fn when there is one, then written as they are.
// `take` gives the Python samples of the batch.
CollateFn python_collate(std::shared_ptr<PythonHooks> hooks,
                         std::function<std::vector<py::object>(std::size_t)> take);

// Inside a catch block: the C++ exception that carries the Python exception being handled
// (py::error_already_set, or a pybind11 exception turned into a Python one) to the main
// process. GIL held.
[[noreturn]] void rethrow_as_python_error();

}  // namespace stoker::python
