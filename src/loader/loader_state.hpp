// LoaderState: DataLoader::state() as text and back. A state names an epoch, the loader's seed,
// the epoch's size in samples and batches, the in-order prefix of batches already handed out
// (`position`), the batches beyond it that were (out of order), and the samples skipped so far.
// Pure: formatting, parsing with every rejection named, and applying a state to a fresh plan.
//
//   stoker-loader-state 1
//   epoch 3
//   seed 42
//   samples 1000
//   batches 32
//   position 7
//   done 9 12
//   skipped 0
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
};

std::string format_state(const LoaderState& state);

// Throws std::invalid_argument naming what is wrong: not a state (magic or version), a line
// that cannot be read, a missing line, a position past the batches, a 'done' batch out of place.
LoaderState parse_state(std::string_view text);

// Where `plan` stands, with `skipped` samples skipped in it so far.
LoaderState capture_state(const EpochPlan& plan, std::uint64_t seed, std::size_t skipped);

// Marks the saved epoch's delivered batches done in a new plan of the same epoch. Throws
// std::invalid_argument when the plan's samples or batches differ from the state's (another
// dataset, batch_size, drop_last or sampler). The caller checks the epoch first.
void apply_state(const LoaderState& state, EpochPlan& plan);

}  // namespace stoker::detail
