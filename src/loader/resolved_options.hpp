// ResolvedOptions: what the engine runs on, computed once from the user's LoaderOptions, which
// the loader never edits (DataLoader::options() returns them as given): the worker count with
// kAuto resolved, the ring's geometry (the spare channel of max_batches_per_worker included), one
// Pinning mode, the pinned allocator to use, and the small facts every part asks about. The ring,
// the memory estimate and the workers all read it, so they agree. Main process only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "ipc/ring.hpp"
#include "stoker/options.hpp"
#include "stoker/pinned_allocator.hpp"

namespace stoker::detail {

// How delivered batches are made page-locked (LoaderOptions::pin_memory and pin_mode).
enum class Pinning : std::uint8_t {
  kNone,
  kRegister,  // the ring's slots are locked in place as batches first use them
  kCopy,      // each batch is copied into a pinned staging block
};

struct ResolvedOptions {
  std::size_t num_workers = 0;  // kAuto resolved
  bool iterable = false;        // the dataset is a stream (next()), not size() and get(i)
  bool ordered = true;          // deliver in batch order: in_order, or loading in-process
  bool skip_samples = false;    // OnSampleError::kSkip
  bool recycling = false;       // max_batches_per_worker > 0 with workers: a spare channel
  // Prefetch depth (prefetch_depth.hpp): fixed at prefetch_factor, or adaptive between
  // kMinAdaptivePrefetch and kMaxAdaptivePrefetch. The ring has max_depth slots per channel.
  bool adaptive_depth = false;
  std::size_t min_depth = 2;
  std::size_t max_depth = 2;
  RingGeometry geometry;
  // Adaptive depth only: the ring with kAdaptivePrefetchFloor slots a channel, for when the
  // address space of `geometry` cannot be mapped (`ulimit -v`, valgrind); the depth then stops
  // at that floor.
  std::optional<RingGeometry> narrow_geometry;
  Pinning pinning = Pinning::kNone;
  std::shared_ptr<PinnedAllocator> allocator;  // non-null unless pinning is kNone
};

// `num_workers` is the user's count, or what kAuto chose. Throws what PinnedAllocator::global()
// throws when pin_memory asks for the global allocator.
ResolvedOptions resolve_options(const LoaderOptions& options, std::size_t num_workers,
                                bool iterable);

// The parts of the resolution that do not need the worker count, for the checks that run
// before kAuto is resolved or that try other counts (Preflight). resolve_options() is made of
// them, so the two cannot disagree.
struct DepthRange {
  bool adaptive = false;
  std::size_t min = 2;
  std::size_t max = 2;
};
DepthRange depth_range(const LoaderOptions& options) noexcept;
Pinning pinning_mode(const LoaderOptions& options) noexcept;
bool recycles(const LoaderOptions& options, std::size_t num_workers) noexcept;
bool skips_samples(const LoaderOptions& options) noexcept;

}  // namespace stoker::detail
