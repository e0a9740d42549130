// Rebuilding default_collate's structure around a batch's fields.
#include "to_python.hpp"

#include <cstdint>
#include <cstring>
#include <string>

#include "interpreter.hpp"
#include "stoker/errors.hpp"

namespace stoker::python {
namespace {

// Distinct structures a loader keeps parsed; a dataset whose samples change structure from
// batch to batch starts again past it.
constexpr std::size_t kMaxStructures = 256;

[[noreturn]] void missing(std::string_view field) {
  throw Error("DataLoader: the batch has no field '" + std::string(field) +
              "' although its structure names one; the worker wrote a malformed batch");
}

template <class T>
T scalar(const Tensor& t, std::string_view field) {
  if (t.numel() != 1 || t.dtype() != kDTypeOf<T>) missing(field);
  return t.item<T>();
}

py::object text(const std::byte* data, std::size_t n, Leaf kind) {
  const auto* chars = reinterpret_cast<const char*>(data);
  if (kind == Leaf::kBytes) return py::bytes(chars, n);
  PyObject* s = PyUnicode_DecodeUTF8(chars, static_cast<Py_ssize_t>(n), "strict");
  if (s == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(s);
}

}  // namespace

py::handle Rebuilder::resolve(const std::string& cls) {
  auto it = classes_.find(cls);
  if (it != classes_.end()) return it->second;
  py::object found = py::none();
  const std::size_t tab = cls.find('\t');
  if (tab != std::string::npos) {
    try {
      py::object at = py::module_::import(cls.substr(0, tab).c_str());
      std::string path = cls.substr(tab + 1);
      for (std::size_t start = 0; start <= path.size();) {
        const std::size_t dot = path.find('.', start);
        const std::string part = path.substr(start, dot - start);
        at = at.attr(part.c_str());
        if (dot == std::string::npos) break;
        start = dot + 1;
      }
      found = at;
    } catch (const py::error_already_set&) {
      found = py::none();  // a class defined inside a function: the builtin type instead
    }
  }
  return classes_.emplace(cls, std::move(found)).first->second;
}

const Structure& Rebuilder::carried(const Batch& batch) {
  for (const Field& field : batch) {
    const std::string_view name = field.name;
    if (name.substr(0, kStructureField.size()) != kStructureField) continue;
    const std::string text(name.substr(kStructureField.size()));
    auto it = structures_.find(text);
    if (it == structures_.end()) {
      if (structures_.size() >= kMaxStructures) structures_.clear();
      it = structures_.emplace(text, parse_structure(text)).first;
    }
    return *it->second;
  }
  throw Error("DataLoader: a batch carries no structure field; the worker wrote a malformed batch");
}

py::object Rebuilder::leaf(const Node& node, Mode mode, const Lookup& find, bool in_sequence) {
  const Leaf kind = node.leaf();
  const Tensor* t = find(node.field);
  if (t == nullptr) missing(node.field);
  if (is_text(kind)) {
    if (mode == Mode::kSingle) return text(t->raw_data(), t->nbytes(), kind);
    const Tensor* offsets = find(node.field + ".offsets");
    if (offsets == nullptr || offsets->dtype() != DType::kInt64 || offsets->dim() != 1 ||
        offsets->numel() == 0) {
      missing(node.field + ".offsets");
    }
    const std::int64_t* at = offsets->data<std::int64_t>();
    const std::size_t rows = offsets->numel() - 1;
    py::list out(rows);
    for (std::size_t r = 0; r < rows; ++r) {
      if (at[r] < 0 || at[r + 1] < at[r] || static_cast<std::size_t>(at[r + 1]) > t->nbytes()) {
        missing(node.field + ".offsets");
      }
      out[r] = text(t->raw_data() + at[r], static_cast<std::size_t>(at[r + 1] - at[r]), kind);
    }
    if (in_sequence) return py::tuple(out);
    return out;
  }
  if (mode == Mode::kSingle) {
    // default_convert keeps Python numbers as they are.
    switch (kind) {
      case Leaf::kInt:
        return py::int_(scalar<std::int64_t>(*t, node.field));
      case Leaf::kFloat:
        return py::float_(scalar<double>(*t, node.field));
      case Leaf::kBool:
        return py::bool_(scalar<bool>(*t, node.field));
      default:
        break;
    }
  }
  return to_torch(*t);
}

py::object Rebuilder::build(const Node& node, Mode mode, const Lookup& find, bool tuples,
                            bool in_sequence) {
  if (node.is_leaf()) return leaf(node, mode, find, in_sequence);
  const std::size_t n = node.children.size();
  if (node.kind == 'D') {
    py::dict d;
    for (std::size_t i = 0; i < n; ++i) {
      const auto& key = node.keys[i];
      py::object k = std::holds_alternative<std::string>(key)
                         ? py::object(py::str(std::get<std::string>(key)))
                         : py::object(py::int_(std::get<std::int64_t>(key)));
      d[k] = build(node.children[i], mode, find, tuples);
    }
    if (node.cls.empty()) return d;
    const py::handle cls = resolve(node.cls);
    if (cls.is_none()) return d;
    try {
      return cls(d);  // elem_type({...}), as default_collate does
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_TypeError)) throw;
      return d;
    }
  }
  py::list items(n);
  for (std::size_t i = 0; i < n; ++i) {
    items[i] = build(node.children[i], mode, find, tuples, true);
  }
  if (node.kind == 'U' && tuples) return py::tuple(items);
  if (node.kind == 'U' || node.cls.empty()) return items;  // a tuple becomes a list
  const py::handle cls = resolve(node.cls);
  if (cls.is_none()) return items;
  if (node.kind == 'N') return cls(*items);
  try {
    return cls(items);
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) throw;
    return items;
  }
}

py::object Rebuilder::batch(const Batch& batch, const Structure* fixed) {
  const Structure& s = fixed != nullptr ? *fixed : carried(batch);
  return build(s.root, s.mode, [&batch](std::string_view name) { return batch.find(name); });
}

py::object Rebuilder::sample(const Sample& sample, const Structure& fixed) {
  return build(
      fixed.root, Mode::kSingle, [&sample](std::string_view name) { return sample.find(name); },
      true);
}

}  // namespace stoker::python
