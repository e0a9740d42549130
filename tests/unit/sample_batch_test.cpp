// Unit tests for include/stoker/sample.hpp and include/stoker/batch.hpp: Sample's fields, and a
// Batch assembled through its public constructor (as the loader does, with a keeper that owns
// the memory its views point into), including clone() outliving that keeper.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "stoker/batch.hpp"
#include "stoker/sample.hpp"
#include "stoker/tensor.hpp"

namespace stoker {
namespace {

using Catch::Contains;

std::vector<std::string> field_names(const std::vector<Field>& fields) {
  std::vector<std::string> names;
  for (const Field& field : fields) names.push_back(field.name);
  return names;
}

TEST_CASE("Sample: a default sample has no fields", "[sample]") {
  const Sample s;
  REQUIRE(s.empty());
  REQUIRE(s.size() == 0);
  REQUIRE(s.fields().empty());
  REQUIRE(s.begin() == s.end());
  REQUIRE(s.nbytes() == 0);
  REQUIRE(s.find("x") == nullptr);
  REQUIRE_FALSE(s.contains("x"));
}

TEST_CASE("Sample::set: adds fields in order and chains", "[sample]") {
  Sample s;
  const Tensor image = Tensor::zeros(DType::kUInt8, Shape{3, 2, 2});
  const Tensor label = Tensor::scalar<std::int64_t>(4);
  Sample& same = s.set("image", image).set("label", label);
  REQUIRE(&same == &s);
  REQUIRE(s.size() == 2);
  REQUIRE_FALSE(s.empty());
  REQUIRE(field_names(s.fields()) == std::vector<std::string>{"image", "label"});
  // The sample holds the tensors themselves (shallow copies), not copies of their bytes.
  REQUIRE(s["image"].raw_data() == image.raw_data());
  REQUIRE(s["label"].item<std::int64_t>() == 4);

  std::vector<std::string> iterated;
  for (const auto& [name, tensor] : s) {
    REQUIRE(tensor.defined());
    iterated.push_back(name);
  }
  REQUIRE(iterated == std::vector<std::string>{"image", "label"});
}

TEST_CASE("Sample::set: replacing a field keeps its position", "[sample]") {
  Sample s;
  s.set("a", Tensor::scalar(1.0f)).set("b", Tensor::scalar(2.0f)).set("c", Tensor::scalar(3.0f));
  const Tensor replacement = Tensor::from<std::int32_t>({7, 8});
  s.set("b", replacement);
  REQUIRE(s.size() == 3);
  REQUIRE(field_names(s.fields()) == std::vector<std::string>{"a", "b", "c"});
  REQUIRE(s["b"].raw_data() == replacement.raw_data());
  REQUIRE(s["b"].dtype() == DType::kInt32);
  REQUIRE(s["b"].shape() == Shape{2});
  REQUIRE(s["a"].item<float>() == 1.0f);
  REQUIRE(s["c"].item<float>() == 3.0f);

  s.set("a", Tensor::scalar(10.0f));
  REQUIRE(field_names(s.fields()) == std::vector<std::string>{"a", "b", "c"});
  REQUIRE(s["a"].item<float>() == 10.0f);
}

TEST_CASE("Sample::set: an empty name is an error", "[sample]") {
  Sample s;
  s.set("x", Tensor::scalar(1));
  REQUIRE_THROWS_AS(s.set("", Tensor::scalar(2)), std::invalid_argument);
  REQUIRE_THROWS_WITH(s.set("", Tensor::scalar(2)),
                      Contains("Sample::set") && Contains("field name is empty"));
  REQUIRE(s.size() == 1);
}

TEST_CASE("Sample::set: an undefined tensor is an error naming the field", "[sample]") {
  Sample s;
  REQUIRE_THROWS_AS(s.set("mask", Tensor()), std::invalid_argument);
  REQUIRE_THROWS_WITH(s.set("mask", Tensor()),
                      Contains("Sample::set") && Contains("'mask'") && Contains("undefined"));
  REQUIRE(s.empty());
  // Replacing an existing field with an undefined tensor is refused too, and changes nothing.
  s.set("mask", Tensor::scalar(true));
  REQUIRE_THROWS_AS(s.set("mask", Tensor()), std::invalid_argument);
  REQUIRE(s["mask"].defined());
  REQUIRE(s["mask"].item<bool>());
}

TEST_CASE("Sample::operator[]: a missing field is an error listing the fields", "[sample]") {
  Sample s;
  s.set("image", Tensor::scalar(1.0f)).set("label", Tensor::scalar(2));
  REQUIRE_THROWS_AS(s["mask"], std::out_of_range);
  REQUIRE_THROWS_WITH(s["mask"], Contains("Sample") && Contains("no field named 'mask'") &&
                                     Contains("image, label"));
  const Sample none;
  REQUIRE_THROWS_AS(none["image"], std::out_of_range);
  REQUIRE_THROWS_WITH(none["image"], Contains("no field named 'image'") && Contains("none"));
}

TEST_CASE("Sample::find and contains", "[sample]") {
  Sample s;
  s.set("a", Tensor::scalar(1)).set("b", Tensor::scalar(2));
  const Tensor* b = s.find("b");
  REQUIRE(b != nullptr);
  REQUIRE(b == &s["b"]);
  REQUIRE(b->item<std::int32_t>() == 2);
  REQUIRE(s.find("c") == nullptr);
  REQUIRE(s.find("") == nullptr);
  REQUIRE(s.find("B") == nullptr);  // names are case-sensitive
  REQUIRE(s.contains("a"));
  REQUIRE_FALSE(s.contains("c"));
}

TEST_CASE("Sample::nbytes sums the fields' payloads", "[sample]") {
  Sample s;
  s.set("image", Tensor::empty(DType::kFloat32, Shape{2, 3}));  // 24
  s.set("label", Tensor::scalar<std::int64_t>(1));              // 8
  s.set("flags", Tensor::from<bool>({true, false, true}));      // 3
  REQUIRE(s.nbytes() == 35);
  s.set("image", Tensor::empty(DType::kUInt8, Shape{5}));  // replaced: 5
  REQUIRE(s.nbytes() == 16);
}

// What a loader slot looks like to a Batch: the indices and the stacked bytes live in memory the
// keeper owns. `destroyed` is set when the keeper goes away.
struct FakeSlot {
  std::vector<std::size_t> indices;
  std::vector<float> x;         // [3, 2]
  std::vector<std::int64_t> y;  // [3]
  bool* destroyed = nullptr;
  ~FakeSlot() {
    if (destroyed != nullptr) *destroyed = true;
  }
};

// A batch of three samples (dataset indices 7, 3, 11) whose fields are views into `slot`; the
// views hold `slot` too, as the loader's tensors hold the slot lease.
Batch make_batch(const std::shared_ptr<FakeSlot>& slot, bool views_own_slot = true) {
  const std::shared_ptr<const void> owner = views_own_slot ? slot : nullptr;
  std::vector<Field> fields;
  fields.emplace_back("x", Tensor::view(DType::kFloat32, Shape{3, 2}, slot->x.data(), owner));
  fields.emplace_back("y", Tensor::view(DType::kInt64, Shape{3}, slot->y.data(), owner));
  return detail::make_batch({std::move(fields), slot->indices, 2, 5, slot, std::nullopt, false});
}

std::shared_ptr<FakeSlot> make_slot(bool* destroyed) {
  auto slot = std::make_shared<FakeSlot>();
  slot->indices = {7, 3, 11};
  slot->x = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f};
  slot->y = {70, 30, 110};
  slot->destroyed = destroyed;
  return slot;
}

TEST_CASE("Batch: a default batch is empty", "[batch]") {
  const Batch b;
  REQUIRE(b.size() == 0);
  REQUIRE(b.indices().empty());
  REQUIRE(b.fields().empty());
  REQUIRE(b.nbytes() == 0);
  REQUIRE_FALSE(b.is_view());
  REQUIRE(b.epoch() == 0);
  REQUIRE(b.index() == 0);
  REQUIRE_FALSE(b.contains("x"));
}

TEST_CASE("Batch: fields, indices, epoch and index as constructed", "[batch]") {
  bool destroyed = false;
  const auto slot = make_slot(&destroyed);
  const Batch b = make_batch(slot);
  REQUIRE(b.size() == 3);
  REQUIRE(std::vector<std::size_t>(b.indices().begin(), b.indices().end()) ==
          std::vector<std::size_t>{7, 3, 11});
  REQUIRE(b.indices().data() == slot->indices.data());  // not copied
  REQUIRE(b.epoch() == 2);
  REQUIRE(b.index() == 5);
  REQUIRE(field_names(b.fields()) == std::vector<std::string>{"x", "y"});
  std::vector<std::string> iterated;
  for (const auto& [name, tensor] : b) iterated.push_back(name);
  REQUIRE(iterated == std::vector<std::string>{"x", "y"});

  const Tensor& x = b["x"];
  REQUIRE(x.shape() == Shape{3, 2});
  REQUIRE(x.data<float>() == slot->x.data());
  REQUIRE(x.data<float>()[3] == 1.5f);
  REQUIRE(b["y"].data<std::int64_t>()[2] == 110);
  REQUIRE(b.find("y") == &b["y"]);
  REQUIRE(b.find("z") == nullptr);
  REQUIRE(b.contains("x"));
  REQUIRE_FALSE(b.contains("z"));
  REQUIRE(b.nbytes() == 3 * 2 * 4 + 3 * 8);
  REQUIRE(b.is_view());
}

TEST_CASE("Batch::operator[]: a missing field is an error listing the fields", "[batch]") {
  bool destroyed = false;
  const Batch b = make_batch(make_slot(&destroyed));
  REQUIRE_THROWS_AS(b["label"], std::out_of_range);
  REQUIRE_THROWS_WITH(b["label"],
                      Contains("Batch") && Contains("no field named 'label'") && Contains("x, y"));
  REQUIRE_THROWS_WITH(Batch()["x"], Contains("no field named 'x'") && Contains("none"));
}

TEST_CASE("Batch: is_view is false when no field is a view", "[batch]") {
  std::vector<Field> fields;
  fields.emplace_back("x", Tensor::from<float>({1.0f, 2.0f}));
  const std::vector<std::size_t> indices{0, 1};
  const Batch b =
      detail::make_batch({std::move(fields), indices, 0, 0, nullptr, std::nullopt, false});
  REQUIRE_FALSE(b.is_view());
  REQUIRE(b.size() == 2);
}

TEST_CASE("Batch: the batch and its copies keep the keeper alive", "[batch]") {
  bool destroyed = false;
  auto slot = make_slot(&destroyed);
  // The views do not hold the slot here: only the Batch's keeper does.
  auto batch = std::make_unique<Batch>(make_batch(slot, /*views_own_slot=*/false));
  slot.reset();
  REQUIRE_FALSE(destroyed);
  auto copy = std::make_unique<Batch>(*batch);
  batch.reset();
  REQUIRE_FALSE(destroyed);
  REQUIRE(copy->indices()[1] == 3);
  REQUIRE(copy->operator[]("y").data<std::int64_t>()[0] == 70);
  copy.reset();
  REQUIRE(destroyed);
}

TEST_CASE("Batch::clone: a deep copy independent of the keeper", "[batch]") {
  bool destroyed = false;
  auto slot = make_slot(&destroyed);
  auto original = std::make_unique<Batch>(make_batch(slot));
  const Batch clone = original->clone();

  REQUIRE(clone.size() == 3);
  REQUIRE(clone.epoch() == 2);
  REQUIRE(clone.index() == 5);
  REQUIRE_FALSE(clone.is_view());
  REQUIRE(clone.nbytes() == original->nbytes());
  REQUIRE(field_names(clone.fields()) == std::vector<std::string>{"x", "y"});
  REQUIRE(clone.indices().data() != slot->indices.data());
  REQUIRE(clone["x"].raw_data() != (*original)["x"].raw_data());
  REQUIRE(clone["x"].shape() == Shape{3, 2});
  REQUIRE(clone["y"].dtype() == DType::kInt64);

  // Overwrite the slot (as a worker reusing it would), then destroy every holder of it.
  slot->indices = {0, 0, 0};
  for (float& v : slot->x) v = -1.0f;
  for (std::int64_t& v : slot->y) v = -1;
  slot.reset();
  original.reset();
  REQUIRE(destroyed);

  REQUIRE(std::vector<std::size_t>(clone.indices().begin(), clone.indices().end()) ==
          std::vector<std::size_t>{7, 3, 11});
  const float* x = clone["x"].data<float>();
  for (std::size_t i = 0; i < 6; ++i) REQUIRE(x[i] == static_cast<float>(i) * 0.5f);
  const std::int64_t* y = clone["y"].data<std::int64_t>();
  REQUIRE(y[0] == 70);
  REQUIRE(y[1] == 30);
  REQUIRE(y[2] == 110);

  // A copy of the clone shares its memory and keeps its indices alive.
  auto copy = std::make_unique<Batch>(clone);
  REQUIRE(copy->indices().data() == clone.indices().data());
  REQUIRE((*copy)["x"].raw_data() == clone["x"].raw_data());
}

TEST_CASE("Batch::clone: the clone's indices outlive the original clone", "[batch]") {
  bool destroyed = false;
  auto clone = std::make_unique<Batch>(make_batch(make_slot(&destroyed)).clone());
  REQUIRE(destroyed);
  const Batch copy = *clone;
  clone.reset();
  REQUIRE(std::vector<std::size_t>(copy.indices().begin(), copy.indices().end()) ==
          std::vector<std::size_t>{7, 3, 11});
  REQUIRE(copy["y"].data<std::int64_t>()[1] == 30);
}

}  // namespace
}  // namespace stoker
