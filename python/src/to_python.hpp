// A delivered batch (or a native dataset's sample) as Python: the structure of its samples
// (structure.hpp) rebuilt around torch tensors over the batch's memory, as
// torch.utils.data.default_collate builds it; str and bytes leaves become lists of str / bytes
// from their ragged fields. Main process, GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "stoker/batch.hpp"
#include "stoker/sample.hpp"
#include "structure.hpp"

namespace stoker::python {

namespace py = pybind11;

class Rebuilder {
 public:
  // The batch's value, by the structure its samples carry (to_sample.hpp), or by `fixed` (a
  // native dataset's, whose fields have their own names). Throws stoker::Error when a field
  // the structure names is missing.
  py::object batch(const Batch& batch, const Structure* fixed = nullptr);
  // One sample of a native dataset, in `fixed`'s single-value form (ints as Python ints,
  // tuples kept: what torchvision's datasets return from __getitem__).
  py::object sample(const Sample& sample, const Structure& fixed);

 private:
  using Lookup = std::function<const Tensor*(std::string_view)>;
  // `tuples`: keep tuples (a native sample). `in_sequence`: the node is an element of a
  // sequence, whose batched str / bytes default_collate leaves in a tuple (zip's), not a list.
  py::object build(const Node& node, Mode mode, const Lookup& find, bool tuples = false,
                   bool in_sequence = false);
  py::object leaf(const Node& node, Mode mode, const Lookup& find, bool in_sequence);
  py::handle resolve(const std::string& cls);  // None when it cannot be found
  const Structure& carried(const Batch& batch);

  std::unordered_map<std::string, std::shared_ptr<const Structure>> structures_;
  std::unordered_map<std::string, py::object> classes_;
};

}  // namespace stoker::python
