// BatchIterator: the iterator protocol over one epoch of a LoaderCore (data_loader.hpp).
#include "stoker/data_loader.hpp"

#include <stdexcept>
#include <utility>

namespace stoker {

BatchIterator::BatchIterator(BatchIterator&& other) noexcept
    : core_(std::exchange(other.core_, nullptr)),
      generation_(other.generation_),
      current_(std::move(other.current_)),
      fetched_(other.fetched_),
      pending_(other.pending_) {}

BatchIterator& BatchIterator::operator=(BatchIterator&& other) noexcept {
  if (this != &other) {
    BatchIterator previous(std::move(*this));  // ends this iterator's epoch when it goes
    core_ = std::exchange(other.core_, nullptr);
    generation_ = other.generation_;
    current_ = std::move(other.current_);
    fetched_ = other.fetched_;
    pending_ = other.pending_;
  }
  return *this;
}

BatchIterator::~BatchIterator() {
  current_.reset();
  if (core_ != nullptr) core_->finish(generation_);
}

void BatchIterator::fetch() const {
  pending_ = false;
  current_.reset();  // its slot can be reused for the batch being fetched
  fetched_ = false;  // if next() throws, the following fetch moves on to the next batch
  current_ = core_->next(generation_);
  fetched_ = true;
}

// Each call below holds the loader's thread rule (LoaderCore::Call) while it reads or writes
// this iterator's members too, so a second thread is refused before it touches them.

bool BatchIterator::at_end() const {
  if (core_ == nullptr) return true;
  const detail::LoaderCore::Call call(*core_, "BatchIterator::operator== (end)");
  if (!fetched_) fetch();
  return !current_.has_value();
}

const Batch& BatchIterator::operator*() const {
  if (core_ == nullptr)
    throw std::logic_error("BatchIterator: dereferenced at the end of the epoch");
  const detail::LoaderCore::Call call(*core_, "BatchIterator::operator*");
  if (at_end()) throw std::logic_error("BatchIterator: dereferenced at the end of the epoch");
  return *current_;
}

BatchIterator& BatchIterator::operator++() {
  if (core_ == nullptr) return *this;
  const detail::LoaderCore::Call call(*core_, "BatchIterator::operator++");
  if (pending_) fetch();  // batch 0 is the current position: load it, then move past it
  fetch();
  return *this;
}

std::optional<Batch> BatchIterator::next() {
  if (core_ == nullptr) return std::nullopt;
  const detail::LoaderCore::Call call(*core_, "BatchIterator::next");
  if (at_end()) return std::nullopt;
  fetched_ = false;
  return std::exchange(current_, std::nullopt);
}

}  // namespace stoker
