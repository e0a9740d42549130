// DataLoader<D>: PyTorch's DataLoader for a C++ map-style dataset. Each begin() runs an epoch:
// batches are loaded by `num_workers` fork()ed worker processes straight into shared-memory
// slots and handed to the consumer, in order, as zero-copy Batch views. The template is thin;
// the engine is detail::LoaderCore.
//
// Threads: a DataLoader and its iterators are used by one thread at a time. Calls may come from
// different threads one after another (build the loader on one thread and iterate it on
// another, hand an iterator to another thread between batches, read stats() from a monitoring
// thread between batches): each call sees everything the calls before it did. A call made while
// another thread is inside a call of the same loader or of one of its iterators (begin(), a
// fetch, operator*, stats(), state(), load_state(), memory_estimate(), num_workers(), size(),
// set_epoch(), epoch(), worker_pids()) raises std::logic_error at once, naming the rule and
// both threads; the call in progress is not disturbed. To share a loader, serialise the calls
// (a mutex around each); for parallel streams, give each thread a loader of its own.
// options() and dataset() are outside the rule (the options never change; the dataset is
// yours). Batches, and the tensors and DLPack exports taken from them, may be released on any
// thread at any time. An iterator destroyed while another thread is inside a call leaves its
// epoch to be ended by the loader's next call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoker/batch.hpp"
#include "stoker/collate.hpp"
#include "stoker/dataset.hpp"
#include "stoker/detail/loader_core.hpp"
#include "stoker/options.hpp"
#include "stoker/remote.hpp"

namespace stoker {

// Iterates the batches of one epoch. Move-only. Fetching (operator++, the first comparison with
// end, next()) may throw WorkerException, after which the iterator is still usable and the next
// fetch returns the following batch; WorkerCrashed and LoaderTimeout end the epoch (the
// iterator then compares equal to end). Destroying the iterator ends the epoch; without
// persistent workers, that reaps the workers: at once if they are idle, within about a second
// if they are busy or hung (stop request, then SIGTERM, then SIGKILL), and within 4 s in all
// but the case of a worker stuck in uninterruptible I/O.
class BatchIterator {
 public:
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  using reference = const Batch&;
  using iterator_concept = std::input_iterator_tag;

  BatchIterator() = default;
  BatchIterator(BatchIterator&& other) noexcept;
  BatchIterator& operator=(BatchIterator&& other) noexcept;
  BatchIterator(const BatchIterator&) = delete;
  BatchIterator& operator=(const BatchIterator&) = delete;
  ~BatchIterator();

  // The current batch. Throws std::logic_error past the end.
  const Batch& operator*() const;
  const Batch* operator->() const { return &**this; }
  // Releases the current batch (its slot returns to the workers unless the caller kept a copy)
  // and fetches the next one.
  BatchIterator& operator++();
  void operator++(int) { ++*this; }
  friend bool operator==(const BatchIterator& it, std::default_sentinel_t) { return it.at_end(); }

  // The next batch, or nullopt at the end of the epoch: the loop without the iterator protocol.
  std::optional<Batch> next();

 private:
  friend class detail::LoaderCore;
  BatchIterator(detail::LoaderCore* core, std::uint64_t generation) noexcept
      : core_(core), generation_(generation) {}
  bool at_end() const;
  void fetch() const;

  detail::LoaderCore* core_ = nullptr;
  std::uint64_t generation_ = 0;
  mutable std::optional<Batch> current_;
  mutable bool fetched_ = false;  // current_ holds the batch at this position (or the end)
  mutable bool pending_ = true;   // nothing fetched yet: the position is batch 0
};

template <class D>
class DataLoader {
  // One diagnostic, not a cascade: a type with size() or get() is told what a map-style
  // dataset needs; anything else, what either kind needs.
  static_assert(MapDataset<D> || IterableDataset<D> || !detail::HasMapMembers<D>,
                "stoker::DataLoader<D>: D looks like a map-style dataset but is not one: it "
                "needs `std::size_t size() const` (callable on a const D) and "
                "`get(std::size_t index)` returning something convertible to stoker::Sample");
  static_assert(MapDataset<D> || IterableDataset<D> || detail::HasMapMembers<D>,
                "stoker::DataLoader<D>: D must be a map-style dataset, with "
                "`std::size_t size() const` and `stoker::Sample get(std::size_t index)`, or an "
                "iterable one, with `std::optional<stoker::Sample> next()`");

 public:
  using iterator = BatchIterator;

  // Main process. Takes the dataset by value (each worker gets a fork()ed copy of it). Throws
  // std::invalid_argument for bad options. Forks nothing until the first begin().
  explicit DataLoader(D dataset, LoaderOptions options = {})
      : dataset_(std::make_unique<D>(std::move(dataset))) {
    D* ds = dataset_.get();
    detail::ProduceFn produce;
    std::function<std::size_t()> size;
    detail::DatasetProbe probe;
    if constexpr (CacheReporting<D>) {
      probe.cache_bytes = static_cast<std::size_t>(ds->cache_stats().budget_bytes);
    }
    if constexpr (RemoteReporting<D>) probe.download_bytes = ds->remote_download_buffer_bytes();
    if constexpr (MapDataset<D>) {
      // Up to 4 samples spread over the dataset (a cache's source, not the cache), or those
      // the dataset's memory_probe_indices() names: the largest sets the estimate. Run in a
      // short-lived child process by the loader.
      probe.sample_bytes = [ds](const std::function<void(std::size_t)>& report) {
        auto& source = [ds]() -> auto& {
          if constexpr (CachingDataset<D>) {
            return ds->source();
          } else {
            return *ds;
          }
        }
        ();
        const auto n = static_cast<std::size_t>(source.size());
        std::vector<std::size_t> picks = {0, n / 3, 2 * n / 3, n - 1};
        // A dataset may know which of its samples need the most memory to load.
        if constexpr (requires { source.memory_probe_indices(); }) {
          if (std::vector<std::size_t> own = source.memory_probe_indices(); !own.empty()) {
            picks = std::move(own);
          }
        }
        for (const std::size_t i : picks) {
          if (i >= n) continue;
          detail::begin_probe_sample(i);  // sample_rng() works in get() here too
          report(Sample(source.get(i)).nbytes());
        }
      };
      produce = [ds, collate = options.collate](detail::BatchSink& out) {
        produce_batch(*ds, collate, out);
      };
      size = [ds] { return static_cast<std::size_t>(ds->size()); };
      probe.dataset_size = size;
    } else if constexpr (IterableDataset<D>) {
      produce = [ds, collate = options.collate, batch_size = options.batch_size,
                 drop_last = options.drop_last,
                 stream = StreamState{}](detail::BatchSink& out) mutable {
        produce_stream(*ds, collate, batch_size, drop_last, stream, out);
      };
    }
    core_ = std::make_unique<detail::LoaderCore>(std::move(options), std::move(size),
                                                 std::move(produce), std::move(probe));
  }

  // Starts an epoch: batches of epoch epoch() (then the epoch advances by one unless
  // set_epoch() is called). Main process. The first begin() runs the memory check; when the
  // bytes per sample are not known yet it blocks until the first batch has measured them.
  // Throws MemoryBudgetError or PinnedMemoryError (the check; the epoch is not used up), and
  // what forking and setting up shared memory can throw.
  BatchIterator begin() {
    if constexpr (RemoteReporting<D>) remote_at_begin_ = dataset_->remote_stats();
    return core_->begin();
  }
  std::default_sentinel_t end() const noexcept { return std::default_sentinel; }

  // Batches per epoch. Map-style datasets only: an iterable dataset has no length.
  std::size_t size() const {
    static_assert(MapDataset<D>,
                  "DataLoader::size(): an iterable dataset has no length (its workers stop "
                  "when their streams end); count the batches as they arrive");
    return core_->num_batches();
  }
  // The epoch the next begin() runs; its shuffle order depends only on (seed, epoch).
  void set_epoch(std::uint64_t epoch) { core_->set_epoch(epoch); }
  std::uint64_t epoch() const { return core_->epoch(); }
  // The options as given: the loader never edits them (num_workers stays kAuto).
  const LoaderOptions& options() const noexcept { return core_->options(); }
  // The worker processes this loader runs: options().num_workers, or what kAuto chose (main
  // process; the first call with kAuto measures samples in a probe process and probes the
  // machine, as the first begin() would).
  std::size_t num_workers() { return core_->num_workers(); }
  D& dataset() noexcept { return *dataset_; }
  const D& dataset() const noexcept { return *dataset_; }
  // Resume. state() is where the loader stands, as a few hundred bytes of text: the epoch, the
  // seed, and which of the epoch's batches have been handed out (in order: how many), the one
  // the program is processing included, so saving inside the loop body resumes after it. Save it
  // with a checkpoint; load_state() on a loader built with the same dataset and options (any
  // num_workers) makes its next begin() go on with exactly the batches that would have come
  // next, sample_rng() augmentation included (both depend only on seed, epoch and index).
  // Main process. state() throws std::logic_error for an iterable dataset; load_state()
  // throws std::invalid_argument for a malformed state or one saved with another seed, and
  // the next begin() does when the epoch's batches differ (another batch_size, dataset...).
  std::string state() const { return core_->state(); }
  void load_state(std::string_view state) { core_->load_state(state); }
  // Live worker processes, in worker-id order (empty between epochs without persistent workers).
  std::vector<pid_t> worker_pids() const { return core_->worker_pids(); }
  // Main process; never blocks. Counters of the current epoch (or the last one, between
  // epochs): batches, samples, bytes, time waited, skipped samples, respawns.
  // The loader's memory estimate (memory.hpp), as the pre-flight check computes it: measures
  // the bytes per sample on the first call unless LoaderOptions::sample_bytes gives them.
  MemoryEstimate memory_estimate() { return core_->memory_estimate(); }
  LoaderStats stats() const {
    LoaderStats s = core_->stats();
    if constexpr (CacheReporting<D>) {
      const auto cache = dataset_->cache_stats();
      s.cache_hits = cache.hits;
      s.cache_misses = cache.misses;
      s.cache_bytes = cache.bytes_used;
    }
    if constexpr (RemoteReporting<D>) {
      const RemoteStats now = dataset_->remote_stats();
      s.remote_bytes_fetched = now.bytes_fetched - remote_at_begin_.bytes_fetched;
      s.remote_requests = now.requests - remote_at_begin_.requests;
      s.remote_retries = now.retries - remote_at_begin_.retries;
      s.remote_cache_hits = now.cache_hits - remote_at_begin_.cache_hits;
      s.remote_cache_misses = now.cache_misses - remote_at_begin_.cache_misses;
      s.remote_wait_seconds = now.wait_seconds - remote_at_begin_.wait_seconds;
      s.remote_download_seconds = now.download_seconds - remote_at_begin_.download_seconds;
      s.remote = true;
    }
    return s;
  }

 private:
  // Fetch -> collate -> write into the slot: the same code in a worker and in-process.
  static void produce_batch(D& ds, const CollateFn& collate, detail::BatchSink& out) {
    const std::span<const std::size_t> indices = out.indices();
    if (!collate && !out.skips_samples()) {
      // The common case streams: one sample at a time, stacked straight into the slot.
      StackCollator stack(out);
      if (!out.time_stages()) {
        bool first = true;
        for (const std::size_t index : indices) {
          if (!out.begin_sample(index)) break;
          if (!first) {
            stack.add(ds.get(index));
            continue;
          }
          const Sample sample(ds.get(index));
          out.first_sample_loaded(sample);
          stack.add(sample);
          first = false;
        }
        return;
      }
      // Two clock reads per sample: the stack of one sample runs until the next get() starts.
      std::uint64_t get_ns = 0;
      std::uint64_t collate_ns = 0;
      std::uint64_t got = 0;  // when the previous sample's get() returned
      for (const std::size_t index : indices) {
        if (!out.begin_sample(index)) break;
        const std::uint64_t start = detail::now_ns();
        if (got != 0) collate_ns += start - got;
        const Sample sample(ds.get(index));
        const bool first = got == 0;
        got = detail::now_ns();
        get_ns += got - start;
        if (first) out.first_sample_loaded(sample);
        stack.add(sample);
      }
      if (got != 0) collate_ns += detail::now_ns() - got;
      out.add_stage_times(get_ns, collate_ns);
      return;
    }
    const std::uint64_t get_start = detail::now_ns();
    std::vector<Sample> samples;
    samples.reserve(indices.size());
    for (const std::size_t index : indices) {
      if (!out.begin_sample(index)) break;
      if (!out.skips_samples()) {
        samples.emplace_back(ds.get(index));
      } else {
        try {
          samples.emplace_back(ds.get(index));
        } catch (...) {
          out.skip_sample();
          continue;
        }
      }
      if (samples.size() == 1) out.first_sample_loaded(samples.front());
    }
    collate_held(samples, collate, get_start, out);  // empty: every sample was skipped
  }

  // The samples a batch holds, collated into the slot (none: the batch is not delivered), with
  // the time inside get() since `get_start` and inside the collate.
  static void collate_held(const std::vector<Sample>& samples, const CollateFn& collate,
                           std::uint64_t get_start, detail::BatchSink& out) {
    out.begin_collate(samples.size());
    if (samples.empty()) return;
    const std::uint64_t collate_start = detail::now_ns();
    if (collate) {
      collate(std::span<const Sample>(samples), out);
    } else {
      collate_stack(samples, out);
    }
    out.add_stage_times(collate_start - get_start, detail::now_ns() - collate_start);
  }

  // Where this process's copy of an iterable dataset stands: in which run of an epoch, and at
  // which position of its stream. Kept per loader (in its produce function) and per process.
  struct StreamState {
    std::uint64_t run = ~std::uint64_t{0};
    std::uint64_t position = 0;
  };

  // An iterable dataset's batch: up to batch_size samples from this process's stream.
  static void produce_stream(D& ds, const CollateFn& collate, std::size_t batch_size,
                             bool drop_last, StreamState& stream, detail::BatchSink& out) {
    if (stream.run != out.epoch_run()) {  // a new begin(): the stream starts over
      stream.run = out.epoch_run();
      stream.position = 0;
      if constexpr (RestartableDataset<D>) ds.start_epoch(out.epoch());
    }
    const std::uint64_t get_start = detail::now_ns();
    std::vector<Sample> samples;
    samples.reserve(batch_size);
    std::size_t skipped = 0;
    while (samples.size() < batch_size) {
      out.begin_stream_sample(stream.position++);
      std::optional<Sample> sample;
      if (!out.skips_samples() || skipped >= batch_size) {
        sample = ds.next();  // past batch_size failures in one batch, the error is raised
      } else {
        try {
          sample = ds.next();
        } catch (...) {
          out.skip_sample();
          ++skipped;
          continue;
        }
      }
      if (!sample) {
        out.mark_exhausted();
        break;
      }
      samples.push_back(std::move(*sample));
    }
    if (drop_last && samples.size() < batch_size) samples.clear();
    collate_held(samples, collate, get_start, out);  // empty: nothing to deliver
  }

  std::unique_ptr<D> dataset_;
  RemoteStats remote_at_begin_;  // remote shards: the dataset's counters when the epoch began
  std::unique_ptr<detail::LoaderCore> core_;
};

template <class D>
DataLoader(D, LoaderOptions) -> DataLoader<D>;

}  // namespace stoker
