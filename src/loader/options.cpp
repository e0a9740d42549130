#include "stoker/options.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "ipc/ring.hpp"

namespace stoker {
namespace {

template <class T>
void check_range(const char* name, T value, T low, T high, const char* note = "") {
  if (value < low || value > high) {
    throw std::invalid_argument(fmt::format(
        "LoaderOptions::{} is {}; it must be between {} and {}{}", name, value, low, high, note));
  }
}

}  // namespace

void validate(const LoaderOptions& o) {
  check_range("batch_size", o.batch_size, std::size_t{1}, kMaxBatchSize);
  if (o.num_workers != kAuto) {
    check_range("num_workers", o.num_workers, 0, kMaxWorkers,
                " (0 loads in the calling process; kAuto = -1 lets stoker choose)");
  }
  if (!(o.memory_fraction > 0.0 && o.memory_fraction <= 1.0)) {
    throw std::invalid_argument(fmt::format(
        "LoaderOptions::memory_fraction is {}; it must be in (0, 1]", o.memory_fraction));
  }
  check_range("prefetch_factor", o.prefetch_factor, std::size_t{0}, kMaxPrefetchFactor,
              " (batches in flight per worker; 0 is kAdaptivePrefetch, which adapts)");
  if (o.timeout.count() < 0) {
    throw std::invalid_argument(fmt::format(
        "LoaderOptions::timeout is {} ms; it must be >= 0 (0 waits forever)", o.timeout.count()));
  }
  if (o.held_timeout.count() < 0) {
    throw std::invalid_argument(
        fmt::format("LoaderOptions::held_timeout is {} ms; it must be >= 0 (0: as long as timeout)",
                    o.held_timeout.count()));
  }
  check_range("max_batch_bytes", o.max_batch_bytes, kMinBatchBytes, kMaxBatchBytes);
  const std::size_t layout = detail::Ring::payload_start(o.batch_size);
  if (layout >= o.max_batch_bytes) {
    throw std::invalid_argument(fmt::format(
        "LoaderOptions::max_batch_bytes is {}, but a slot's header and the indices of {} samples "
        "(batch_size) already take {}; raise max_batch_bytes",
        o.max_batch_bytes, o.batch_size, layout));
  }
  if (o.batch_sampler) {
    const char* conflict = o.batch_size != 1 ? "batch_size"
                           : o.shuffle       ? "shuffle"
                           : o.sampler       ? "sampler"
                           : o.drop_last     ? "drop_last"
                                             : nullptr;
    if (conflict != nullptr) {
      throw std::invalid_argument(fmt::format(
          "LoaderOptions::batch_sampler decides the batches, so it cannot be combined with {}: "
          "leave batch_size = 1, shuffle = false, drop_last = false and sampler empty",
          conflict));
    }
  }
  if (o.sampler && o.shuffle) {
    throw std::invalid_argument(
        "LoaderOptions::sampler decides the order, so it cannot be combined with shuffle: set "
        "shuffle = false (or give a RandomSampler)");
  }
  if (o.max_batches_per_worker > 0 && o.num_workers == 0) {
    throw std::invalid_argument(
        "LoaderOptions::max_batches_per_worker needs num_workers > 0 (there is no worker to "
        "recycle)");
  }
  if (o.pin_mode != PinMode::kRegister && o.pin_mode != PinMode::kCopy) {
    throw std::invalid_argument(
        fmt::format("LoaderOptions::pin_mode is {}; it must be PinMode::kRegister or kCopy",
                    static_cast<int>(o.pin_mode)));
  }
  if (o.log_interval.count() < 0) {
    throw std::invalid_argument(fmt::format(
        "LoaderOptions::log_interval is {} ms; it must be >= 0 (0 turns the health line off)",
        o.log_interval.count()));
  }
  if (o.persistent_workers && o.num_workers == 0) {
    throw std::invalid_argument(
        "LoaderOptions::persistent_workers needs num_workers > 0 (there is no worker to keep)");
  }
}

}  // namespace stoker
