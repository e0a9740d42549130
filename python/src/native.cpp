// stoker's C++ datasets and their compositions as NativeDatasets, and the structure text their
// Python wrappers (stoker/datasets.py) describe them with. Each factory builds the C++ dataset
// with the GIL released (an index over many shards or files takes a while).
#include "native.hpp"

#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "stoker/composition.hpp"
#include "stoker/detail/batch_sink.hpp"
#include "stoker/image_folder_dataset.hpp"
#include "stoker/image_list_dataset.hpp"
#include "stoker/mds_dataset.hpp"
#include "stoker/mixture_dataset.hpp"
#include "stoker/mnist_dataset.hpp"
#include "stoker/npy_dataset.hpp"
#include "stoker/random.hpp"
#include "stoker/shards.hpp"
#include "stoker/tfrecord_dataset.hpp"
#include "stoker/token_dataset.hpp"
#include "stoker/vision/pipeline.hpp"
#include "stoker/webdataset.hpp"
#include "to_python.hpp"

namespace stoker::python {
namespace {

// Any stoker map-style dataset as a MapSource.
template <class D>
class NativeMap final : public MapSource {
 public:
  explicit NativeMap(D dataset) : dataset_(std::move(dataset)) {}
  std::size_t size() const override { return static_cast<std::size_t>(dataset_.size()); }
  Sample get(std::size_t index) override { return Sample(dataset_.get(index)); }

 private:
  D dataset_;
};

template <class D>
class NativeStream final : public StreamSource {
 public:
  explicit NativeStream(D dataset) : dataset_(std::move(dataset)) {}
  std::optional<Sample> next() override { return dataset_.next(); }
  void start_epoch(std::uint64_t epoch) override {
    if constexpr (RestartableDataset<D>) dataset_.start_epoch(epoch);
  }

 private:
  D dataset_;
};

// A MapSource as a stoker map-style dataset again: a part of the C++ compositions.
struct SourceDataset {
  std::shared_ptr<MapSource> source;
  std::size_t size() const { return source->size(); }
  Sample get(std::size_t index) { return source->get(index); }
};
struct StreamDataset {
  std::shared_ptr<StreamSource> source;
  std::optional<Sample> next() { return source->next(); }
  void start_epoch(std::uint64_t epoch) { source->start_epoch(epoch); }
};

template <class D>
NativeDataset map_dataset(D dataset, const std::string& structure) {
  return NativeDataset{std::make_shared<NativeMap<D>>(std::move(dataset)), nullptr,
                       parse_structure(structure)};
}
template <class D>
NativeDataset stream_dataset(D dataset, const std::string& structure) {
  return NativeDataset{nullptr, std::make_shared<NativeStream<D>>(std::move(dataset)),
                       parse_structure(structure)};
}

const NativeDataset& require_map(const NativeDataset& d, const char* what) {
  if (!d.map) {
    throw py::type_error(std::string("stoker.") + what +
                         ": the dataset is iterable (a stream); this needs a map-style one");
  }
  return d;
}

// A structure's text from a template (stoker/datasets.py): nested tuples, lists and dicts
// whose leaves are "<kind>:<field>" strings ("T:image", "I:label").
void write_template(StructureWriter& w, const py::handle& t) {
  if (py::isinstance<py::str>(t)) {
    const std::string leaf = t.cast<std::string>();
    if (leaf.size() < 3 || leaf[1] != ':') {
      throw std::invalid_argument("stoker: a structure leaf is '<kind>:<field>', not '" + leaf +
                                  "'");
    }
    w.named_leaf(static_cast<Leaf>(leaf[0]), std::string_view(leaf).substr(2));
  } else if (py::isinstance<py::dict>(t)) {
    const py::dict d = t.cast<py::dict>();
    w.container('D', "", d.size());
    for (const auto& [key, value] : d) {
      w.key(key.cast<std::string>());
      write_template(w, value);
    }
  } else if (py::isinstance<py::tuple>(t)) {
    const py::tuple items = t.cast<py::tuple>();
    w.tuple(items.size());
    for (const py::handle item : items) write_template(w, item);
  } else if (py::isinstance<py::list>(t)) {
    const py::list items = t.cast<py::list>();
    w.container('A', "", items.size());
    for (const py::handle item : items) write_template(w, item);
  } else {
    throw std::invalid_argument(
        "stoker: a structure template holds str leaves, tuples, lists "
        "and dicts");
  }
}

std::string structure_text(const py::handle& t) {
  StructureWriter w;
  w.start(Mode::kBatch);
  write_template(w, t);
  parse_structure(w.text());  // checks it
  return w.text();
}

// A shard field's decoder by its Python name, or a vision Pipeline.
FieldDecoder decoder_of(const py::handle& spec) {
  if (py::isinstance<vision::Pipeline>(spec)) {
    return image_field(spec.cast<vision::Pipeline>());
  }
  const std::string name = spec.cast<std::string>();
  if (name == "int") return decode_int_field;
  if (name == "npy") return decode_npy_field;
  if (name == "bytes" || name == "str") return decode_raw_field;
  throw std::invalid_argument(
      "stoker: a shard field's decoder is a stoker.vision transform or "
      "one of 'int', 'npy', 'bytes', 'str', not '" +
      name + "'");
}

// fields: [(record field, output name, decoder or None)].
template <class Options>
Options shard_options(const py::list& fields) {
  Options options;
  for (const py::handle f : fields) {
    const py::tuple spec = f.cast<py::tuple>();
    FieldSpec field;
    field.name = spec[0].cast<std::string>();
    field.as = spec[1].cast<std::string>();
    if (!spec[2].is_none()) field.decoder = decoder_of(spec[2]);
    options.fields.push_back(std::move(field));
  }
  return options;
}

StreamOptions stream_options(const py::dict& o) {
  StreamOptions s;
  if (o.contains("shuffle")) s.shuffle = o["shuffle"].cast<bool>();
  if (o.contains("shuffle_buffer")) s.shuffle_buffer = o["shuffle_buffer"].cast<std::size_t>();
  if (o.contains("seed")) s.seed = o["seed"].cast<std::uint64_t>();
  if (o.contains("rank")) s.rank = o["rank"].cast<std::size_t>();
  if (o.contains("world_size")) s.world_size = o["world_size"].cast<std::size_t>();
  if (o.contains("drop_uneven") && o["drop_uneven"].cast<bool>()) {
    s.equal_batches = EqualBatches::kDrop;
  }
  return s;
}

// MNIST normalised as torchvision's Normalize((mean,), (std,)) computes it in float32 (the
// engine's MnistDataset already gives ToTensor's [1, 28, 28] in [0, 1]).
struct NormalizedMnist {
  MnistDataset dataset;
  std::optional<float> mean;
  std::optional<float> std;
  std::size_t size() const { return dataset.size(); }
  Sample get(std::size_t i) const {
    Sample s = dataset.get(i);
    if (!mean || !std) return s;
    const Tensor& image = s["image"];
    Tensor out = Tensor::empty(DType::kFloat32, image.shape());
    const float* in = image.data<float>();
    float* px = out.data<float>();
    for (std::size_t k = 0; k < image.numel(); ++k) px[k] = (in[k] - *mean) / *std;
    s.set("image", std::move(out));
    return s;
  }
};

DType dtype_of(const std::string& name) {
  static const std::pair<const char*, DType> names[] = {
      {"uint8", DType::kUInt8},     {"int8", DType::kInt8},         {"int16", DType::kInt16},
      {"int32", DType::kInt32},     {"int64", DType::kInt64},       {"uint16", DType::kUInt16},
      {"float16", DType::kFloat16}, {"bfloat16", DType::kBFloat16}, {"float32", DType::kFloat32},
      {"float64", DType::kFloat64}, {"bool", DType::kBool}};
  for (const auto& [n, d] : names) {
    if (name == n) return d;
  }
  throw std::invalid_argument("stoker: unknown dtype '" + name + "'");
}

}  // namespace

void bind_native(py::module_& m) {
  py::class_<NativeDataset>(m, "NativeDataset",
                            "One of stoker's C++ datasets, loaded without Python per sample.")
      .def("__len__",
           [](const NativeDataset& d) {
             if (!d.map) throw py::type_error("stoker: an iterable dataset has no length");
             return d.map->size();
           })
      .def("__getitem__",
           [](const NativeDataset& d, std::int64_t index) {
             require_map(d, "Dataset[index]");
             const auto n = static_cast<std::int64_t>(d.map->size());
             if (index < 0) index += n;
             if (index < 0 || index >= n) {
               throw py::index_error("stoker: index " + std::to_string(index) +
                                     " is out of range for a dataset of " + std::to_string(n) +
                                     " samples");
             }
             Sample sample;
             {
               const py::gil_scoped_release nogil;
               // Inside a loader's get() (a Python dataset that reads this one), the sample's
               // generator; outside, random transforms draw as for this index in epoch 0 with
               // seed 0 (as the memory probe's samples do): ds[i] is the same on every call.
               try {
                 (void)sample_rng();
               } catch (const std::logic_error&) {
                 detail::begin_probe_sample(static_cast<std::size_t>(index));
               }
               sample = d.map->get(static_cast<std::size_t>(index));
             }
             return Rebuilder().sample(sample, *d.structure);
           })
      .def_property_readonly("iterable", [](const NativeDataset& d) { return !d.map; });

  m.def("structure_text", &structure_text, py::arg("template"));
  m.def("expand_shards", &expand_shards, py::arg("pattern"));

  m.def(
      "image_folder",
      [](const std::string& root, std::optional<vision::Pipeline> pipeline,
         const std::string& structure) {
        std::optional<ImageFolderDataset> ds;
        {
          const py::gil_scoped_release nogil;
          ds.emplace(root, pipeline ? *pipeline : vision::Pipeline());
        }
        py::list classes = py::cast(ds->classes());
        py::list files = py::cast(ds->files());
        return py::make_tuple(map_dataset(std::move(*ds), structure), classes, files);
      },
      py::arg("root"), py::arg("pipeline"), py::arg("structure"));
  m.def(
      "image_list",
      [](const py::list& entries, std::optional<vision::Pipeline> pipeline,
         const std::string& structure) {
        std::vector<ImageListDataset::Entry> list;
        list.reserve(entries.size());
        for (const py::handle e : entries) {
          const py::tuple pair = e.cast<py::tuple>();
          const auto label = pair[1].cast<std::int64_t>();
          if (py::isinstance<py::bytes>(pair[0]) || py::isinstance<py::bytearray>(pair[0])) {
            const std::string bytes = pair[0].cast<std::string>();
            list.push_back(
                ImageListDataset::encoded(std::vector<std::uint8_t>(bytes.begin(), bytes.end()),
                                          label, "image " + std::to_string(list.size())));
          } else {
            list.push_back(ImageListDataset::file(py::str(pair[0]).cast<std::string>(), label));
          }
        }
        return map_dataset(
            ImageListDataset(std::move(list), pipeline ? *pipeline : vision::Pipeline()),
            structure);
      },
      py::arg("entries"), py::arg("pipeline"), py::arg("structure"));
  m.def(
      "mnist",
      [](const std::string& root, bool train, const std::string& dtype, std::optional<float> mean,
         std::optional<float> std, const std::string& structure) {
        MnistOptions options;
        options.image_dtype = dtype_of(dtype);
        std::optional<MnistDataset> ds;
        {
          const py::gil_scoped_release nogil;
          ds.emplace(root, train ? MnistDataset::Mode::kTrain : MnistDataset::Mode::kTest, options);
        }
        return map_dataset(NormalizedMnist{std::move(*ds), mean, std}, structure);
      },
      py::arg("root"), py::arg("train"), py::arg("dtype"), py::arg("mean"), py::arg("std"),
      py::arg("structure"));
  m.def(
      "default_field_kind",
      [](const std::string& field) {
        // What FieldDecoders::defaults() does with a record field of this name.
        static const FieldDecoders defaults = FieldDecoders::defaults();
        const FieldDecoder* decoder = defaults.find(field);
        if (decoder == nullptr) return "bytes";
        using Plain = Tensor (*)(std::span<const std::uint8_t>, std::string_view);
        const Plain* target = decoder->target<Plain>();
        if (target != nullptr && *target == &decode_int_field) return "int";
        if (target != nullptr && *target == &decode_npy_field) return "npy";
        if (target != nullptr && *target == &decode_raw_field) return "bytes";
        return "image";
      },
      py::arg("field"));
  m.def(
      "npy",
      [](std::vector<std::pair<std::string, std::string>> fields, const std::string& structure) {
        return map_dataset(NpyDataset(std::move(fields)), structure);
      },
      py::arg("fields"), py::arg("structure"));
  m.def(
      "tokens",
      [](std::vector<std::string> shards, std::size_t context, std::optional<std::size_t> stride,
         const std::string& dtype, const std::string& format, const std::string& structure) {
        TokenOptions options;
        options.context = context;
        options.stride = stride;
        options.dtype = dtype_of(dtype);
        options.format = format == "llmc"  ? TokenDataset::Format::kLlmc
                         : format == "raw" ? TokenDataset::Format::kRaw
                                           : TokenDataset::Format::kDetect;
        return map_dataset(TokenDataset(std::move(shards), options), structure);
      },
      py::arg("shards"), py::arg("context"), py::arg("stride"), py::arg("dtype"), py::arg("format"),
      py::arg("structure"));
  m.def(
      "webdataset",
      [](std::vector<std::string> shards, const py::list& fields, const std::string& structure,
         std::optional<py::dict> stream) {
        ShardOptions options = shard_options<ShardOptions>(fields);
        if (stream) {
          return stream_dataset(
              WebDatasetShards::stream(std::move(shards), stream_options(*stream), options),
              structure);
        }
        const py::gil_scoped_release nogil;
        return map_dataset(WebDatasetShards(std::move(shards), options), structure);
      },
      py::arg("shards"), py::arg("fields"), py::arg("structure"), py::arg("stream"));
  m.def(
      "tfrecord",
      [](std::vector<std::string> files, const py::list& fields, const std::string& structure,
         std::vector<std::string> scalar_features, std::optional<py::dict> stream) {
        TFRecordOptions options = shard_options<TFRecordOptions>(fields);
        options.scalar_features = std::move(scalar_features);
        if (stream) {
          return stream_dataset(
              TFRecordDataset::stream(std::move(files), stream_options(*stream), options),
              structure);
        }
        const py::gil_scoped_release nogil;
        return map_dataset(TFRecordDataset(std::move(files), options), structure);
      },
      py::arg("files"), py::arg("fields"), py::arg("structure"), py::arg("scalar_features"),
      py::arg("stream"));
  m.def(
      "mds",
      [](const std::string& directory, const py::list& fields, const std::string& structure,
         std::optional<py::dict> stream) {
        MdsOptions options = shard_options<MdsOptions>(fields);
        if (stream) {
          return stream_dataset(MdsDataset::stream(directory, stream_options(*stream), options),
                                structure);
        }
        const py::gil_scoped_release nogil;
        return map_dataset(MdsDataset(directory, options), structure);
      },
      py::arg("directory"), py::arg("fields"), py::arg("structure"), py::arg("stream"));

  // Compositions of NativeDatasets.
  m.def(
      "subset",
      [](const NativeDataset& d, std::vector<std::size_t> indices) {
        require_map(d, "Subset");
        return NativeDataset{std::make_shared<NativeMap<Subset<SourceDataset>>>(
                                 Subset(SourceDataset{d.map}, std::move(indices))),
                             nullptr, d.structure};
      },
      py::arg("dataset"), py::arg("indices"));
  m.def(
      "concat",
      [](const std::vector<NativeDataset>& parts) {
        if (parts.empty()) throw py::value_error("stoker.ConcatDataset: no datasets given");
        std::vector<SourceDataset> sources;
        for (const NativeDataset& p : parts)
          sources.push_back({require_map(p, "ConcatDataset").map});
        return NativeDataset{
            std::make_shared<NativeMap<ConcatDataset>>(ConcatDataset(std::move(sources))), nullptr,
            parts.front().structure};
      },
      py::arg("datasets"));
  m.def(
      "chain",
      [](const std::vector<NativeDataset>& parts) {
        if (parts.empty()) throw py::value_error("stoker.ChainDataset: no datasets given");
        std::vector<StreamDataset> sources;
        for (const NativeDataset& p : parts) {
          if (!p.stream) throw py::type_error("stoker.ChainDataset: its parts are streams");
          sources.push_back({p.stream});
        }
        return NativeDataset{
            nullptr, std::make_shared<NativeStream<ChainDataset>>(ChainDataset(std::move(sources))),
            parts.front().structure};
      },
      py::arg("datasets"));
  m.def(
      "mixture",
      [](const std::vector<std::pair<NativeDataset, double>>& parts, std::size_t samples_per_epoch,
         std::uint64_t seed) {
        if (parts.empty()) throw py::value_error("stoker.MixtureDataset: no datasets given");
        std::vector<MixtureDataset::Source> sources;
        for (const auto& [p, w] : parts) {
          sources.emplace_back(SourceDataset{require_map(p, "MixtureDataset").map}, w);
        }
        return NativeDataset{std::make_shared<NativeMap<MixtureDataset>>(
                                 MixtureDataset(std::move(sources), samples_per_epoch, seed)),
                             nullptr, parts.front().first.structure};
      },
      py::arg("datasets"), py::arg("samples_per_epoch"), py::arg("seed"));
  m.def(
      "random_split",
      [](const NativeDataset& d, const py::list& lengths, std::uint64_t seed) {
        require_map(d, "random_split");
        // Fractions (floats summing to 1) or lengths, as torch's random_split takes them.
        bool fractions = !lengths.empty();
        for (const py::handle x : lengths) fractions = fractions && py::isinstance<py::float_>(x);
        std::vector<Subset<SourceDataset>> parts =
            fractions
                ? random_split(SourceDataset{d.map}, lengths.cast<std::vector<double>>(), seed)
                : random_split(SourceDataset{d.map}, lengths.cast<std::vector<std::size_t>>(),
                               seed);
        std::vector<NativeDataset> out;
        for (Subset<SourceDataset>& part : parts) {
          out.push_back(
              NativeDataset{std::make_shared<NativeMap<Subset<SourceDataset>>>(std::move(part)),
                            nullptr, d.structure});
        }
        return out;
      },
      py::arg("dataset"), py::arg("lengths"), py::arg("seed"));
}

}  // namespace stoker::python
