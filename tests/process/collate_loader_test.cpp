// Collates through a real DataLoader: collate_ragged for variable-length fields, and the
// stacking collate's errors as the consumer sees them.
#include <catch2/catch.hpp>

#include "support/datasets.hpp"

using namespace stoker;

namespace {

// Sample i: "tokens" int32[i % 5 + 1] = {i, i + 1, ...}, "label" scalar, and, when `skew`,
// "pos" float32[i % 3 + 1, 2] (ragged too) or a shape mismatch in "label".
struct Sequences {
  std::size_t n = 30;
  bool bad_tail = false;
  std::size_t size() const { return n; }
  Sample get(std::size_t i) const {
    const auto len = static_cast<std::int64_t>(i % 5 + 1);
    Tensor tokens = Tensor::empty(DType::kInt32, {len});
    for (std::int64_t k = 0; k < len; ++k) {
      tokens.data<std::int32_t>()[k] = static_cast<std::int32_t>(i) + static_cast<std::int32_t>(k);
    }
    Tensor pos = Tensor::zeros(DType::kFloat32,
                               {static_cast<std::int64_t>(i % 3 + 1), bad_tail && i == 7 ? 3 : 2});
    Sample s;
    s.set("tokens", std::move(tokens));
    s.set("pos", std::move(pos));
    s.set("label", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i)));
    return s;
  }
};

}  // namespace

TEST_CASE("collate_ragged concatenates variable-length fields with offsets", "[collate]") {
  const int workers = GENERATE(0, 2);
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = workers;
  opt.collate = collate_ragged({"tokens", "pos"});
  DataLoader loader(Sequences{}, opt);
  std::size_t batches = 0;
  for (const Batch& batch : loader) {
    ++batches;
    const Tensor& offsets = batch["tokens.offsets"];
    const Tensor& tokens = batch["tokens"];
    REQUIRE(offsets.dtype() == DType::kInt64);
    REQUIRE(offsets.numel() == batch.size() + 1);
    const std::int64_t* off = offsets.data<std::int64_t>();
    REQUIRE(off[0] == 0);
    REQUIRE(off[batch.size()] == tokens.size(0));
    for (std::size_t r = 0; r < batch.size(); ++r) {
      const std::size_t i = batch.indices()[r];
      REQUIRE(off[r + 1] - off[r] == static_cast<std::int64_t>(i % 5 + 1));
      for (std::int64_t k = off[r]; k < off[r + 1]; ++k) {
        REQUIRE(tokens.data<std::int32_t>()[k] == static_cast<std::int32_t>(i) + (k - off[r]));
      }
    }
    REQUIRE(batch["pos"].dim() == 2);
    REQUIRE(batch["pos"].size(1) == 2);
    REQUIRE(batch["pos.offsets"].data<std::int64_t>()[batch.size()] == batch["pos"].size(0));
    // Fields not named ragged are stacked.
    REQUIRE(batch["label"].shape() == Shape({static_cast<std::int64_t>(batch.size())}));
  }
  REQUIRE(batches == 8);
}

TEST_CASE("collate_ragged rejects rows that differ beyond their first dimension", "[collate]") {
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 1;
  opt.collate = collate_ragged({"tokens", "pos"});
  DataLoader loader(Sequences{30, true}, opt);
  std::string message;
  std::string type;
  try {
    for (const Batch& batch : loader) (void)batch;
  } catch (const WorkerException& e) {
    message = e.original_what();
    type = e.type_name();
  }
  REQUIRE(type == "stoker::CollateError");
  REQUIRE_THAT(message, Catch::Contains("field 'pos' of sample 7 has shape [2, 3]") &&
                            Catch::Contains("[n, 2]") &&
                            Catch::Contains("may vary only in its first dimension"));
}

TEST_CASE("stacking variable-length fields points at collate_ragged", "[collate]") {
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 0;
  DataLoader loader(Sequences{}, opt);
  try {
    for (const Batch& batch : loader) (void)batch;
    FAIL("no error");
  } catch (const WorkerException& e) {
    REQUIRE(e.type_name() == "stoker::CollateError");
    REQUIRE_THAT(e.original_what(), Catch::Contains("field 'tokens' of sample 1 has shape [2]") &&
                                        Catch::Contains("sample 0 (the batch's first) has [1]") &&
                                        Catch::Contains("collate_ragged"));
    // In-process, the CollateError itself is nested.
    try {
      std::rethrow_if_nested(e);
      FAIL("nothing nested");
    } catch (const CollateError& inner) {
      REQUIRE(inner.field() == "tokens");
      REQUIRE(inner.sample_indices() == std::vector<std::size_t>{0, 1});
    }
  }
}
