#include "datasets/shards/byte_source.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <exception>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "datasets/records/compression.hpp"
#include "datasets/remote/remote_source.hpp"
#include "datasets/remote/remote_stream.hpp"
#include "os/net/url.hpp"
#include "os/posix.hpp"
#include "stoker/errors.hpp"

#if STOKER_HAS_LIBARCHIVE
#include <archive.h>
#include <archive_entry.h>
#endif

namespace stoker::detail {
namespace {

constexpr std::size_t kBufferBytes = 1024 * 1024;  // as dd bs=1M reads

[[noreturn]] void throw_errno(std::string_view who, std::string_view what, const std::string& name,
                              int err) {
  throw Error(
      fmt::format("{}: {} {}: {}", who, what, name, posix::errno_message("the system said", err)));
}

// A file (or FIFO) read front to back. Regular files are read with pread() from a tracked
// position, so a skip is a seek (clamped to the file's size); other files with read().
class FileSource final : public StreamSource {
 public:
  FileSource(const std::string& path, std::uint64_t offset, std::string_view who)
      : name_(path), who_(who) {
    fd_ = posix::Fd(posix::open_read(path.c_str()));
    if (!fd_.valid()) throw_errno(who, "cannot open shard", path, errno);
    struct stat st {};
    if (!posix::stat_fd(fd_.get(), st)) throw_errno(who, "cannot stat shard", path, errno);
    regular_ = S_ISREG(st.st_mode);
    size_ = regular_ ? static_cast<std::uint64_t>(st.st_size) : 0;
    pos_ = regular_ ? std::min(offset, size_) : 0;
    if (regular_) {
      (void)posix::advise_file(fd_.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    } else if (offset != 0 && skip(offset) != offset) {
      throw Error(fmt::format("{}: shard {} ended before byte {}", who, path, offset));
    }
    buffer_.resize(kBufferBytes);
  }

  std::size_t read(std::span<std::byte> dst) override {
    if (begin_ == end_) {
      if (dst.size() >= buffer_.size()) return raw_read(dst);
      begin_ = 0;
      end_ = raw_read(buffer_);
      if (end_ == 0) return 0;
    }
    const std::size_t n = std::min(dst.size(), end_ - begin_);
    std::copy_n(buffer_.data() + begin_, n, dst.data());
    begin_ += n;
    return n;
  }

  std::uint64_t skip(std::uint64_t n) override {
    const std::uint64_t buffered = std::min<std::uint64_t>(n, end_ - begin_);
    begin_ += static_cast<std::size_t>(buffered);
    if (!regular_) return buffered + StreamSource::skip(n - buffered);
    const std::uint64_t rest = std::min(n - buffered, size_ - pos_);
    pos_ += rest;
    return buffered + rest;
  }

 private:
  std::size_t raw_read(std::span<std::byte> dst) {
    const ssize_t n =
        regular_ ? posix::pread_some(fd_.get(), dst.data(), dst.size(), static_cast<off_t>(pos_))
                 : posix::read_some(fd_.get(), dst.data(), dst.size());
    if (n < 0) {
      throw ShardError(
          fmt::format("{}: cannot read shard {} at byte {}: {}; check the disk, or "
                      "copy the shard again",
                      who_, name_, pos_, posix::errno_message("the system said", errno)),
          name_, pos_);
    }
    pos_ += static_cast<std::uint64_t>(n);
    return static_cast<std::size_t>(n);
  }

  posix::Fd fd_;
  std::string name_;
  std::string who_;
  bool regular_ = false;
  std::uint64_t size_ = 0;
  std::uint64_t pos_ = 0;
  std::vector<std::byte> buffer_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
};

// The standard output of `sh -c <command>`, in its own process group. At the end of its output
// the command's exit status is checked; a source destroyed early closes the pipe (the command
// gets SIGPIPE) and kills the group, so no process outlives it.
class PipeSource final : public StreamSource {
 public:
  PipeSource(const std::string& name, std::string_view who) : name_(name), who_(who) {
    const std::string command = name.substr(5);
    int fds[2];
    if (posix::make_pipe(fds) != 0) throw_errno(who, "cannot make a pipe for", name, errno);
    posix::Fd read_end(fds[0]);
    posix::Fd write_end(fds[1]);
    const pid_t pid = posix::spawn_shell(command.c_str(), write_end.get());
    if (pid < 0) throw_errno(who, "cannot start the command of", name, errno);
    pid_ = pid;
    fd_ = std::move(read_end);
  }
  ~PipeSource() override {
    fd_.reset();
    if (pid_ > 0) {
      int status = 0;
      if (posix::wait_pid(pid_, &status, WNOHANG) == 0) {
        posix::send_signal(-pid_, SIGKILL);  // its process group: the command's children too
        posix::wait_pid(pid_, &status, 0);
      }
    }
  }

  std::size_t read(std::span<std::byte> dst) override {
    const ssize_t n = posix::read_some(fd_.get(), dst.data(), dst.size());
    if (n > 0) return static_cast<std::size_t>(n);
    if (n == 0) {
      finish();
      return 0;
    }
    throw_errno(who_, "cannot read the output of", name_, errno);
  }

 private:
  void finish() {
    if (pid_ <= 0) return;
    int status = 0;
    const pid_t pid = std::exchange(pid_, 0);
    if (posix::wait_pid(pid, &status, 0) != pid) return;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
    const std::string how = WIFEXITED(status)
                                ? fmt::format("exited with status {}", WEXITSTATUS(status))
                                : fmt::format("was killed by signal {}", WTERMSIG(status));
    throw Error(fmt::format(
        "{}: the command of shard '{}' {}; run it in a shell to see why (its output was taken "
        "as the shard up to there)",
        who_, name_, how));
  }

  std::string name_;
  std::string who_;
  posix::Fd fd_;
  pid_t pid_ = 0;
};

#if STOKER_HAS_LIBARCHIVE
// libarchive as a decompressor only: every filter it has, and the "raw" format, which hands
// back the decompressed bytes as one entry. stoker parses the tar itself.
class ArchiveSource final : public StreamSource {
 public:
  ArchiveSource(std::unique_ptr<StreamSource> inner, std::string name, std::string_view who)
      : inner_(std::move(inner)), name_(std::move(name)), who_(who) {
    archive_ = archive_read_new();
    if (archive_ == nullptr) throw std::bad_alloc();
    archive_read_support_filter_all(archive_);
    archive_read_support_format_raw(archive_);
    buffer_.resize(kBufferBytes);
    const int rc =
        archive_read_open(archive_, this, nullptr, &ArchiveSource::read_callback, nullptr);
    check(rc, "cannot start reading");
    archive_entry* entry = nullptr;
    const int header = archive_read_next_header(archive_, &entry);
    if (header == ARCHIVE_EOF) {
      empty_ = true;
      return;
    }
    check(header, "cannot read");
  }
  ~ArchiveSource() override { archive_read_free(archive_); }

  std::size_t read(std::span<std::byte> dst) override {
    if (empty_ || dst.empty()) return 0;
    const la_ssize_t n = archive_read_data(archive_, dst.data(), dst.size());
    if (n < 0) check(static_cast<int>(n), "cannot decompress");
    return static_cast<std::size_t>(n);
  }

 private:
  static la_ssize_t read_callback(archive*, void* client, const void** buffer) {
    auto* self = static_cast<ArchiveSource*>(client);
    try {
      const std::size_t n = self->inner_->read(self->buffer_);
      *buffer = self->buffer_.data();
      return static_cast<la_ssize_t>(n);
    } catch (...) {
      self->failure_ = std::current_exception();  // exceptions must not cross libarchive
      return -1;
    }
  }
  void check(int rc, std::string_view what) {
    if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
    if (rc >= ARCHIVE_WARN) return;
    const char* message = archive_error_string(archive_);
    throw Error(fmt::format(
        "{}: {} shard {}: {}; the file is damaged or not compressed with a format libarchive "
        "reads (gzip, zstd, xz, bzip2, lz4)",
        who_, what, name_, message != nullptr ? message : "libarchive gave no reason"));
  }

  std::unique_ptr<StreamSource> inner_;
  std::string name_;
  std::string who_;
  archive* archive_ = nullptr;
  std::vector<std::byte> buffer_;
  std::exception_ptr failure_;
  bool empty_ = false;
};
#endif

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool is_gzip_name(std::string_view name) {
  return ends_with(name, ".gz") || ends_with(name, ".tgz");
}

}  // namespace

std::uint64_t StreamSource::skip(std::uint64_t n) {
  std::array<std::byte, 64 * 1024> sink;
  std::uint64_t done = 0;
  while (done < n) {
    const std::size_t want =
        static_cast<std::size_t>(std::min<std::uint64_t>(n - done, sink.size()));
    const std::size_t got = read(std::span<std::byte>(sink.data(), want));
    if (got == 0) break;
    done += got;
  }
  return done;
}

namespace {
class MemorySource final : public StreamSource {
 public:
  explicit MemorySource(std::span<const std::byte> data) : data_(data) {}
  std::size_t read(std::span<std::byte> dst) override {
    const std::size_t n = std::min(dst.size(), data_.size() - pos_);
    std::copy_n(data_.data() + pos_, n, dst.data());
    pos_ += n;
    return n;
  }
  std::uint64_t skip(std::uint64_t n) override {
    const std::uint64_t k = std::min<std::uint64_t>(n, data_.size() - pos_);
    pos_ += static_cast<std::size_t>(k);
    return k;
  }

 private:
  std::span<const std::byte> data_;
  std::size_t pos_ = 0;
};
}  // namespace

std::unique_ptr<StreamSource> memory_source(std::span<const std::byte> data) {
  return std::make_unique<MemorySource>(data);
}

bool is_pipe_shard(std::string_view name) noexcept { return name.substr(0, 5) == "pipe:"; }

bool is_compressed_shard(std::string_view name) noexcept {
  for (const std::string_view suffix :
       {".gz", ".tgz", ".zst", ".zstd", ".tzst", ".xz", ".txz", ".bz2", ".tbz2", ".lz4"}) {
    if (ends_with(name, suffix)) return true;
  }
  return false;
}

bool have_libarchive() noexcept { return STOKER_HAS_LIBARCHIVE != 0; }

std::unique_ptr<StreamSource> open_stream_source(const std::string& name, std::uint64_t offset,
                                                 std::string_view who, const RemoteSource* remote,
                                                 std::shared_ptr<CacheHold> held) {
  const bool compressed = is_compressed_shard(name);
  std::unique_ptr<StreamSource> source;
  if (net::is_remote(name)) {
    if (held == nullptr) {
      if (remote == nullptr) {
        throw Error(
            fmt::format("{}: shard {} is a URL, but this reader was made without remote "
                        "options; this is a bug in stoker",
                        who, name));
      }
      held = remote->acquire(name, Need::kNow, {}, compressed ? 0 : offset);
    } else if (!compressed) {
      held->want(offset);  // read ahead: its parts from `offset` on go first
    }
    source = remote_stream(std::move(held), compressed ? 0 : offset, who);
  } else if (is_pipe_shard(name)) {
    source = std::make_unique<PipeSource>(name, who);
    if (offset != 0 && source->skip(offset) != offset) {
      throw Error(fmt::format("{}: shard {} ended before byte {}", who, name, offset));
    }
  } else {
    source = std::make_unique<FileSource>(name, compressed ? 0 : offset, who);
  }
  if (!compressed) return source;
  if (is_gzip_name(name)) {
    // gzip through zlib's inflate, as every gzip stoker reads (TFRecord files, MDS shards,
    // MNIST): one decoder, and no libarchive needed for the most common compression.
    auto inflated = inflate_source(std::move(source), name);
    if (offset != 0 && inflated->skip(offset) != offset) {
      throw Error(fmt::format("{}: shard {} ended before byte {} of its decompressed data", who,
                              name, offset));
    }
    return inflated;
  }
#if STOKER_HAS_LIBARCHIVE
  auto archive = std::make_unique<ArchiveSource>(std::move(source), name, who);
  if (offset != 0 && archive->skip(offset) != offset) {
    throw Error(fmt::format("{}: shard {} ended before byte {} of its decompressed data", who, name,
                            offset));
  }
  return archive;
#else
  throw Error(fmt::format(
      "{}: shard {} is compressed, and this build of stoker has no libarchive to decompress it; "
      "install libarchive-dev (Debian) and rebuild stoker, or decompress the shard first",
      who, name));
#endif
}

}  // namespace stoker::detail
