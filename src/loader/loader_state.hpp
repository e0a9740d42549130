// LoaderState: DataLoader::state() as text and back. A state names an epoch, the loader's seed,
// the epoch's size in samples and batches, the in-order prefix of batches already handed out
// (`position`), the batches beyond it that were (out of order), and the samples skipped so far;
// when the sampler gives an OrderInfo key (include/stoker/sampler.hpp), that key and the
// rank's place (`world`, `rank`). Pure: formatting, parsing with every rejection named,
// checking a state against this loader's order, and applying it to a fresh plan.
//
//   stoker-loader-state 1
//   epoch 3
//   seed 42
//   samples 1000
//   batches 32
//   position 7
//   done 9 12
//   skipped 0
//   order shard-shuffle/1 seed=42 shuffle=1 partitions=4 ...   (only with a keyed sampler)
//   world 4
//   rank 1
//
// Lines may come in any order; unknown lines are ignored (a newer version's additions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loader/epoch_plan.hpp"

namespace stoker::detail {

struct LoaderState {
  std::uint64_t epoch = 0;
  std::uint64_t seed = 0;
  std::size_t dataset_size = 0;
  std::size_t num_batches = 0;
  std::size_t position = 0;             // batches 0..position-1 are done
  std::vector<std::size_t> extra_done;  // and these, beyond the prefix (out of order)
  std::size_t skipped = 0;
  // The sampler's OrderInfo: `order` empty when it has no key (or the state predates keys).
  std::string order;
  std::size_t world_size = 1;
  std::size_t rank = 0;
};

std::string format_state(const LoaderState& state);

// Throws std::invalid_argument naming what is wrong: not a state (magic or version), a line
// that cannot be read, a missing line, a position past the batches, a 'done' batch out of
// place, a rank not below the world size.
LoaderState parse_loader_state(std::string_view text);

// The OrderInfo of the options' batch sampler, or else of their sampler (none: an empty key).
OrderInfo order_info_of(const LoaderOptions& options);

// Where `plan` stands, with `skipped` samples skipped in it so far, under the order `order`.
LoaderState capture_state(const EpochPlan& plan, std::uint64_t seed, std::size_t skipped,
                          const OrderInfo& order = {});

// Refuses (std::invalid_argument) a state that this loader's order cannot continue: one saved
// under another order key (a state without an 'order' line is not checked), or one listing
// out-of-order batches that was saved on another rank or world size.
void check_order(const LoaderState& state, const OrderInfo& here);

// Marks the saved epoch's delivered batches done in a new plan of the same epoch. Throws
// std::invalid_argument when the plan's samples or batches differ from the state's (another
// dataset, batch_size, drop_last or sampler). The caller checks the epoch first.
void apply_state(const LoaderState& state, EpochPlan& plan);

}  // namespace stoker::detail
