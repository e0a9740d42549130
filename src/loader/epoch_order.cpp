#include "loader/epoch_order.hpp"

#include <numeric>

#include "stoker/random.hpp"

namespace stoker::detail {

std::vector<std::size_t> epoch_order(std::size_t n, bool shuffle, std::uint64_t seed,
                                     std::uint64_t epoch) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (shuffle) Generator::from({seed, epoch}).shuffle(order.begin(), order.end());
  return order;
}

}  // namespace stoker::detail
