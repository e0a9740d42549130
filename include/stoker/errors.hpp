// The errors stoker raises. All derive from stoker::Error (a std::runtime_error), and each kind
// is chosen by what the caller should do next: WorkerCrashed (a worker process died: find out
// why, or enable respawn), WorkerException (user code threw: fix or skip the sample),
// LoaderTimeout (no batch in time: a hung or slow worker), CollateError (samples that cannot be
// stacked), ShardError (a data file is damaged: skip the record, or re-copy the file). Bad
// options are std::invalid_argument, naming the option and its valid range.
#pragma once

#include <sys/types.h>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace stoker {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A data file a dataset reads (a tar, TFRecord or MDS shard, an .npy, token or IDX file) whose
// bytes cannot be read as records: a bad checksum or header, a file cut short, a file that shrank
// while it was mapped, a hash mismatch. The one type a program catches for "this shard is
// damaged"; TFRecordError and MdsError derive from it. Errors opening a file that is not there,
// and errors of a field's decoder on a record's bytes, are other stoker::Errors. Through a
// DataLoader with workers it reaches the consumer as a WorkerException whose type_name() is this
// error's (the path and offset are in the message).
class ShardError : public Error {
 public:
  ShardError(std::string message, std::string path, std::uint64_t offset = 0)
      : Error(std::move(message)), path_(std::move(path)), offset_(offset) {}
  // The file.
  const std::string& path() const noexcept { return path_; }
  // The damaged record's or region's byte offset in the file (in the decompressed stream, for a
  // compressed shard); 0 when the error is about the whole file.
  std::uint64_t offset() const noexcept { return offset_; }

 private:
  std::string path_;
  std::uint64_t offset_ = 0;
};

// A worker process ended without being asked to: killed by a signal or exited on its own.
class WorkerCrashed : public Error {
 public:
  struct Details {
    std::size_t worker_id = 0;
    pid_t pid = 0;
    int signal = 0;                           // the signal that killed it; 0 when it exited
    int exit_code = -1;                       // its exit status; -1 when a signal killed it
    std::optional<std::uint64_t> batch;       // batch (within the epoch) it was loading
    std::optional<std::size_t> sample_index;  // dataset index it was loading
    std::string cause;                        // the likely cause and what to do
  };
  explicit WorkerCrashed(Details details);
  const Details& details() const noexcept { return details_; }
  std::size_t worker_id() const noexcept { return details_.worker_id; }
  pid_t pid() const noexcept { return details_.pid; }
  int signal() const noexcept { return details_.signal; }
  int exit_code() const noexcept { return details_.exit_code; }
  std::optional<std::size_t> sample_index() const noexcept { return details_.sample_index; }
  std::optional<std::uint64_t> batch() const noexcept { return details_.batch; }
  // The likely cause and what to do (also the end of what()).
  const std::string& cause() const noexcept { return details_.cause; }

 private:
  Details details_;
};

// User code (the dataset's get(), the collate function or worker_init) threw. The exception
// object cannot cross a process boundary, so its type name and message travel instead. With
// num_workers == 0 the original exception is also available: it is nested
// (std::rethrow_if_nested(e) rethrows it).
class WorkerException : public Error {
 public:
  struct Details {
    std::optional<std::size_t> worker_id;  // empty when the error came from the main process
    pid_t pid = 0;
    std::string type_name;  // demangled type of the thrown object
    std::string message;    // its what(), or "" when it was not a std::exception
    std::optional<std::uint64_t> batch;
    std::optional<std::size_t> sample_index;
    std::string where;  // "get()", "collate", "worker_init"
  };
  explicit WorkerException(Details details);
  const Details& details() const noexcept { return details_; }
  const std::string& type_name() const noexcept { return details_.type_name; }
  const std::string& original_what() const noexcept { return details_.message; }
  std::optional<std::size_t> worker_id() const noexcept { return details_.worker_id; }
  pid_t pid() const noexcept { return details_.pid; }
  std::optional<std::size_t> sample_index() const noexcept { return details_.sample_index; }

 private:
  Details details_;
};

// No batch arrived within LoaderOptions::timeout.
class LoaderTimeout : public Error {
 public:
  struct Details {
    std::optional<std::size_t> worker_id;  // the worker that owes the batch
    pid_t pid = 0;
    std::uint64_t batch = 0;
    std::chrono::milliseconds timeout{0};     // LoaderOptions::timeout
    std::chrono::milliseconds waited{0};      // how long the consumer actually waited
    std::optional<std::size_t> sample_index;  // what that worker was loading, when known
  };
  explicit LoaderTimeout(Details details);
  const Details& details() const noexcept { return details_; }

 protected:
  LoaderTimeout(Details details, const std::string& message);

 private:
  Details details_;
};

// No batch can arrive until the program releases a Batch it holds: every slot that could carry
// the next batch is held by the consumer (a Batch is a view of its slot). Raised at once when
// the process has a single thread (nothing else could release one), after
// LoaderOptions::timeout otherwise. Keep batch.clone() instead, or raise prefetch_factor.
class HeldBatchesTimeout : public LoaderTimeout {
 public:
  HeldBatchesTimeout(Details details, std::size_t held_batches, const std::string& message);
  std::size_t held_batches() const noexcept { return held_; }

 private:
  std::size_t held_;
};

// The samples of a batch cannot be stacked: a field is missing, or dtypes or shapes differ.
// Thrown by StackCollator where the batch is loaded; through a DataLoader it reaches the
// consumer as a WorkerException whose type_name() is "stoker::CollateError" (with
// num_workers == 0 the CollateError itself is nested in it).
class CollateError : public Error {
 public:
  CollateError(std::string field, std::vector<std::size_t> sample_indices, std::string message);
  const std::string& field() const noexcept { return field_; }
  // The dataset indices involved: the batch's first sample and the one that differs.
  const std::vector<std::size_t>& sample_indices() const noexcept { return sample_indices_; }

 private:
  std::string field_;
  std::vector<std::size_t> sample_indices_;
};

}  // namespace stoker
