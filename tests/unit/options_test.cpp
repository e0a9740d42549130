// Unit tests for include/stoker/options.hpp: validate() accepts the defaults and every bound,
// and rejects each bad option with std::invalid_argument naming it, its value and its range.
#include "stoker/options.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace stoker {
namespace {

using Catch::Contains;

TEST_CASE("validate: the defaults are valid", "[options]") {
  const LoaderOptions o;
  REQUIRE(o.batch_size == 1);
  REQUIRE(o.num_workers == 0);
  REQUIRE(o.prefetch_factor == kAdaptivePrefetch);
  REQUIRE_FALSE(o.persistent_workers);
  REQUIRE(o.timeout.count() == 0);
  REQUIRE(o.max_batch_bytes == std::size_t{1} << 30);
  REQUIRE_NOTHROW(validate(o));
}

TEST_CASE("validate: every bound of every range is valid", "[options]") {
  LoaderOptions o;
  SECTION("batch_size") {
    o.batch_size = 1;
    REQUIRE_NOTHROW(validate(o));
    o.batch_size = kMaxBatchSize;
    REQUIRE_NOTHROW(validate(o));
  }
  SECTION("num_workers") {
    o.num_workers = kMaxWorkers;
    REQUIRE_NOTHROW(validate(o));
  }
  SECTION("prefetch_factor") {
    o.prefetch_factor = 1;
    REQUIRE_NOTHROW(validate(o));
    o.prefetch_factor = kMaxPrefetchFactor;
    REQUIRE_NOTHROW(validate(o));
  }
  SECTION("timeout") {
    o.timeout = std::chrono::milliseconds(1);
    REQUIRE_NOTHROW(validate(o));
  }
  SECTION("max_batch_bytes") {
    o.max_batch_bytes = kMinBatchBytes;
    REQUIRE_NOTHROW(validate(o));
    o.max_batch_bytes = kMaxBatchBytes;
    REQUIRE_NOTHROW(validate(o));
  }
  SECTION("persistent_workers with workers") {
    o.persistent_workers = true;
    o.num_workers = 1;
    REQUIRE_NOTHROW(validate(o));
  }
}

TEST_CASE("validate: batch_size 0 and above kMaxBatchSize", "[options]") {
  LoaderOptions o;
  o.batch_size = 0;
  REQUIRE_THROWS_AS(validate(o), std::invalid_argument);
  REQUIRE_THROWS_WITH(validate(o), Contains("LoaderOptions::batch_size is 0") &&
                                       Contains("between 1 and 16777216"));
  o.batch_size = kMaxBatchSize + 1;
  REQUIRE_THROWS_WITH(validate(o),
                      Contains("batch_size is 16777217") && Contains("between 1 and 16777216"));
}

TEST_CASE("validate: num_workers below 0 and above kMaxWorkers", "[options]") {
  LoaderOptions o;
  o.num_workers = kAuto;  // -1 is the one negative value with a meaning
  REQUIRE_NOTHROW(validate(o));
  o.num_workers = -2;
  REQUIRE_THROWS_AS(validate(o), std::invalid_argument);
  REQUIRE_THROWS_WITH(validate(o), Contains("LoaderOptions::num_workers is -2") &&
                                       Contains("between 0 and 256") && Contains("kAuto"));
  o.num_workers = 100000;
  REQUIRE_THROWS_AS(validate(o), std::invalid_argument);
  REQUIRE_THROWS_WITH(validate(o), Contains("LoaderOptions::num_workers is 100000") &&
                                       Contains("between 0 and 256"));
  o.num_workers = kMaxWorkers + 1;
  REQUIRE_THROWS_WITH(validate(o), Contains("num_workers is 257"));
}

TEST_CASE("validate: prefetch_factor 0 (adaptive) is valid, above kMaxPrefetchFactor is not",
          "[options]") {
  LoaderOptions o;
  o.prefetch_factor = kAdaptivePrefetch;
  REQUIRE_NOTHROW(validate(o));
  o.prefetch_factor = 1000;
  REQUIRE_THROWS_AS(validate(o), std::invalid_argument);
  REQUIRE_THROWS_WITH(validate(o), Contains("LoaderOptions::prefetch_factor is 1000") &&
                                       Contains("between 0 and 64") && Contains("adapts"));
}

TEST_CASE("validate: a negative timeout", "[options]") {
  LoaderOptions o;
  o.timeout = std::chrono::milliseconds(-1);
  REQUIRE_THROWS_AS(validate(o), std::invalid_argument);
  REQUIRE_THROWS_WITH(validate(o), Contains("LoaderOptions::timeout is -1 ms") && Contains(">= 0"));
}

TEST_CASE("validate: max_batch_bytes out of range", "[options]") {
  LoaderOptions o;
  o.max_batch_bytes = kMinBatchBytes - 1;
  REQUIRE_THROWS_AS(validate(o), std::invalid_argument);
  REQUIRE_THROWS_WITH(validate(o), Contains("LoaderOptions::max_batch_bytes is 65535") &&
                                       Contains("between 65536 and 1099511627776"));
  o.max_batch_bytes = 0;
  REQUIRE_THROWS_WITH(validate(o), Contains("max_batch_bytes is 0"));
  o.max_batch_bytes = kMaxBatchBytes + 1;
  REQUIRE_THROWS_WITH(validate(o), Contains("max_batch_bytes is 1099511627777"));
}

TEST_CASE("validate: a slot must hold its header and the batch's indices", "[options]") {
  LoaderOptions o;
  o.batch_size = 10000;  // 80,000 bytes of indices
  o.max_batch_bytes = kMinBatchBytes;
  REQUIRE_THROWS_WITH(validate(o), Contains("indices of 10000 samples (batch_size)") &&
                                       Contains("raise max_batch_bytes"));
  o.max_batch_bytes = 1 << 20;
  REQUIRE_NOTHROW(validate(o));
}

TEST_CASE("validate: persistent_workers needs workers", "[options]") {
  LoaderOptions o;
  o.persistent_workers = true;
  REQUIRE_THROWS_AS(validate(o), std::invalid_argument);
  REQUIRE_THROWS_WITH(validate(o),
                      Contains("LoaderOptions::persistent_workers") && Contains("num_workers > 0"));
}

TEST_CASE("validate: options that have no range are not checked", "[options]") {
  LoaderOptions o;
  o.shuffle = true;
  o.drop_last = true;
  o.in_order = false;
  o.seed = ~std::uint64_t{0};
  REQUIRE_NOTHROW(validate(o));
}

}  // namespace
}  // namespace stoker
