// Python samples into stoker: a sample (dicts, tuples, lists, namedtuples of numpy arrays,
// torch tensors, ints, floats, bools, str and bytes) flattened into a stoker::Sample of named
// fields plus its structure (structure.hpp), in the process that loads it (a worker, or the main
// process with num_workers=0). Every call needs the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "stoker/collate.hpp"
#include "stoker/errors.hpp"
#include "stoker/sample.hpp"
#include "structure.hpp"

namespace stoker::python {

namespace py = pybind11;

// A str or bytes leaf reached the engine's stacking collate, which cannot hold values of
// different lengths: the loader builds its collate again with ragged fields (loader.cpp).
class TextNeedsRaggedCollate : public Error {
 public:
  using Error::Error;
};

// The exception a Python dataset, collate_fn or worker_init_fn raised, as it crosses to the
// main process: what() is "<module>\t<qualname>\n<the formatted traceback>" (its last
// kMaxTracebackChars when longer). In the process that caught it, `original` still holds the
// Python exception, so that num_workers=0 raises it unchanged.
class PythonError : public Error {
 public:
  // Inside a catch of py::error_already_set, GIL held.
  static PythonError from_current(py::error_already_set& error);
  const std::string& type_name() const noexcept { return type_; }
  std::shared_ptr<py::error_already_set> original;

 private:
  PythonError(std::string type, const std::string& text);
  std::string type_;
};
// The engine keeps up to 1791 bytes of a worker's error text; the type name and this much of
// the traceback fit.
inline constexpr std::size_t kMaxTracebackChars = 1500;

class Flattener {
 public:
  // kBatch: a sample that the default collate stacks; str / bytes leaves need
  // `ragged_text` (else TextNeedsRaggedCollate). kSingle: a value written as it is.
  explicit Flattener(Mode mode, bool ragged_text = false) : mode_(mode), ragged_(ragged_text) {}

  // The sample's leaves as owning fields, and its structure field. `text_anyway`: str and
  // bytes leaves are fields whatever the mode (the size probe measures them).
  Sample to_sample(py::handle sample, bool text_anyway = false);
  // The value's leaves written straight into the batch being built, shapes as they are (a
  // collate_fn's output, or one sample without auto-batching), and its structure field.
  void write(py::handle value, BatchBuilder& out);

 public:
  struct LeafValue {
    Leaf kind;
    py::object value;
  };

 private:
  // The structure of the walk just made (cached by text).
  const Structure& structure();
  void walk(py::handle value, int depth);
  void walk_sequence(py::handle value, char kind, PyTypeObject* type, int depth);
  const std::string& class_name(PyTypeObject* type);

  Mode mode_;
  bool ragged_;
  StructureWriter writer_;
  std::vector<LeafValue> leaves_;
  std::shared_ptr<const Structure> structure_;
  std::string structure_text_;  // structure_'s text
  std::string field_name_;      // kStructureField + structure_text_
  std::unordered_map<PyTypeObject*, std::pair<py::object, std::string>> class_names_;
};

}  // namespace stoker::python
