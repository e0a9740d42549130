// Python datasets as stoker sources: each call into Python under the GIL, Python exceptions
// turned into PythonError (their traceback as text) before they reach the engine, and the two
// collates a Python loader may need besides the engine's stack.
#include "sources.hpp"

#include <unistd.h>

#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "stoker/worker_info.hpp"

namespace stoker::python {
namespace {

// The process whose worker start-up has run (a fork copies it: a new process differs), and
// whether the first get() ran it: the size probe, the one child that loads without
// LoaderOptions::worker_init.
pid_t g_started_pid = 0;
bool g_started_by_get = false;

py::object worker_module() { return py::module_::import("stoker._worker"); }

// The last `n` objects of `held` (at most all of them), which is emptied.
std::vector<py::object> take_last(std::vector<py::object>& held, std::size_t n) {
  std::vector<py::object> out;
  if (n > held.size()) n = held.size();
  out.assign(std::make_move_iterator(held.end() - static_cast<std::ptrdiff_t>(n)),
             std::make_move_iterator(held.end()));
  held.clear();
  return out;
}

}  // namespace

[[noreturn]] void rethrow_as_python_error() {
  try {
    throw;
  } catch (py::error_already_set& e) {
    throw PythonError::from_current(e);
  } catch (py::builtin_exception& e) {
    // pybind11's C++ exceptions (type_error, value_error...): the Python exception they stand
    // for, so that it crosses as that type.
    e.set_error();
    py::error_already_set err;
    throw PythonError::from_current(err);
  }
}

void start_worker_once(const PythonHooks& hooks, std::size_t worker_id, bool from_get) {
  const pid_t pid = ::getpid();
  if (g_started_pid == pid) return;
  const WorkerInfo* info = worker_info();
  if (info == nullptr) return;  // the main process (num_workers=0): no worker start-up
  g_started_pid = pid;
  g_started_by_get = from_get;
  try {
    worker_module().attr("_start")(worker_id, info->num_workers,
                                   hooks.base_seed + static_cast<std::int64_t>(worker_id),
                                   hooks.dataset, hooks.worker_init_fn);
  } catch (...) {
    rethrow_as_python_error();
  }
}

bool in_size_probe() noexcept { return g_started_pid == ::getpid() && g_started_by_get; }

PyMapSource::PyMapSource(std::shared_ptr<PythonHooks> hooks, Collation collation)
    : hooks_(std::move(hooks)),
      collation_(collation),
      flattener_(Mode::kBatch, collation == Collation::kRagged) {}

std::size_t PyMapSource::size() const {
  const py::gil_scoped_acquire gil;
  const Py_ssize_t n = PyObject_Length(hooks_->dataset.ptr());
  if (n < 0) throw py::error_already_set();
  return static_cast<std::size_t>(n);
}

Sample PyMapSource::get(std::size_t index) {
  const py::gil_scoped_acquire gil;
  try {
    if (const WorkerInfo* info = worker_info()) start_worker_once(*hooks_, info->id, true);
    py::object key = py::reinterpret_steal<py::object>(PyLong_FromSize_t(index));
    py::object sample =
        py::reinterpret_steal<py::object>(PyObject_GetItem(hooks_->dataset.ptr(), key.ptr()));
    if (!sample) throw py::error_already_set();
    if (collation_ == Collation::kPython) {
      held_.push_back(std::move(sample));
      return Sample();
    }
    // The size probe measures text as the ragged collate will hold it.
    return flattener_.to_sample(sample, in_size_probe());
  } catch (const TextNeedsRaggedCollate&) {
    throw;
  } catch (const PythonError&) {
    throw;
  } catch (...) {
    rethrow_as_python_error();
  }
}

std::vector<py::object> PyMapSource::take(std::size_t n) { return take_last(held_, n); }

PyStreamSource::PyStreamSource(std::shared_ptr<PythonHooks> hooks, Collation collation)
    : hooks_(std::move(hooks)),
      collation_(collation),
      flattener_(Mode::kBatch, collation == Collation::kRagged) {}

PyStreamSource::~PyStreamSource() {
  if (!iterator_ && held_.empty()) return;
  const py::gil_scoped_acquire gil;
  iterator_ = py::object();
  held_.clear();
}

void PyStreamSource::start_epoch(std::uint64_t /*epoch*/) {
  const py::gil_scoped_acquire gil;
  try {
    if (const WorkerInfo* info = worker_info()) start_worker_once(*hooks_, info->id, true);
    iterator_ = py::reinterpret_steal<py::object>(PyObject_GetIter(hooks_->dataset.ptr()));
    if (!iterator_) throw py::error_already_set();
  } catch (const PythonError&) {
    throw;
  } catch (...) {
    rethrow_as_python_error();
  }
}

std::optional<Sample> PyStreamSource::next() {
  const py::gil_scoped_acquire gil;
  try {
    if (!iterator_) {
      iterator_ = py::reinterpret_steal<py::object>(PyObject_GetIter(hooks_->dataset.ptr()));
      if (!iterator_) throw py::error_already_set();
    }
    py::object sample = py::reinterpret_steal<py::object>(PyIter_Next(iterator_.ptr()));
    if (!sample) {
      if (PyErr_Occurred() != nullptr) throw py::error_already_set();
      return std::nullopt;
    }
    if (collation_ == Collation::kPython) {
      held_.push_back(std::move(sample));
      return Sample();
    }
    return flattener_.to_sample(sample);
  } catch (const TextNeedsRaggedCollate&) {
    throw;
  } catch (const PythonError&) {
    throw;
  } catch (...) {
    rethrow_as_python_error();
  }
}

std::vector<py::object> PyStreamSource::take(std::size_t n) { return take_last(held_, n); }

CollateFn ragged_text_collate() {
  // Per process: the collate of each structure seen, by its text.
  auto cache = std::make_shared<std::unordered_map<std::string, CollateFn>>();
  return [cache](std::span<const Sample> samples, BatchBuilder& out) {
    if (samples.empty()) return;
    for (const Field& field : samples[0]) {
      const std::string_view name = field.name;
      if (name.substr(0, kStructureField.size()) != kStructureField) continue;
      const std::string text(name.substr(kStructureField.size()));
      auto it = cache->find(text);
      if (it == cache->end()) {
        const std::shared_ptr<const Structure> s = parse_structure(text);
        CollateFn fn =
            s->text_fields.empty() ? CollateFn(collate_stack) : collate_ragged(s->text_fields);
        it = cache->emplace(text, std::move(fn)).first;
      }
      it->second(samples, out);
      return;
    }
    collate_stack(samples, out);
  };
}

CollateFn python_collate(std::shared_ptr<PythonHooks> hooks,
                         std::function<std::vector<py::object>(std::size_t)> take) {
  auto flattener = std::make_shared<Flattener>(Mode::kSingle);
  return [hooks = std::move(hooks), take = std::move(take), flattener](
             std::span<const Sample> samples, BatchBuilder& out) {
    const py::gil_scoped_acquire gil;
    try {
      std::vector<py::object> held = take(samples.size());
      py::object value;
      if (hooks->unbatched) {
        if (held.empty()) return;
        value = std::move(held.front());
      } else {
        py::list list(held.size());
        for (std::size_t i = 0; i < held.size(); ++i) list[i] = std::move(held[i]);
        value = std::move(list);
      }
      if (!hooks->collate_fn.is_none()) {
        value = worker_module().attr("_collate")(hooks->collate_fn, value);
      }
      flattener->write(value, out);
    } catch (const PythonError&) {
      throw;
    } catch (const Error&) {
      throw;  // the slot is full, or a field name is repeated: the engine's words
    } catch (...) {
      rethrow_as_python_error();
    }
  };
}

}  // namespace stoker::python
