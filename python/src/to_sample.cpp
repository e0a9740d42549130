// Flattening a Python sample: the walk that writes the structure text and collects the leaves,
// then each leaf's bytes (numpy's buffer protocol, torch's DLPack export, or the scalar) copied
// into the sample's field. The checks and messages follow torch.utils.data.default_collate
// (torch 1.13), so that a sample it refuses is refused here with the same words.
#include "to_sample.hpp"

#include <cstring>
#include <stdexcept>
#include <string_view>

#include "interpreter.hpp"
#include "stoker/dlpack.hpp"

namespace stoker::python {
namespace {

// default_collate's message for what it cannot collate (torch/utils/data/_utils/collate.py).
[[noreturn]] void unsupported(const std::string& found) {
  throw py::type_error(
      "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
      "found " +
      found);
}

std::string repr_type(py::handle value) {
  return py::str(py::type::handle_of(value)).cast<std::string>();
}

// Nesting deeper than this is a cycle or a mistake, not a sample.
constexpr int kMaxDepth = 64;

// What a leaf's bytes are, and what keeps them valid while they are copied.
class LeafBytes {
 public:
  LeafBytes() = default;
  LeafBytes(const LeafBytes&) = delete;
  LeafBytes& operator=(const LeafBytes&) = delete;
  ~LeafBytes() {
    if (has_view_) PyBuffer_Release(&view_);
    if (dl_ != nullptr && dl_->deleter != nullptr) dl_->deleter(dl_);
  }

  DType dtype = DType::kUInt8;
  Shape shape;
  const void* data = nullptr;
  std::size_t nbytes = 0;

  void read(Leaf kind, py::handle value) {
    switch (kind) {
      case Leaf::kTensor:
        if (PyObject_TypeCheck(value.ptr(),
                               reinterpret_cast<PyTypeObject*>(interop().torch_tensor_type))) {
          read_torch(value);
        } else {
          read_numpy(value);
        }
        return;
      case Leaf::kInt: {
        int overflow = 0;
        scalar_.i = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
        if (overflow != 0) {
          throw py::value_error("stoker: the int " + py::repr(value).cast<std::string>() +
                                " in a sample does not fit int64 (default_collate makes an int64 "
                                "tensor of ints)");
        }
        if (scalar_.i == -1 && PyErr_Occurred() != nullptr) throw py::error_already_set();
        set_scalar(DType::kInt64, &scalar_.i, sizeof scalar_.i);
        return;
      }
      case Leaf::kFloat:
        scalar_.d = PyFloat_AsDouble(value.ptr());
        set_scalar(DType::kFloat64, &scalar_.d, sizeof scalar_.d);
        return;
      case Leaf::kBool:
        scalar_.b = value.ptr() == Py_True;
        set_scalar(DType::kBool, &scalar_.b, sizeof scalar_.b);
        return;
      case Leaf::kStr: {
        Py_ssize_t size = 0;
        const char* utf8 = PyUnicode_AsUTF8AndSize(value.ptr(), &size);  // cached by the str
        if (utf8 == nullptr) throw py::error_already_set();
        set_text(utf8, static_cast<std::size_t>(size));
        return;
      }
      case Leaf::kBytes:
        set_text(PyBytes_AS_STRING(value.ptr()),
                 static_cast<std::size_t>(PyBytes_GET_SIZE(value.ptr())));
        return;
    }
  }

 private:
  void set_scalar(DType d, const void* p, std::size_t n) {
    dtype = d;
    shape = Shape{};
    data = p;
    nbytes = n;
  }
  void set_text(const char* p, std::size_t n) {
    dtype = DType::kUInt8;
    shape = Shape{static_cast<std::int64_t>(n)};
    data = p;
    nbytes = n;
  }

  // numpy arrays and scalars, through the buffer protocol.
  void read_numpy(py::handle value) {
    py::object contiguous;
    if (PyObject_GetBuffer(value.ptr(), &view_, PyBUF_RECORDS_RO) != 0) {
      PyErr_Clear();
      unsupported(dtype_text(value));
    }
    has_view_ = true;
    if (PyBuffer_IsContiguous(&view_, 'C') == 0) {
      PyBuffer_Release(&view_);
      has_view_ = false;
      contiguous = py::reinterpret_borrow<py::object>(interop().ascontiguousarray)(value);
      if (PyObject_GetBuffer(contiguous.ptr(), &view_, PyBUF_RECORDS_RO) != 0) {
        throw py::error_already_set();
      }
      has_view_ = true;
      holder_ = std::move(contiguous);
    }
    dtype = numpy_dtype(value);
    if (view_.ndim > static_cast<int>(Shape::kMaxDims)) {
      throw py::value_error("stoker: an array in a sample has " + std::to_string(view_.ndim) +
                            " dimensions; stoker holds at most " + std::to_string(Shape::kMaxDims));
    }
    std::vector<std::int64_t> dims(static_cast<std::size_t>(view_.ndim));
    for (int d = 0; d < view_.ndim; ++d) dims[static_cast<std::size_t>(d)] = view_.shape[d];
    shape = Shape(dims);
    data = view_.buf;
    nbytes = static_cast<std::size_t>(view_.len);
  }

  static std::string dtype_text(py::handle value) {
    try {
      return py::str(value.attr("dtype")).cast<std::string>();
    } catch (const py::error_already_set&) {
      return repr_type(value);
    }
  }

  DType numpy_dtype(py::handle value) const {
    std::string_view format = view_.format != nullptr ? view_.format : "B";
    if (!format.empty() && (format[0] == '>' || format[0] == '!')) {
      throw py::value_error(
          "stoker: an array in a sample has a byte order different from the "
          "native byte order (" +
          dtype_text(value) + "); convert it with .astype('=" + std::string(format.substr(1)) +
          "')");
    }
    if (!format.empty() &&
        (format[0] == '<' || format[0] == '=' || format[0] == '@' || format[0] == '|')) {
      format.remove_prefix(1);
    }
    const auto size = static_cast<std::size_t>(view_.itemsize);
    if (format.size() == 1) {
      switch (format[0]) {
        case '?':
          return DType::kBool;
        case 'b':
          return DType::kInt8;
        case 'B':
          return DType::kUInt8;
        case 'h':
          return DType::kInt16;
        case 'i':
          return size == 4 ? DType::kInt32 : DType::kInt64;
        case 'l':
        case 'q':
          if (size == 8) return DType::kInt64;
          break;
        case 'e':
          return DType::kFloat16;
        case 'f':
          return DType::kFloat32;
        case 'd':
          return DType::kFloat64;
        case 'H':
        case 'I':
        case 'L':
        case 'Q':
          // As torch.as_tensor refuses them (torch 1.13 has no unsigned type but uint8).
          throw py::type_error(
              "can't convert np.ndarray of type numpy.uint" + std::to_string(8 * size) +
              ". The only supported types are: float64, float32, float16, complex64, "
              "complex128, int64, int32, int16, int8, uint8, and bool.");
        default:
          break;
      }
    }
    unsupported(dtype_text(value));
  }

  // torch tensors, through their DLPack export (no copy until the field's).
  void read_torch(py::handle value) {
    py::object t = py::reinterpret_borrow<py::object>(value);
    if (t.attr("requires_grad").cast<bool>()) t = t.attr("detach")();
    const bool is_bool = t.attr("dtype").ptr() == interop().torch_bool;
    if (is_bool) t = t.attr("view")(py::handle(interop().torch_uint8));
    if (!t.attr("is_contiguous")().cast<bool>()) t = t.attr("contiguous")();
    py::object capsule = t.attr("__dlpack__")();
    auto* managed =
        static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
    if (managed == nullptr) throw py::error_already_set();
    // Ours now: torch's capsule destructor frees only a capsule still named "dltensor".
    PyCapsule_SetName(capsule.ptr(), "used_dltensor");
    dl_ = managed;
    const dlpack::DLTensor& dl = managed->dl_tensor;
    if (dl.device.device_type != dlpack::kDLCPU) {
      throw py::type_error(
          "stoker: a sample holds a tensor on " + py::str(t.attr("device")).cast<std::string>() +
          "; samples are loaded in worker processes, which must not use CUDA: return CPU tensors "
          "and move the batch to the GPU in the training loop");
    }
    dtype = is_bool ? DType::kBool : dl_dtype(dl.dtype, t);
    std::vector<std::int64_t> dims(dl.shape, dl.shape + dl.ndim);
    if (dims.size() > Shape::kMaxDims) {
      throw py::value_error("stoker: a tensor in a sample has " + std::to_string(dims.size()) +
                            " dimensions; stoker holds at most " + std::to_string(Shape::kMaxDims));
    }
    shape = Shape(dims);
    data = static_cast<const std::byte*>(dl.data) + dl.byte_offset;
    nbytes = shape.numel() * dtype_size(dtype);
  }

  static DType dl_dtype(const dlpack::DLDataType& t, py::handle tensor) {
    if (t.lanes == 1) {
      if (t.code == dlpack::kDLInt) {
        if (t.bits == 8) return DType::kInt8;
        if (t.bits == 16) return DType::kInt16;
        if (t.bits == 32) return DType::kInt32;
        if (t.bits == 64) return DType::kInt64;
      } else if (t.code == dlpack::kDLUInt && t.bits == 8) {
        return DType::kUInt8;
      } else if (t.code == dlpack::kDLFloat) {
        if (t.bits == 16) return DType::kFloat16;
        if (t.bits == 32) return DType::kFloat32;
        if (t.bits == 64) return DType::kFloat64;
      } else if (t.code == dlpack::kDLBfloat && t.bits == 16) {
        return DType::kBFloat16;
      }
    }
    throw py::type_error("stoker: a sample holds a tensor of dtype " +
                         py::str(tensor.attr("dtype")).cast<std::string>() +
                         ", which stoker cannot hold (it has no complex or quantized types)");
  }

  Py_buffer view_{};
  bool has_view_ = false;
  dlpack::DLManagedTensor* dl_ = nullptr;
  py::object holder_;
  union {
    std::int64_t i;
    double d;
    bool b;
  } scalar_{};
};

bool is_namedtuple(PyTypeObject* type) {
  return PyObject_HasAttrString(reinterpret_cast<PyObject*>(type), "_fields") != 0;
}

}  // namespace

PythonError::PythonError(std::string type, const std::string& text)
    : Error(type + "\n" + text), type_(std::move(type)) {}

PythonError PythonError::from_current(py::error_already_set& error) {
  std::string type = "builtins\tException";
  std::string text;
  try {
    const py::handle cls = error.type();
    type = py::str(cls.attr("__module__")).cast<std::string>() + "\t" +
           py::str(cls.attr("__qualname__")).cast<std::string>();
    // An error raised from C++ (a pybind11 exception) has no traceback: None, not null.
    auto or_none = [](const py::handle& h) {
      return h ? py::reinterpret_borrow<py::object>(h) : py::object(py::none());
    };
    const py::object lines =
        py::module_::import("traceback")
            .attr("format_exception")(or_none(error.type()), or_none(error.value()),
                                      or_none(error.trace()));
    text = py::str("").attr("join")(lines).cast<std::string>();
  } catch (const py::error_already_set&) {
    text = error.what();
  }
  if (text.size() > kMaxTracebackChars) {
    // The end says what was raised and where; the beginning is the outer frames.
    std::size_t cut = text.size() - kMaxTracebackChars;
    cut = text.find('\n', cut);
    text = "Traceback (most recent call last, outer frames left out):\n" +
           text.substr(cut == std::string::npos ? text.size() - kMaxTracebackChars : cut + 1);
  }
  PythonError out(std::move(type), text);
  out.original = std::make_shared<py::error_already_set>(std::move(error));
  return out;
}

const std::string& Flattener::class_name(PyTypeObject* type) {
  auto it = class_names_.find(type);
  if (it == class_names_.end()) {
    const py::handle cls(reinterpret_cast<PyObject*>(type));
    std::string name = py::str(cls.attr("__module__")).cast<std::string>() + "\t" +
                       py::str(cls.attr("__qualname__")).cast<std::string>();
    it =
        class_names_
            .emplace(type, std::make_pair(py::reinterpret_borrow<py::object>(cls), std::move(name)))
            .first;
  }
  return it->second.second;
}

void Flattener::walk_sequence(py::handle value, char kind, PyTypeObject* type, int depth) {
  const py::object fast =
      py::reinterpret_steal<py::object>(PySequence_Fast(value.ptr(), "a sequence"));
  if (!fast) throw py::error_already_set();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.ptr());
  if (kind == 'U') {
    writer_.tuple(static_cast<std::size_t>(n));
  } else {
    writer_.container(kind, type == nullptr ? std::string_view{} : class_name(type),
                      static_cast<std::size_t>(n));
  }
  PyObject** items = PySequence_Fast_ITEMS(fast.ptr());
  for (Py_ssize_t i = 0; i < n; ++i) walk(items[i], depth + 1);
}

void Flattener::walk(py::handle value, int depth) {
  if (depth > kMaxDepth) {
    throw py::value_error("stoker: a sample nests containers more than " +
                          std::to_string(kMaxDepth) + " deep (a cycle?)");
  }
  PyObject* o = value.ptr();
  const Interop& types = interop();
  PyTypeObject* type = Py_TYPE(o);
  auto add = [&](Leaf kind) {
    writer_.leaf(kind);
    leaves_.push_back({kind, py::reinterpret_borrow<py::object>(value)});
  };
  // default_collate's order: tensors and numpy arrays; str and bytes (numpy's str_ and
  // bytes_ too); numpy's other scalars; Python numbers (a numpy float64 is also a float, and
  // a numpy scalar first); then mappings and sequences.
  if (PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(types.torch_tensor_type)) ||
      PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(types.ndarray_type))) {
    add(Leaf::kTensor);
  } else if (PyUnicode_Check(o)) {
    add(Leaf::kStr);
  } else if (PyBytes_Check(o)) {
    add(Leaf::kBytes);
  } else if (PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(types.numpy_generic_type))) {
    add(Leaf::kTensor);
  } else if (PyBool_Check(o)) {
    add(Leaf::kBool);
  } else if (PyLong_Check(o)) {
    add(Leaf::kInt);
  } else if (PyFloat_Check(o)) {
    add(Leaf::kFloat);
  } else if (PyDict_Check(o)) {
    writer_.container('D', PyDict_CheckExact(o) ? std::string_view{} : class_name(type),
                      static_cast<std::size_t>(PyDict_Size(o)));
    Py_ssize_t pos = 0;
    PyObject* key = nullptr;
    PyObject* item = nullptr;
    while (PyDict_Next(o, &pos, &key, &item)) {
      if (PyUnicode_Check(key)) {
        Py_ssize_t size = 0;
        const char* utf8 = PyUnicode_AsUTF8AndSize(key, &size);
        if (utf8 == nullptr) throw py::error_already_set();
        writer_.key(std::string_view(utf8, static_cast<std::size_t>(size)));
      } else if (PyLong_Check(key) && !PyBool_Check(key)) {
        const long long k = PyLong_AsLongLong(key);
        if (k == -1 && PyErr_Occurred() != nullptr) throw py::error_already_set();
        writer_.key(static_cast<std::int64_t>(k));
      } else {
        throw py::type_error("stoker: a dict in a sample has a key of type " + repr_type(key) +
                             "; the default collation keeps str and int keys: give the "
                             "DataLoader a collate_fn for others");
      }
      walk(item, depth + 1);
    }
  } else if (PyTuple_Check(o)) {
    if (is_namedtuple(type)) {
      walk_sequence(value, 'N', type, depth);
    } else {
      walk_sequence(value, 'U', nullptr, depth);  // collated into a list, as torch does
    }
  } else if (PyList_Check(o)) {
    walk_sequence(value, 'A', PyList_CheckExact(o) ? nullptr : type, depth);
  } else if (PyObject_IsInstance(o, types.mapping_abc) == 1) {
    const py::object keys = py::reinterpret_borrow<py::object>(value).attr("keys")();
    std::vector<py::object> ordered;
    for (const py::handle key : keys) ordered.push_back(py::reinterpret_borrow<py::object>(key));
    writer_.container('D', class_name(type), ordered.size());
    for (const py::object& key : ordered) {
      if (PyUnicode_Check(key.ptr())) {
        writer_.key(key.cast<std::string>());
      } else if (PyLong_Check(key.ptr()) && !PyBool_Check(key.ptr())) {
        writer_.key(key.cast<std::int64_t>());
      } else {
        throw py::type_error("stoker: a mapping in a sample has a key of type " + repr_type(key) +
                             "; the default collation keeps str and int keys: give the "
                             "DataLoader a collate_fn for others");
      }
      walk(value[key], depth + 1);
    }
  } else if (PyObject_IsInstance(o, types.sequence_abc) == 1) {
    walk_sequence(value, 'A', type, depth);
  } else {
    if (PyErr_Occurred() != nullptr) throw py::error_already_set();
    unsupported(repr_type(value));
  }
}

const Structure& Flattener::structure() {
  if (!structure_ || writer_.text() != structure_text_) {
    structure_ = parse_structure(writer_.text());
    structure_text_ = writer_.text();
    field_name_ = std::string(kStructureField) + structure_text_;
  }
  return *structure_;
}

// Drops the walk's references to the sample's leaves, whatever happens (GIL held).
struct LeavesReleased {
  std::vector<Flattener::LeafValue>& leaves;
  ~LeavesReleased() { leaves.clear(); }
};

Sample Flattener::to_sample(py::handle sample, bool text_anyway) {
  writer_.start(mode_);
  const LeavesReleased release{leaves_};
  leaves_.clear();
  walk(sample, 0);
  const Structure& s = structure();
  Sample out;
  for (std::size_t i = 0; i < leaves_.size(); ++i) {
    const LeafValue& leaf = leaves_[i];
    if (is_text(leaf.kind) && mode_ == Mode::kBatch && !ragged_ && !text_anyway) {
      throw TextNeedsRaggedCollate(
          "a sample holds str or bytes, which the stacking collate cannot hold");
    }
    LeafBytes bytes;
    bytes.read(leaf.kind, leaf.value);
    Tensor t = Tensor::empty(bytes.dtype, bytes.shape);
    if (bytes.nbytes > 0) std::memcpy(t.raw_data(), bytes.data, bytes.nbytes);
    out.set(s.leaves[i]->field, std::move(t));
  }
  out.set(field_name_, Tensor::empty(DType::kUInt8, Shape{0}));
  return out;
}

void Flattener::write(py::handle value, BatchBuilder& out) {
  writer_.start(mode_);
  const LeavesReleased release{leaves_};
  leaves_.clear();
  walk(value, 0);
  const Structure& s = structure();
  for (std::size_t i = 0; i < leaves_.size(); ++i) {
    LeafBytes bytes;
    bytes.read(leaves_[i].kind, leaves_[i].value);
    Tensor t = out.alloc(s.leaves[i]->field, bytes.dtype, bytes.shape);
    if (bytes.nbytes > 0) std::memcpy(t.raw_data(), bytes.data, bytes.nbytes);
  }
  out.alloc(field_name_, DType::kUInt8, Shape{0});
}

}  // namespace stoker::python
