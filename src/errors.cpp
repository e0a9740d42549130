#include "stoker/errors.hpp"

#include <utility>

#include "crash_report.hpp"

namespace stoker {

WorkerCrashed::WorkerCrashed(Details details)
    : Error(detail::describe_crash(details)), details_(std::move(details)) {}

WorkerException::WorkerException(Details details)
    : Error(detail::describe_exception(details)), details_(std::move(details)) {}

LoaderTimeout::LoaderTimeout(Details details)
    : Error(detail::describe_timeout(details)), details_(std::move(details)) {}

CollateError::CollateError(std::string field, std::vector<std::size_t> sample_indices,
                           std::string message)
    : Error(std::move(message)),
      field_(std::move(field)),
      sample_indices_(std::move(sample_indices)) {}

}  // namespace stoker
