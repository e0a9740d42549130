// The loader's side of sample_rng(): which sample is being loaded in this process.
#pragma once

#include <cstdint>

namespace stoker::detail {

// Called by the loading process before each sample's get() and after its batch.
void begin_sample_rng(std::uint64_t seed, std::uint64_t epoch, std::uint64_t index) noexcept;
void end_sample_rng() noexcept;
// Inside a sample's loading: seeds sample_rng() as for dataset index `index` instead (same seed
// and epoch). A stream whose records have dataset indexes (ShardedStream) keys augmentation by
// them, so it does not depend on the worker. No effect outside a sample.
void rekey_sample_rng(std::uint64_t index) noexcept;

}  // namespace stoker::detail
