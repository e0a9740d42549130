#include "stoker/composition.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "stoker/errors.hpp"
#include "stoker/random.hpp"

namespace stoker {
namespace detail {
namespace {

// "17", or "18446744073709551615 (-1)" for an index that was probably a negative number
// converted to std::size_t.
std::string describe_index(std::size_t index) {
  if (index <= std::numeric_limits<std::size_t>::max() / 2) return std::to_string(index);
  return fmt::format("{} ({})", index, static_cast<long long>(index));
}

std::string describe_fields(const std::vector<std::pair<std::string, DType>>& fields) {
  std::string out;
  for (const auto& [name, dtype] : fields) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{} ({})", name, dtype_name(dtype));
  }
  return out.empty() ? std::string("no fields") : out;
}

}  // namespace

void throw_index_out_of_range(std::string_view owner, std::size_t index, std::size_t size) {
  throw std::out_of_range(fmt::format(
      "{}: index {} is out of range for a dataset of {} samples; valid indices are 0 to size() - 1",
      owner, describe_index(index), size));
}

void throw_negative_length(std::size_t position) {
  throw std::invalid_argument(fmt::format(
      "random_split: length {} is negative; pass sample counts of 0 or more, or fractions",
      position));
}

void check_subset_indices(std::span<const std::size_t> indices, std::size_t dataset_size) {
  for (std::size_t k = 0; k < indices.size(); ++k) {
    if (indices[k] >= dataset_size) {
      throw std::out_of_range(fmt::format(
          "Subset: index {} (position {} of {}) is out of range for a dataset of {} samples; "
          "pass indices below the dataset's size()",
          describe_index(indices[k]), k, indices.size(), dataset_size));
    }
  }
}

std::vector<std::size_t> cumulative_sizes(std::span<const std::size_t> sizes) {
  std::vector<std::size_t> ends;
  ends.reserve(sizes.size());
  std::size_t total = 0;
  for (const std::size_t size : sizes) {
    if (__builtin_add_overflow(total, size, &total)) {
      throw std::overflow_error(
          "ConcatDataset: the parts' sizes add up to more than SIZE_MAX samples");
    }
    ends.push_back(total);
  }
  return ends;
}

PartIndex locate_part(std::span<const std::size_t> ends, std::size_t index,
                      std::string_view owner) {
  const std::size_t total = ends.empty() ? 0 : ends.back();
  if (index >= total) throw_index_out_of_range(owner, index, total);
  // The first part whose end is past index: an empty part's end equals the previous end, so
  // it is never the first one greater than an index.
  const auto it = std::upper_bound(ends.begin(), ends.end(), index);
  const auto part = static_cast<std::size_t>(it - ends.begin());
  return {part, part == 0 ? index : index - ends[part - 1]};
}

void merge_fields(Sample& into, const Sample& part, std::string_view prefix,
                  std::size_t part_number, std::size_t index) {
  for (const auto& [name, tensor] : part) {
    const std::string merged = prefix.empty() ? name : fmt::format("{}.{}", prefix, name);
    if (into.contains(merged)) {
      throw Error(fmt::format(
          "StackDataset::get({}): part {}{} has a field '{}' and an earlier part already gave "
          "a field of that name; name the parts (StackDataset({{{{\"a\", ds1}}, {{\"b\", "
          "ds2}}}}) gives \"a.{}\" and \"b.{}\") or rename the field",
          index, part_number, prefix.empty() ? std::string() : fmt::format(" ('{}')", prefix),
          merged, name, name));
    }
    into.set(merged, tensor);
  }
}

std::vector<std::size_t> split_lengths(std::size_t n, std::span<const double> fractions) {
  if (fractions.empty()) {
    throw std::invalid_argument("random_split: no fractions given; pass at least one");
  }
  double sum = 0;
  for (std::size_t i = 0; i < fractions.size(); ++i) {
    if (!(fractions[i] >= 0.0 && fractions[i] <= 1.0)) {
      throw std::invalid_argument(fmt::format(
          "random_split: fraction {} is {}, not between 0 and 1; pass fractions that sum to 1", i,
          fractions[i]));
    }
    sum += fractions[i];
  }
  // PyTorch's test, math.isclose(sum, 1) with its relative tolerance of 1e-9.
  if (std::fabs(sum - 1.0) > 1e-9 * std::max(1.0, std::fabs(sum))) {
    throw std::invalid_argument(fmt::format(
        "random_split: the fractions sum to {}, not 1; pass fractions that sum to 1, or sample "
        "counts",
        sum));
  }
  std::vector<std::size_t> lengths;
  lengths.reserve(fractions.size());
  std::size_t assigned = 0;
  for (const double fraction : fractions) {
    lengths.push_back(static_cast<std::size_t>(std::floor(static_cast<double>(n) * fraction)));
    assigned += lengths.back();
  }
  if (assigned > n) {
    throw std::invalid_argument(fmt::format(
        "random_split: the fractions (summing to {}) give {} samples of {}; pass fractions "
        "that sum to at most 1",
        sum, assigned, n));
  }
  // The remainder goes one sample each to the lengths in turn, from the first (PyTorch).
  for (std::size_t i = 0; assigned < n; ++i, ++assigned) ++lengths[i % lengths.size()];
  return lengths;
}

std::vector<std::vector<std::size_t>> split_indices(std::size_t n,
                                                    std::span<const std::size_t> lengths,
                                                    std::uint64_t seed) {
  std::size_t total = 0;
  for (const std::size_t length : lengths) {
    if (__builtin_add_overflow(total, length, &total)) total = ~std::size_t{0};
  }
  if (total != n) {
    throw std::invalid_argument(fmt::format(
        "random_split: the lengths sum to {} but the dataset has {} samples; pass lengths that "
        "sum to the dataset's size(), or fractions",
        total == ~std::size_t{0} ? std::string("more than SIZE_MAX") : std::to_string(total), n));
  }
  std::vector<std::size_t> permutation(n);
  std::iota(permutation.begin(), permutation.end(), std::size_t{0});
  Generator generator = Generator::from({seed, 0x7370'6c69'74ULL});  // "split"
  generator.shuffle(permutation.begin(), permutation.end());
  std::vector<std::vector<std::size_t>> pieces;
  pieces.reserve(lengths.size());
  auto from = permutation.begin();
  for (const std::size_t length : lengths) {
    const auto to = from + static_cast<std::ptrdiff_t>(length);
    pieces.emplace_back(from, to);
    from = to;
  }
  return pieces;
}

std::vector<std::string> numbered_parts(std::size_t count, std::string_view word) {
  std::vector<std::string> names;
  names.reserve(count);
  for (std::size_t i = 0; i < count; ++i) names.push_back(fmt::format("{} {}", word, i));
  return names;
}

FieldCheck::FieldCheck(std::string owner, std::vector<std::string> part_names)
    : owner_(std::move(owner)),
      part_names_(std::move(part_names)),
      checked_(part_names_.size(), false) {}

void FieldCheck::check_first(std::size_t part, const Sample& sample) {
  std::vector<std::pair<std::string, DType>> fields;
  fields.reserve(sample.size());
  for (const auto& [name, tensor] : sample) fields.emplace_back(name, tensor.dtype());
  std::sort(fields.begin(), fields.end());
  if (!has_reference_) {
    reference_ = std::move(fields);
    reference_part_ = part;
    has_reference_ = true;
  } else if (fields != reference_) {
    throw Error(fmt::format(
        "{}: the samples of {} have other fields than those of {}: {} against {}; every part "
        "must give the same field names and dtypes (transform() a part to rename, add or "
        "convert fields)",
        owner_, part_names_[part], part_names_[reference_part_], describe_fields(fields),
        describe_fields(reference_)));
  }
  checked_[part] = true;
}

}  // namespace detail

void ConcatDataset::init(std::vector<detail::AnyMapDataset> parts) {
  if (parts.empty()) {
    throw std::invalid_argument("ConcatDataset: no parts given; pass at least one dataset");
  }
  parts_ = std::move(parts);
  std::vector<std::size_t> sizes;
  sizes.reserve(parts_.size());
  for (const detail::AnyMapDataset& part : parts_) sizes.push_back(part.size());
  ends_ = detail::cumulative_sizes(sizes);
  check_ = detail::FieldCheck("ConcatDataset", detail::numbered_parts(parts_.size()));
}

CacheStats ConcatDataset::cache_stats() const {
  return detail::sum_cache_stats(
      parts_, [](const detail::AnyMapDataset& part) -> const auto& { return part; });
}

void ChainDataset::init(std::vector<detail::AnyIterableDataset> parts) {
  if (parts.empty()) {
    throw std::invalid_argument("ChainDataset: no parts given; pass at least one dataset");
  }
  parts_ = std::move(parts);
  check_ = detail::FieldCheck("ChainDataset", detail::numbered_parts(parts_.size()));
}

void ChainDataset::start_epoch(std::uint64_t epoch) {
  epoch_ = epoch;
  current_ = 0;
  current_started_ = false;
}

std::optional<Sample> ChainDataset::next() {
  while (current_ < parts_.size()) {
    if (epoch_ && !current_started_) parts_[current_].start_epoch(*epoch_);
    current_started_ = true;
    std::optional<Sample> sample = parts_[current_].next();
    if (sample) {
      check_.check(current_, *sample);
      return sample;
    }
    ++current_;
    current_started_ = false;
  }
  return std::nullopt;
}

StackDataset::StackDataset(std::vector<Part> parts) : parts_(std::move(parts)) {
  if (parts_.empty()) {
    throw std::invalid_argument("StackDataset: no parts given; pass at least one dataset");
  }
  size_ = parts_[0].dataset.size();
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    const std::size_t size = parts_[i].dataset.size();
    if (size != size_) {
      throw std::invalid_argument(fmt::format(
          "StackDataset: part {}{} has {} samples but part 0{} has {}; stacked datasets are "
          "aligned sample by sample, so they must have the same size (cut one with Subset)",
          i, parts_[i].name.empty() ? "" : fmt::format(" ('{}')", parts_[i].name), size,
          parts_[0].name.empty() ? "" : fmt::format(" ('{}')", parts_[0].name), size_));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (!parts_[i].name.empty() && parts_[i].name == parts_[j].name) {
        throw std::invalid_argument(
            fmt::format("StackDataset: parts {} and {} are both named '{}'; give each part its "
                        "own name",
                        j, i, parts_[i].name));
      }
    }
  }
}

Sample StackDataset::get(std::size_t i) {
  if (i >= size_) detail::throw_index_out_of_range("StackDataset::get", i, size_);
  Sample out;
  for (std::size_t p = 0; p < parts_.size(); ++p) {
    detail::merge_fields(out, parts_[p].dataset.get(i), parts_[p].name, p, i);
  }
  return out;
}

CacheStats StackDataset::cache_stats() const {
  return detail::sum_cache_stats(
      parts_, [](const Part& part) -> const auto& { return part.dataset; });
}

}  // namespace stoker
