#include "loader/resolved_options.hpp"

namespace stoker::detail {

DepthRange depth_range(const LoaderOptions& options) noexcept {
  if (options.prefetch_factor == kAdaptivePrefetch) {
    return {true, kMinAdaptivePrefetch, kMaxAdaptivePrefetch};
  }
  return {false, options.prefetch_factor, options.prefetch_factor};
}

Pinning pinning_mode(const LoaderOptions& options) noexcept {
  if (!options.pin_memory) return Pinning::kNone;
  return options.pin_mode == PinMode::kCopy ? Pinning::kCopy : Pinning::kRegister;
}

bool recycles(const LoaderOptions& options, std::size_t num_workers) noexcept {
  return num_workers > 0 && options.max_batches_per_worker > 0;
}

bool skips_samples(const LoaderOptions& options) noexcept {
  return options.on_sample_error == OnSampleError::kSkip;
}

ResolvedOptions resolve_options(const LoaderOptions& options, std::size_t num_workers,
                                bool iterable) {
  ResolvedOptions r;
  r.num_workers = num_workers;
  r.iterable = iterable;
  r.ordered = options.in_order || num_workers == 0;
  r.skip_samples = skips_samples(options);
  r.recycling = recycles(options, num_workers);
  const DepthRange depth = depth_range(options);
  r.adaptive_depth = depth.adaptive;
  r.min_depth = depth.min;
  r.max_depth = depth.max;
  r.geometry = ring_geometry(num_workers, r.max_depth, r.recycling, options.max_batch_bytes);
  if (r.adaptive_depth && r.max_depth > kAdaptivePrefetchFloor) {
    r.narrow_geometry =
        ring_geometry(num_workers, kAdaptivePrefetchFloor, r.recycling, options.max_batch_bytes);
  }
  r.pinning = pinning_mode(options);
  if (r.pinning != Pinning::kNone) {
    r.allocator = options.pinned_allocator ? options.pinned_allocator : PinnedAllocator::global();
  }
  return r;
}

}  // namespace stoker::detail
