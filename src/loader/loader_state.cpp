#include "loader/loader_state.hpp"

#include <map>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace stoker::detail {

std::string format_state(const LoaderState& s) {
  std::string extra;
  for (const std::size_t k : s.extra_done) extra += fmt::format(" {}", k);
  std::string order;
  if (!s.order.empty()) {
    order = fmt::format("order {}\nworld {}\nrank {}\n", s.order, s.world_size, s.rank);
  }
  return fmt::format(
      "stoker-loader-state 1\nepoch {}\nseed {}\nsamples {}\nbatches {}\nposition {}\n"
      "done{}\nskipped {}\n{}",
      s.epoch, s.seed, s.dataset_size, s.num_batches, s.position, extra, s.skipped, order);
}

LoaderState parse_loader_state(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string magic;
  int version = 0;
  in >> magic >> version;
  if (magic != "stoker-loader-state" || version != 1) {
    throw std::invalid_argument(
        "DataLoader::load_state: this is not a state saved by DataLoader::state() (version 1)");
  }
  LoaderState r;
  std::map<std::string, bool> seen;
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    fields >> key;
    seen[key] = true;
    if (key == "epoch") {
      fields >> r.epoch;
    } else if (key == "seed") {
      fields >> r.seed;
    } else if (key == "samples") {
      fields >> r.dataset_size;
    } else if (key == "batches") {
      fields >> r.num_batches;
    } else if (key == "position") {
      fields >> r.position;
    } else if (key == "skipped") {
      fields >> r.skipped;
    } else if (key == "world") {
      fields >> r.world_size;
    } else if (key == "rank") {
      fields >> r.rank;
    } else if (key == "order") {
      // The rest of the line, as the sampler wrote it (a key has no line break).
      fields >> std::ws;
      std::getline(fields, r.order);
      while (!r.order.empty() &&
             (r.order.back() == ' ' || r.order.back() == '\t' || r.order.back() == '\r')) {
        r.order.pop_back();
      }
      if (r.order.empty()) fields.setstate(std::ios::failbit);
    } else if (key == "done") {
      for (std::size_t k; fields >> k;) r.extra_done.push_back(k);
      if (!fields.eof())
        fields.setstate(std::ios::failbit);  // something that is not a number
      else
        fields.clear();
    }
    if (fields.fail()) {
      throw std::invalid_argument(
          fmt::format("DataLoader::load_state: cannot read the line '{}'", line));
    }
  }
  for (const char* key : {"epoch", "seed", "samples", "batches", "position"}) {
    if (!seen[key]) {
      throw std::invalid_argument(
          fmt::format("DataLoader::load_state: the state has no '{}' line", key));
    }
  }
  if (r.world_size == 0 || r.rank >= r.world_size) {
    throw std::invalid_argument(fmt::format(
        "DataLoader::load_state: rank {} is not below the world size {}", r.rank, r.world_size));
  }
  if (r.position > r.num_batches) {
    throw std::invalid_argument(
        fmt::format("DataLoader::load_state: position {} is past the epoch's {} batches",
                    r.position, r.num_batches));
  }
  for (const std::size_t k : r.extra_done) {
    if (k < r.position || k >= r.num_batches) {
      throw std::invalid_argument(
          fmt::format("DataLoader::load_state: batch {} in 'done' is out of place", k));
    }
  }
  return r;
}

OrderInfo order_info_of(const LoaderOptions& options) {
  if (options.batch_sampler) return options.batch_sampler->order_info();
  if (options.sampler) return options.sampler->order_info();
  return {};
}

LoaderState capture_state(const EpochPlan& plan, std::uint64_t seed, std::size_t skipped,
                          const OrderInfo& order) {
  LoaderState s;
  if (!order.key.empty()) {
    s.order = order.key;
    s.world_size = order.world_size;
    s.rank = order.rank;
  }
  s.epoch = plan.epoch;
  s.seed = seed;
  s.dataset_size = plan.dataset_size;
  s.num_batches = plan.num_batches;
  while (s.position < plan.num_batches && plan.done[s.position] != 0) ++s.position;
  for (std::size_t k = s.position; k < plan.num_batches; ++k) {
    if (plan.done[k] != 0) s.extra_done.push_back(k);
  }
  s.skipped = skipped;
  return s;
}

void check_order(const LoaderState& r, const OrderInfo& here) {
  if (!r.order.empty() && r.order != here.key) {
    throw std::invalid_argument(fmt::format(
        "DataLoader::load_state: the state was saved under the order '{}', but this loader's "
        "sampler gives '{}'; resume with the sampler built as it was (the same shards, seed "
        "and options; with ShardShuffle only the world size may change)",
        r.order, here.key.empty() ? "(none)" : here.key));
  }
  if (r.order.empty()) return;  // saved without a key: nothing to check against
  const std::size_t here_world = here.world_size;
  const std::size_t here_rank = here.rank;
  if (!r.extra_done.empty() && (r.world_size != here_world || r.rank != here_rank)) {
    throw std::invalid_argument(fmt::format(
        "DataLoader::load_state: the state has {} batch{} handed out of order (in_order = "
        "false) by rank {} of {}, which other ranks may not have had; this is rank {} of {}: "
        "resume each rank from its own state on the same world size, or save states with "
        "in_order = true",
        r.extra_done.size(), r.extra_done.size() == 1 ? "" : "es", r.rank, r.world_size, here_rank,
        here_world));
  }
}

void apply_state(const LoaderState& r, EpochPlan& plan) {
  if (plan.dataset_size != r.dataset_size || plan.num_batches != r.num_batches) {
    throw std::invalid_argument(fmt::format(
        "DataLoader::load_state: the state was saved for {} samples in {} batches, but epoch "
        "{} here has {} samples in {} batches; resume with the same dataset, batch_size, "
        "drop_last and sampler",
        r.dataset_size, r.num_batches, r.epoch, plan.dataset_size, plan.num_batches));
  }
  std::size_t marked = 0;
  for (std::size_t k = 0; k < r.position; ++k) plan.done[k] = 1;
  marked = r.position;
  for (const std::size_t k : r.extra_done) {
    marked += plan.done[k] == 0 ? 1U : 0U;  // a batch listed twice counts once
    plan.done[k] = 1;
  }
  plan.delivered = marked;
  plan.next_in_order = r.position;
  plan.issued = r.position;
}

}  // namespace stoker::detail
