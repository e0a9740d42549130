#include "loader/resolved_options.hpp"

namespace stoker::detail {

ResolvedOptions resolve_options(const LoaderOptions& options, std::size_t num_workers,
                                bool iterable) {
  ResolvedOptions r;
  r.num_workers = num_workers;
  r.iterable = iterable;
  r.ordered = options.in_order || num_workers == 0;
  r.skip_samples = options.on_sample_error == OnSampleError::kSkip;
  r.recycling = num_workers > 0 && options.max_batches_per_worker > 0;
  r.adaptive_depth = options.prefetch_factor == kAdaptivePrefetch;
  r.min_depth = r.adaptive_depth ? kMinAdaptivePrefetch : options.prefetch_factor;
  r.max_depth = r.adaptive_depth ? kMaxAdaptivePrefetch : options.prefetch_factor;
  r.geometry = ring_geometry(num_workers, r.max_depth, r.recycling, options.max_batch_bytes);
  if (r.adaptive_depth && r.max_depth > kAdaptivePrefetchFloor) {
    r.narrow_geometry =
        ring_geometry(num_workers, kAdaptivePrefetchFloor, r.recycling, options.max_batch_bytes);
  }
  if (options.pin_memory) {
    r.pinning = options.pin_mode == PinMode::kCopy ? Pinning::kCopy : Pinning::kRegister;
    r.allocator = options.pinned_allocator ? options.pinned_allocator : PinnedAllocator::global();
  }
  return r;
}

}  // namespace stoker::detail
