// The dataset concepts. A map-style dataset is any type with `size()` and `get(index)`; the
// DataLoader copies it into each worker process (fork), where get() runs.
#pragma once

#include <concepts>
#include <cstddef>

#include "stoker/sample.hpp"

namespace stoker {

template <class D>
concept MapDataset = requires(D& dataset, const D& const_dataset, std::size_t index) {
  { const_dataset.size() } -> std::convertible_to<std::size_t>;
  { dataset.get(index) } -> std::convertible_to<Sample>;
};

}  // namespace stoker
