// stoker::vision from Python: the transforms as small value classes (stoker/vision.py gives
// them torchvision's signatures) and the Pipeline they compose into, which a native dataset
// runs in its workers and Python code can call on encoded bytes or decoded pixels. A transform
// added to vision::Transform needs one class binding here; Pipeline.then takes any of them.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "interpreter.hpp"
#include "native.hpp"
#include "stoker/random.hpp"
#include "stoker/vision/pipeline.hpp"

namespace stoker::python {
namespace {

using vision::Interpolation;
using vision::Pipeline;
using vision::Size;

Size size_of(const py::handle& size) {
  if (py::isinstance<py::int_>(size)) {
    const int side = size.cast<int>();
    return Size{side, side};
  }
  const auto hw = size.cast<std::vector<int>>();
  if (hw.size() == 1) return Size{hw[0], hw[0]};
  if (hw.size() != 2) {
    throw py::value_error("stoker.vision: a size is an int or a sequence (h, w), not " +
                          py::repr(size).cast<std::string>());
  }
  return Size{hw[0], hw[1]};
}

DType output_dtype(const std::string& name) {
  if (name == "uint8") return DType::kUInt8;
  if (name == "float32") return DType::kFloat32;
  if (name == "float16") return DType::kFloat16;
  if (name == "bfloat16") return DType::kBFloat16;
  throw py::value_error(
      "stoker.vision: the output dtype is uint8, float32, float16 or bfloat16, "
      "not '" +
      name + "'");
}

// A generator for a pipeline called outside a loader's get(): seeded from torch's generator,
// so torch.manual_seed() makes it repeatable.
Generator outside_generator() {
  const py::object t =
      py::module_::import("torch").attr("randint")(0, std::int64_t{1} << 62, py::tuple());
  return Generator(t.attr("item")().cast<std::uint64_t>());
}

// Pixels given as a numpy array (H, W), (H, W, 1), (H, W, 3) or (H, W, 4) of uint8, or
// anything numpy.asarray makes one of (a PIL image, converted to RGB first).
vision::Image image_of(const py::handle& value) {
  py::object array = py::reinterpret_borrow<py::object>(value);
  if (py::hasattr(value, "convert") && py::hasattr(value, "mode")) {
    array = value.attr("convert")("RGB");  // a PIL image, as torchvision's loader converts it
  }
  const auto pixels = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>::ensure(
      py::module_::import("numpy").attr("asarray")(array));
  if (!pixels || (pixels.ndim() != 2 && pixels.ndim() != 3)) {
    throw py::type_error(
        "stoker.vision: give encoded bytes (JPEG, PNG, WebP), a PIL image or a "
        "uint8 array of shape (H, W) or (H, W, C)");
  }
  const int channels = pixels.ndim() == 2 ? 1 : static_cast<int>(pixels.shape(2));
  if (channels != 1 && channels != 3 && channels != 4) {
    throw py::value_error("stoker.vision: an image has 1, 3 or 4 channels, not " +
                          std::to_string(channels));
  }
  vision::Image image;
  image.reset(static_cast<int>(pixels.shape(1)), static_cast<int>(pixels.shape(0)), channels);
  std::memcpy(image.pixels.data(), pixels.data(), static_cast<std::size_t>(pixels.nbytes()));
  return image;
}

py::object call(const Pipeline& pipeline, const py::handle& value) {
  std::optional<Generator> own;
  if (pipeline.is_random()) {
    try {
      (void)sample_rng();  // inside a loader's get(): the sample's generator
    } catch (const std::logic_error&) {
      own.emplace(outside_generator());
    }
  }
  Tensor out;
  if (py::isinstance<py::bytes>(value) || py::isinstance<py::bytearray>(value) ||
      py::isinstance<py::memoryview>(value)) {
    const py::buffer_info info = py::reinterpret_borrow<py::buffer>(value).request();
    const std::span<const std::uint8_t> bytes(static_cast<const std::uint8_t*>(info.ptr),
                                              static_cast<std::size_t>(info.size * info.itemsize));
    const py::gil_scoped_release nogil;
    out = own ? pipeline.run(bytes, *own) : pipeline(bytes);
  } else {
    const vision::Image image = image_of(value);
    const py::gil_scoped_release nogil;
    out = own ? pipeline.run(image, *own) : pipeline(image);
  }
  return to_torch(out);
}

// One transform's class, and Pipeline.then for it: the binding of a transform added to
// vision::Transform is this call and its constructor.
template <class T>
py::class_<T> transform(py::module_& v, py::class_<Pipeline>& pipeline, const char* name) {
  pipeline.def(
      "then", [](Pipeline& p, const T& t) { p.then(t); }, py::arg("transform"));
  return py::class_<T>(v, name);
}

}  // namespace

void bind_vision(py::module_& m) {
  py::module_ v = m.def_submodule("vision", "stoker::vision transforms (see stoker.vision)");
  py::enum_<Interpolation>(v, "Interpolation")
      .value("NEAREST", Interpolation::kNearest)
      .value("BILINEAR", Interpolation::kBilinear)
      .value("BICUBIC", Interpolation::kBicubic);

  py::class_<Pipeline> pipeline(v, "Pipeline");
  pipeline.def(py::init<>());
  transform<vision::Resize>(v, pipeline, "Resize")
      .def(py::init([](const py::handle& size, Interpolation interpolation, int max_size) {
             if (py::isinstance<py::int_>(size)) {
               return vision::Resize(size.cast<int>(), interpolation, max_size);
             }
             return vision::Resize(size_of(size), interpolation);
           }),
           py::arg("size"), py::arg("interpolation"), py::arg("max_size"));
  transform<vision::CenterCrop>(v, pipeline, "CenterCrop")
      .def(py::init([](const py::handle& size) { return vision::CenterCrop(size_of(size)); }),
           py::arg("size"));
  transform<vision::RandomResizedCrop>(v, pipeline, "RandomResizedCrop")
      .def(py::init([](const py::handle& size, std::pair<double, double> scale,
                       std::pair<double, double> ratio, Interpolation interpolation) {
             return vision::RandomResizedCrop(size_of(size), scale, ratio, interpolation);
           }),
           py::arg("size"), py::arg("scale"), py::arg("ratio"), py::arg("interpolation"));
  transform<vision::RandomCrop>(v, pipeline, "RandomCrop")
      .def(py::init([](const py::handle& size, std::array<int, 4> padding, bool pad_if_needed,
                       std::array<std::uint8_t, 3> fill, const std::string& mode) {
             const vision::PaddingMode padding_mode =
                 mode == "edge"        ? vision::PaddingMode::kEdge
                 : mode == "reflect"   ? vision::PaddingMode::kReflect
                 : mode == "symmetric" ? vision::PaddingMode::kSymmetric
                                       : vision::PaddingMode::kConstant;
             return vision::RandomCrop(
                 size_of(size), vision::Padding(padding[0], padding[1], padding[2], padding[3]),
                 pad_if_needed, fill, padding_mode);
           }),
           py::arg("size"), py::arg("padding"), py::arg("pad_if_needed"), py::arg("fill"),
           py::arg("padding_mode"));
  transform<vision::RandomHorizontalFlip>(v, pipeline, "RandomHorizontalFlip")
      .def(py::init<double>(), py::arg("p"));
  transform<vision::ColorJitter>(v, pipeline, "ColorJitter")
      .def(py::init([](std::optional<std::pair<double, double>> brightness,
                       std::optional<std::pair<double, double>> contrast,
                       std::optional<std::pair<double, double>> saturation,
                       std::optional<std::pair<double, double>> hue) {
             vision::ColorJitter jitter;
             jitter.brightness = brightness;
             jitter.contrast = contrast;
             jitter.saturation = saturation;
             jitter.hue = hue;
             return jitter;
           }),
           py::arg("brightness"), py::arg("contrast"), py::arg("saturation"), py::arg("hue"));
  transform<vision::Normalize>(v, pipeline, "Normalize")
      .def(py::init<std::array<float, 3>, std::array<float, 3>>(), py::arg("mean"), py::arg("std"));

  pipeline
      .def(
          "output",
          [](Pipeline& p, const std::string& dtype, const std::string& layout) {
            p.output(output_dtype(dtype),
                     layout == "HWC" ? vision::Layout::kHWC : vision::Layout::kCHW);
          },
          py::arg("dtype"), py::arg("layout") = "CHW")
      .def(
          "set_mode",
          [](Pipeline& p, const std::string& mode) {
            if (mode != "exact" && mode != "fast") {
              throw py::value_error("stoker.vision: mode is 'exact' or 'fast', not '" + mode + "'");
            }
            p.mode(mode == "fast" ? vision::Mode::kFast : vision::Mode::kExact);
          },
          py::arg("mode"))
      .def_property_readonly("is_random", &Pipeline::is_random)
      .def("__repr__", &Pipeline::to_string)
      .def("__call__", &call, py::arg("image"));
}

}  // namespace stoker::python
