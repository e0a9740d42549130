// Alternative spellings of the public API: PyTorch's positional argument order for the
// samplers, and C++ integer types beyond the fixed-width ones for tensors.
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include "stoker/stoker.hpp"

using namespace stoker;

TEST_CASE("RandomSampler takes PyTorch's positional order", "[sampler]") {
  RandomSampler positional(20, true, 7, 42);
  RandomSampler with_options(20, {true, 7, 42});
  REQUIRE(positional.num_samples() == 7);
  REQUIRE(positional.indices(3) == with_options.indices(3));
  RandomSampler no_replacement(20, false);
  REQUIRE(no_replacement.indices(0) == RandomSampler(20).indices(0));
  RandomSampler seeded(20, false, std::nullopt, 9);
  REQUIRE(seeded.num_samples() == 20);
  REQUIRE(seeded.indices(0) == RandomSampler(20, {false, std::nullopt, 9}).indices(0));
  REQUIRE(seeded.indices(0) != RandomSampler(20, {false, std::nullopt, 10}).indices(0));
}

TEST_CASE("DistributedSampler takes PyTorch's positional order", "[sampler]") {
  DistributedSampler positional(10, 3, 1, true, 7, true);
  DistributedSampler with_options(10, 3, 1, {true, 7, true});
  REQUIRE(positional.num_samples() == 3);  // drop_last: 10 -> 9 over 3 ranks
  REQUIRE(positional.indices(2) == with_options.indices(2));
  DistributedSampler unshuffled(10, 3, 1, false);
  REQUIRE(unshuffled.indices(0) == std::vector<std::size_t>{1, 4, 7, 0});  // padded from the start
  // An empty brace list still means the default options (shuffle on), not shuffle = false.
  DistributedSampler defaults(10, 3, 1, {});
  REQUIRE(defaults.indices(0) == DistributedSampler(10, 3, 1).indices(0));
  REQUIRE(defaults.indices(0) != unshuffled.indices(0));
}

TEST_CASE("long long and unsigned long long tensors get the dtype of their size", "[tensor]") {
  REQUIRE(Tensor::scalar(3LL).dtype() == DType::kInt64);
  REQUIRE(Tensor::scalar(3LL).data<long long>()[0] == 3);
  REQUIRE(Tensor::scalar(3ULL).dtype() == DType::kUInt64);
  static_assert(!HasDType<char> && !HasDType<char32_t>);  // character types have none
  const std::vector<long long> values{1, -2, 3};
  const Tensor t = Tensor::from(values);
  REQUIRE(t.dtype() == DType::kInt64);
  // The same bytes read through the fixed-width type.
  REQUIRE(t.data<std::int64_t>()[1] == -2);
  REQUIRE(kDTypeOf<const unsigned long long> == DType::kUInt64);
}
