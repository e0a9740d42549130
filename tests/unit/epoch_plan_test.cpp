// loader/epoch_plan.hpp: the plan of an epoch from the (seed, epoch) order, a sampler or a batch
// sampler; drop_last; what a sampler index past the dataset and an empty batch do; iterable
// plans, mark_delivered() and skip_void_batches(). Pure: no fork, no loader.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

#include <catch2/catch.hpp>

#include "loader/epoch_plan.hpp"
#include "support/error_message.hpp"

using namespace stoker;
using namespace stoker::detail;
using stoker::test::message_of;

namespace {

using Indices = std::vector<std::size_t>;

class FixedSampler final : public Sampler {
 public:
  explicit FixedSampler(Indices indices) : indices_(std::move(indices)) {}
  Indices indices(std::uint64_t) override { return indices_; }

 private:
  Indices indices_;
};

class FixedBatchSampler final : public BatchSamplerBase {
 public:
  explicit FixedBatchSampler(std::vector<Indices> batches) : batches_(std::move(batches)) {}
  std::vector<Indices> batches(std::uint64_t epoch) override {
    last_epoch = epoch;
    return batches_;
  }
  std::uint64_t last_epoch = ~std::uint64_t{0};

 private:
  std::vector<Indices> batches_;
};

Indices as_vector(std::span<const std::size_t> s) { return Indices(s.begin(), s.end()); }

LoaderOptions batches_of(std::size_t batch_size, bool drop_last = false) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.drop_last = drop_last;
  return o;
}

}  // namespace

TEST_CASE("epoch plan: sequential batches, the last one short", "[epoch_plan]") {
  const EpochPlan plan = make_plan(batches_of(4), false, 2, 11, 3, 10);
  CHECK(plan.id == 11);
  CHECK(plan.epoch == 3);
  CHECK(plan.dataset_size == 10);
  CHECK(plan.num_batches == 3);
  CHECK(plan.offsets.empty());
  CHECK(as_vector(plan.batch(0)) == Indices{0, 1, 2, 3});
  CHECK(as_vector(plan.batch(1)) == Indices{4, 5, 6, 7});
  CHECK(as_vector(plan.batch(2)) == Indices{8, 9});
  CHECK(plan.done == std::vector<std::uint8_t>(3, 0));
  CHECK(plan.has_batches());
  CHECK_FALSE(plan.fully_issued());
  CHECK(plan.issued == 0);
  CHECK(plan.delivered == 0);
  CHECK(plan.next_in_order == 0);
}

TEST_CASE("epoch plan: drop_last drops the short batch, and only that", "[epoch_plan]") {
  CHECK(batches_for(10, batches_of(4, true)) == 2);
  CHECK(batches_for(10, batches_of(4, false)) == 3);
  CHECK(batches_for(12, batches_of(4, true)) == 3);
  CHECK(batches_for(3, batches_of(4, true)) == 0);
  CHECK(batches_for(0, batches_of(4, false)) == 0);
  const EpochPlan plan = make_plan(batches_of(4, true), false, 1, 1, 0, 10);
  CHECK(plan.num_batches == 2);
  CHECK(as_vector(plan.batch(1)) == Indices{4, 5, 6, 7});
  CHECK(plan.done.size() == 2);
  const EpochPlan none = make_plan(batches_of(4, true), false, 1, 1, 0, 3);
  CHECK(none.num_batches == 0);
  CHECK_FALSE(none.has_batches());
  CHECK(none.fully_issued());
}

TEST_CASE("epoch plan: shuffle gives a permutation that depends on (seed, epoch) only",
          "[epoch_plan]") {
  LoaderOptions o = batches_of(5);
  o.shuffle = true;
  o.seed = 17;
  const EpochPlan a = make_plan(o, false, 1, 1, 2, 50);
  const EpochPlan again = make_plan(o, false, 4, 99, 2, 50);  // another worker count and id
  const EpochPlan next = make_plan(o, false, 1, 1, 3, 50);
  CHECK(a.order == again.order);
  CHECK(a.order != next.order);
  Indices sorted = a.order;
  std::sort(sorted.begin(), sorted.end());
  Indices all(50);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  CHECK(sorted == all);
  CHECK(a.order != all);
}

TEST_CASE("epoch plan: a sampler's indices, repeats allowed", "[epoch_plan]") {
  LoaderOptions o = batches_of(2);
  o.sampler = std::make_shared<FixedSampler>(Indices{4, 4, 0, 9, 1});
  const EpochPlan plan = make_plan(o, false, 1, 1, 0, 10);
  CHECK(plan.order == Indices{4, 4, 0, 9, 1});
  CHECK(plan.num_batches == 3);  // from the sampler's length, not the dataset's
  CHECK(as_vector(plan.batch(2)) == Indices{1});
}

TEST_CASE("epoch plan: a sampler index past the dataset's end", "[epoch_plan]") {
  LoaderOptions o = batches_of(2);
  o.sampler = std::make_shared<FixedSampler>(Indices{0, 5, 10, 3});
  CHECK(message_of<std::out_of_range>([&] { (void)make_plan(o, false, 1, 1, 7, 10); }) ==
        "DataLoader: the sampler gave index 10 (position 2 of epoch 7), but the dataset has 10 "
        "samples");
  o.sampler.reset();
  o.batch_sampler = std::make_shared<FixedBatchSampler>(std::vector<Indices>{{1, 2}, {3, 12}});
  CHECK(message_of<std::out_of_range>([&] { (void)make_plan(o, false, 1, 1, 0, 12); }) ==
        "DataLoader: the batch sampler gave index 12 (position 3 of epoch 0), but the dataset "
        "has 12 samples");
}

TEST_CASE("epoch plan: a batch sampler's batches, of any sizes", "[epoch_plan]") {
  auto sampler =
      std::make_shared<FixedBatchSampler>(std::vector<Indices>{{5, 1, 2}, {0}, {7, 7, 3, 4, 6}});
  LoaderOptions o;
  o.batch_sampler = sampler;
  const EpochPlan plan = make_plan(o, false, 2, 1, 4, 8);
  CHECK(sampler->last_epoch == 4);
  CHECK(plan.num_batches == 3);
  CHECK(plan.offsets == Indices{0, 3, 4, 9});
  CHECK(plan.order == Indices{5, 1, 2, 0, 7, 7, 3, 4, 6});
  CHECK(as_vector(plan.batch(0)) == Indices{5, 1, 2});
  CHECK(as_vector(plan.batch(1)) == Indices{0});
  CHECK(as_vector(plan.batch(2)) == Indices{7, 7, 3, 4, 6});
  CHECK(plan.done.size() == 3);
}

TEST_CASE("epoch plan: a batch sampler's empty batch is refused", "[epoch_plan]") {
  LoaderOptions o;
  o.batch_sampler = std::make_shared<FixedBatchSampler>(std::vector<Indices>{{1}, {}, {2}});
  CHECK(message_of<std::invalid_argument>([&] { (void)make_plan(o, false, 1, 1, 6, 4); }) ==
        "DataLoader: the batch sampler's batch 1 of epoch 6 is empty; every batch needs at least "
        "one index");
  // No batches at all is an empty epoch, not an error.
  o.batch_sampler = std::make_shared<FixedBatchSampler>(std::vector<Indices>{});
  const EpochPlan plan = make_plan(o, false, 1, 1, 0, 4);
  CHECK(plan.num_batches == 0);
  CHECK(plan.offsets == Indices{0});
}

TEST_CASE("epoch plan: mark_delivered counts and moves the in-order position", "[epoch_plan]") {
  EpochPlan plan = make_plan(batches_of(1), false, 1, 1, 0, 5);
  plan.mark_delivered(0);
  CHECK(plan.delivered == 1);
  CHECK(plan.next_in_order == 1);
  plan.mark_delivered(3);  // out of order
  CHECK(plan.delivered == 2);
  CHECK(plan.next_in_order == 4);
  plan.mark_delivered(2);  // an older one does not move it back
  CHECK(plan.next_in_order == 4);
  CHECK(plan.done == std::vector<std::uint8_t>{1, 0, 1, 1, 0});
  // Past the batches (an iterable plan has none): counted, nothing marked.
  plan.mark_delivered(10);
  CHECK(plan.delivered == 4);
  CHECK(plan.next_in_order == 11);
  CHECK(plan.done.size() == 5);
}

TEST_CASE("epoch plan: an iterable plan has a stream per worker and no indices", "[epoch_plan]") {
  EpochPlan plan = make_plan(batches_of(8), true, 3, 2, 1, 0);
  CHECK(plan.iterable);
  CHECK(plan.exhausted == std::vector<std::uint8_t>(3, 0));
  CHECK(plan.last_issued == std::vector<std::uint64_t>(3, 0));
  CHECK(plan.order.empty());
  CHECK(plan.batch(0).empty());
  CHECK(plan.batch(5).empty());
  CHECK(plan.has_batches());
  CHECK_FALSE(plan.fully_issued());
  plan.exhausted[0] = plan.exhausted[2] = 1;
  CHECK_FALSE(plan.all_exhausted());
  plan.exhausted[1] = 1;
  CHECK(plan.all_exhausted());
  CHECK(plan.fully_issued());
  // In-process (no workers): one stream.
  const EpochPlan single = make_plan(batches_of(8), true, 0, 3, 0, 0);
  CHECK(single.exhausted.size() == 1);
}

TEST_CASE("epoch plan: skip_void_batches steps over batches an ended stream will not give",
          "[epoch_plan]") {
  EpochPlan plan = make_plan(batches_of(4), true, 2, 1, 0, 0);
  // Batches 0..5 issued round robin: worker 0 has 0, 2, 4, worker 1 has 1, 3, 5. Worker 1's
  // stream ended in batch 1 (its last_issued is 2), so batches 3 and 5 are void.
  plan.issued = 6;
  plan.last_issued = {5, 2};
  plan.exhausted = {0, 1};
  plan.next_in_order = 2;
  plan.skip_void_batches();
  CHECK(plan.next_in_order == 2);  // worker 0's batch 2 will come
  plan.next_in_order = 3;
  plan.skip_void_batches();
  CHECK(plan.next_in_order == 4);  // 3 was void
  plan.next_in_order = 5;
  plan.skip_void_batches();
  CHECK(plan.next_in_order == 6);  // 5 was void; stops at `issued`
  plan.next_in_order = 1;
  plan.skip_void_batches();
  CHECK(plan.next_in_order == 1);  // batch 1 was given before the stream ended

  // A map-style plan is never changed.
  EpochPlan map = make_plan(batches_of(1), false, 2, 1, 0, 4);
  map.issued = 2;
  map.next_in_order = 1;
  map.skip_void_batches();
  CHECK(map.next_in_order == 1);
}
