// The order of an epoch's samples without a sampler: 0..n-1, or a permutation that depends
// only on (seed, epoch), the same on every machine and for any num_workers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stoker::detail {

std::vector<std::size_t> epoch_order(std::size_t n, bool shuffle, std::uint64_t seed,
                                     std::uint64_t epoch);

}  // namespace stoker::detail
