#include "stoker/errors.hpp"

#include <utility>

#include "data/error_text.hpp"

namespace stoker {

WorkerCrashed::WorkerCrashed(Details details)
    : Error(detail::describe_crash(details)), details_(std::move(details)) {
  // describe_crash() fell back to the cause the signal or exit code suggests: keep it too.
  if (details_.cause.empty())
    details_.cause = detail::likely_cause(details_.signal, details_.exit_code);
}

WorkerException::WorkerException(Details details)
    : Error(detail::describe_exception(details)), details_(std::move(details)) {}

LoaderTimeout::LoaderTimeout(Details details)
    : Error(detail::describe_timeout(details)), details_(std::move(details)) {}

LoaderTimeout::LoaderTimeout(Details details, const std::string& message)
    : Error(message), details_(std::move(details)) {}

HeldBatchesTimeout::HeldBatchesTimeout(Details details, std::size_t held_batches,
                                       const std::string& message)
    : LoaderTimeout(std::move(details), message), held_(held_batches) {}

CollateError::CollateError(std::string field, std::vector<std::size_t> sample_indices,
                           std::string message)
    : Error(std::move(message)),
      field_(std::move(field)),
      sample_indices_(std::move(sample_indices)) {}

}  // namespace stoker
