// The Loader and Iterator bindings: LoaderOptions from the options dict, the sources and
// collates of a Python dataset, an epoch's batches as Python values, stats and diagnose.
#include "loader.hpp"

#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "interpreter.hpp"
#include "native.hpp"
#include "sources.hpp"
#include "stoker/data_loader.hpp"
#include "stoker/diagnose.hpp"
#include "stoker/memory.hpp"
#include "stoker/sampler.hpp"
#include "stoker/stats.hpp"
#include "to_python.hpp"

namespace stoker::python {
namespace {

// The indices the Python sampler gave for the next epoch (the loader asks once per begin()).
class ListSampler final : public Sampler {
 public:
  std::vector<std::size_t> indices(std::uint64_t /*epoch*/) override { return next; }
  std::vector<std::size_t> next;
};
class ListBatchSampler final : public BatchSamplerBase {
 public:
  std::vector<std::vector<std::size_t>> batches(std::uint64_t /*epoch*/) override { return next; }
  std::vector<std::vector<std::size_t>> next;
};

template <class T>
T get(const py::dict& d, const char* key, T fallback) {
  if (!d.contains(key) || d[key].is_none()) return fallback;
  return d[key].cast<T>();
}

Collation collation_of(const std::string& name) {
  if (name == "stack") return Collation::kStack;
  if (name == "ragged") return Collation::kRagged;
  if (name == "python") return Collation::kPython;
  throw std::invalid_argument("stoker: unknown collation '" + name + "'");
}

LoaderOptions base_options(const py::dict& o) {
  LoaderOptions opt;
  opt.batch_size = get<std::size_t>(o, "batch_size", 1);
  opt.shuffle = get<bool>(o, "shuffle", false);
  opt.drop_last = get<bool>(o, "drop_last", false);
  opt.num_workers = get<int>(o, "num_workers", 0);
  opt.prefetch_factor = get<std::size_t>(o, "prefetch_factor", kAdaptivePrefetch);
  opt.persistent_workers = get<bool>(o, "persistent_workers", false);
  opt.in_order = get<bool>(o, "in_order", true);
  opt.timeout = std::chrono::milliseconds(get<std::int64_t>(o, "timeout_ms", 0));
  opt.held_timeout = std::chrono::milliseconds(get<std::int64_t>(o, "held_timeout_ms", 0));
  opt.seed = get<std::uint64_t>(o, "seed", 0);
  opt.pin_memory = get<bool>(o, "pin_memory", false);
  opt.max_batch_bytes = get<std::size_t>(o, "max_batch_bytes", opt.max_batch_bytes);
  opt.on_worker_crash = get<std::string>(o, "on_worker_crash", "fail") == "respawn"
                            ? OnWorkerCrash::kRespawn
                            : OnWorkerCrash::kFail;
  opt.max_respawns = get<std::size_t>(o, "max_respawns", opt.max_respawns);
  opt.on_sample_error = get<std::string>(o, "on_sample_error", "fail") == "skip"
                            ? OnSampleError::kSkip
                            : OnSampleError::kFail;
  opt.max_skipped_samples = get<std::size_t>(o, "max_skipped_samples", opt.max_skipped_samples);
  opt.max_batches_per_worker = get<std::size_t>(o, "max_batches_per_worker", 0);
  opt.check_memory = get<bool>(o, "check_memory", true);
  opt.memory_fraction = get<double>(o, "memory_fraction", opt.memory_fraction);
  if (o.contains("memory_limit") && !o["memory_limit"].is_none()) {
    opt.memory_limit = o["memory_limit"].cast<std::uint64_t>();
  }
  opt.sample_bytes = get<std::size_t>(o, "sample_bytes", 0);
  opt.bind_workers = get<bool>(o, "bind_workers", false);
  opt.trace_path = get<std::string>(o, "trace_path", "");
  opt.log_interval = std::chrono::milliseconds(get<std::int64_t>(o, "log_interval_ms", 10000));
  opt.on_wait = check_signals;  // Ctrl-C reaches a consumer blocked in a fetch
  return opt;
}

class Loader;

// One epoch's batches. Keeps its Loader alive (a BatchIterator must not outlive its loader).
class Iterator {
 public:
  Iterator(py::object owner, Loader* loader, BatchIterator it)
      : owner_(std::move(owner)), loader_(loader), it_(std::move(it)) {}
  ~Iterator() { close(); }
  py::object next();
  // Ends the epoch now (stopping its workers without persistent_workers).
  void close() {
    if (closed_) return;
    closed_ = true;
    const py::gil_scoped_release nogil;
    it_ = BatchIterator();
  }

 private:
  py::object owner_;
  Loader* loader_;
  BatchIterator it_;
  bool closed_ = false;
};

class Loader {
 public:
  Loader(const py::object& dataset, const py::dict& o) {
    LoaderOptions opt = base_options(o);
    if (get<bool>(o, "sampler", false)) opt.sampler = sampler_ = std::make_shared<ListSampler>();
    if (get<bool>(o, "batch_sampler", false)) {
      opt.batch_sampler = batch_sampler_ = std::make_shared<ListBatchSampler>();
    }
    hooks_ = std::make_shared<PythonHooks>();
    hooks_->dataset = dataset;
    hooks_->collate_fn = o.contains("collate_fn") ? py::object(o["collate_fn"]) : py::none();
    hooks_->worker_init_fn =
        o.contains("worker_init_fn") ? py::object(o["worker_init_fn"]) : py::none();
    hooks_->unbatched = get<bool>(o, "unbatched", false);
    hooks_->num_workers = static_cast<std::size_t>(opt.num_workers);

    if (py::isinstance<NativeDataset>(dataset)) {
      const NativeDataset& native = dataset.cast<const NativeDataset&>();
      structure_ = native.structure;
      if (!hooks_->worker_init_fn.is_none()) set_worker_init(opt);
      // Raw bytes and text fields vary in length: collated ragged (values + offsets).
      if (!structure_->text_fields.empty() && !get<bool>(o, "unbatched", false)) {
        opt.collate = collate_ragged(structure_->text_fields);
      }
      if (native.map) {
        map_ = std::make_unique<DataLoader<MapHandle>>(MapHandle{native.map}, std::move(opt));
      } else {
        stream_ =
            std::make_unique<DataLoader<StreamHandle>>(StreamHandle{native.stream}, std::move(opt));
      }
      return;
    }
    const Collation collation = collation_of(get<std::string>(o, "collation", "stack"));
    set_worker_init(opt);
    if (get<bool>(o, "iterable", false)) {
      auto source = std::make_shared<PyStreamSource>(hooks_, collation);
      python_source_ = source;
      set_collate(opt, collation, [source](std::size_t n) { return source->take(n); });
      stream_ = std::make_unique<DataLoader<StreamHandle>>(StreamHandle{source}, std::move(opt));
    } else {
      auto source = std::make_shared<PyMapSource>(hooks_, collation);
      python_source_ = source;
      set_collate(opt, collation, [source](std::size_t n) { return source->take(n); });
      map_ = std::make_unique<DataLoader<MapHandle>>(MapHandle{source}, std::move(opt));
    }
  }

  ~Loader() {
    // Stopping the workers can take a while (stop message, SIGTERM, SIGKILL); nothing in it
    // needs Python. A Python source holds Python objects: python_source_ keeps it past this
    // block, so that it is destroyed (with the members) under the GIL.
    {
      const py::gil_scoped_release nogil;
      map_.reset();
      stream_.reset();
    }
  }

  static std::unique_ptr<Iterator> begin(const py::object& self) {
    Loader& l = self.cast<Loader&>();
    BatchIterator it;
    {
      const py::gil_scoped_release nogil;
      it = l.map_ ? l.map_->begin() : l.stream_->begin();
    }
    return std::make_unique<Iterator>(self, &l, std::move(it));
  }

  py::object rebuild(const Batch& batch) { return rebuilder_.batch(batch, structure_.get()); }

  std::size_t num_batches() {
    if (!map_) throw py::type_error("stoker: an iterable dataset's loader has no length");
    const py::gil_scoped_release nogil;
    return map_->size();
  }
  void set_epoch(std::uint64_t e) { map_ ? map_->set_epoch(e) : stream_->set_epoch(e); }
  std::uint64_t epoch() const { return map_ ? map_->epoch() : stream_->epoch(); }
  void set_indices(std::vector<std::size_t> indices) {
    if (!sampler_) throw std::logic_error("stoker: this loader was not built with a sampler");
    sampler_->next = std::move(indices);
  }
  void set_batches(std::vector<std::vector<std::size_t>> batches) {
    if (!batch_sampler_) {
      throw std::logic_error("stoker: this loader was not built with a batch sampler");
    }
    batch_sampler_->next = std::move(batches);
  }
  void set_base_seed(std::int64_t seed) { hooks_->base_seed = seed; }
  std::string state() const { return map_ ? map_->state() : stream_->state(); }
  void load_state(const std::string& s) { map_ ? map_->load_state(s) : stream_->load_state(s); }
  LoaderStats stats() const { return map_ ? map_->stats() : stream_->stats(); }
  std::vector<pid_t> worker_pids() const {
    return map_ ? map_->worker_pids() : stream_->worker_pids();
  }
  std::size_t num_workers() {
    const py::gil_scoped_release nogil;
    return map_ ? map_->num_workers() : stream_->num_workers();
  }
  MemoryEstimate memory_estimate() {
    const py::gil_scoped_release nogil;
    return map_ ? map_->memory_estimate() : stream_->memory_estimate();
  }

 private:
  void set_worker_init(LoaderOptions& opt) {
    opt.worker_init = [hooks = hooks_](std::size_t id) {
      const py::gil_scoped_acquire gil;
      start_worker_once(*hooks, id);
    };
  }
  void set_collate(LoaderOptions& opt, Collation collation,
                   std::function<std::vector<py::object>(std::size_t)> take) {
    if (collation == Collation::kRagged) opt.collate = ragged_text_collate();
    if (collation == Collation::kPython) opt.collate = python_collate(hooks_, std::move(take));
  }

  std::shared_ptr<PythonHooks> hooks_;
  std::shared_ptr<void> python_source_;  // a PyMapSource or PyStreamSource
  std::shared_ptr<ListSampler> sampler_;
  std::shared_ptr<ListBatchSampler> batch_sampler_;
  std::shared_ptr<const Structure> structure_;  // a native dataset's; else each batch's own
  std::unique_ptr<DataLoader<MapHandle>> map_;
  std::unique_ptr<DataLoader<StreamHandle>> stream_;
  Rebuilder rebuilder_;
};

py::object Iterator::next() {
  if (closed_) throw py::stop_iteration();
  std::optional<Batch> batch;
  {
    const py::gil_scoped_release nogil;
    batch = it_.next();
  }
  if (!batch) {
    close();
    throw py::stop_iteration();
  }
  return loader_->rebuild(*batch);
}

void bind_stats(py::module_& m) {
  py::class_<WorkerStats>(m, "WorkerStats", "One worker's share of LoaderStats.")
      .def_readonly("worker_id", &WorkerStats::worker_id)
      .def_readonly("pid", &WorkerStats::pid)
      .def_readonly("batches", &WorkerStats::batches)
      .def_readonly("samples", &WorkerStats::samples)
      .def_readonly("get_seconds", &WorkerStats::get_seconds)
      .def_readonly("collate_seconds", &WorkerStats::collate_seconds)
      .def_readonly("write_seconds", &WorkerStats::write_seconds)
      .def_readonly("busy_fraction", &WorkerStats::busy_fraction)
      .def_readonly("blocked_seconds", &WorkerStats::blocked_seconds)
      .def_readonly("rss_bytes", &WorkerStats::rss_bytes)
      .def_readonly("pss_bytes", &WorkerStats::pss_bytes);
  py::class_<LoaderStats>(m, "LoaderStats",
                          "What DataLoader.stats() reports (stoker/stats.hpp, docs/tuning.md).")
      .def_readonly("epoch", &LoaderStats::epoch)
      .def_readonly("batches", &LoaderStats::batches)
      .def_readonly("samples", &LoaderStats::samples)
      .def_readonly("bytes", &LoaderStats::bytes)
      .def_readonly("epoch_seconds", &LoaderStats::epoch_seconds)
      .def_readonly("wait_seconds", &LoaderStats::wait_seconds)
      .def_readonly("skipped_samples", &LoaderStats::skipped_samples)
      .def_readonly("skipped_indices", &LoaderStats::skipped_indices)
      .def_readonly("respawns", &LoaderStats::respawns)
      .def_readonly("workers_recycled", &LoaderStats::workers_recycled)
      .def_readonly("recent_samples_per_second", &LoaderStats::recent_samples_per_second)
      .def_readonly("workers", &LoaderStats::workers)
      .def_readonly("ring_slots", &LoaderStats::ring_slots)
      .def_readonly("ring_occupancy", &LoaderStats::ring_occupancy)
      .def_readonly("prefetch_depth", &LoaderStats::prefetch_depth)
      .def_readonly("prefetch_depth_limit", &LoaderStats::prefetch_depth_limit)
      .def_readonly("main_rss_bytes", &LoaderStats::main_rss_bytes)
      .def_readonly("main_pss_bytes", &LoaderStats::main_pss_bytes)
      .def_readonly("ring_bytes", &LoaderStats::ring_bytes)
      .def_readonly("cpu_busy_fraction", &LoaderStats::cpu_busy_fraction)
      .def_readonly("iowait_fraction", &LoaderStats::iowait_fraction)
      .def_readonly("logical_cpus", &LoaderStats::logical_cpus)
      .def_property_readonly("samples_per_second", &LoaderStats::samples_per_second)
      .def_property_readonly("bytes_per_second", &LoaderStats::bytes_per_second)
      .def_property_readonly("wait_fraction", &LoaderStats::wait_fraction)
      .def_property_readonly("tree_pss_bytes", &LoaderStats::tree_pss_bytes);
  py::class_<Diagnosis>(m, "Diagnosis", "What limits a loader: diagnose(stats).")
      .def_property_readonly("verdict",
                             [](const Diagnosis& d) { return std::string(to_string(d.verdict)); })
      .def_readonly("summary", &Diagnosis::summary)
      .def_readonly("advice", &Diagnosis::advice)
      .def_readonly("findings", &Diagnosis::findings)
      .def_readonly("suggested_num_workers", &Diagnosis::suggested_num_workers)
      .def_readonly("suggested_batch_size", &Diagnosis::suggested_batch_size)
      .def("__str__", [](const Diagnosis& d) { return to_string(d); });
  m.def(
      "diagnose",
      [](const LoaderStats& stats) {
        const py::gil_scoped_release nogil;  // probes the machine (/proc, /sys)
        return diagnose(stats);
      },
      py::arg("stats"));
}

}  // namespace

void bind_loader(py::module_& m) {
  bind_stats(m);
  py::class_<Iterator>(m, "Iterator")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &Iterator::next)
      .def("close", &Iterator::close);
  py::class_<Loader>(m, "Loader")
      .def(py::init<const py::object&, const py::dict&>(), py::arg("dataset"), py::arg("options"))
      .def("begin", &Loader::begin)
      .def("num_batches", &Loader::num_batches)
      .def("set_epoch", &Loader::set_epoch)
      .def_property_readonly("epoch", &Loader::epoch)
      .def("set_indices", &Loader::set_indices)
      .def("set_batches", &Loader::set_batches)
      .def("set_base_seed", &Loader::set_base_seed)
      .def("state", &Loader::state)
      .def("load_state", &Loader::load_state)
      .def("stats", &Loader::stats)
      .def("worker_pids", &Loader::worker_pids)
      .def("num_workers", &Loader::num_workers)
      .def("memory_estimate", [](Loader& l) { return to_string(l.memory_estimate()); });
}

}  // namespace stoker::python
