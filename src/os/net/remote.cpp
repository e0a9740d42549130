// The os-layer functions of include/stoker/remote.hpp: is_remote_url() and upload_file().
#include <cerrno>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "os/net/object_store.hpp"
#include "os/net/url.hpp"
#include "os/posix.hpp"
#include "stoker/remote.hpp"

namespace stoker {

bool is_remote_url(std::string_view name) noexcept { return detail::net::is_remote(name); }

void RemoteOptions::validate() const {
  if (part_size < (std::uint64_t{64} << 10)) {
    throw std::invalid_argument(fmt::format(
        "RemoteOptions::part_size: {} bytes is below the smallest part, 64 KiB; use at least "
        "65536 (the default is 16 MiB)",
        part_size));
  }
  if (parts_in_flight == 0) {
    throw std::invalid_argument(
        "RemoteOptions::parts_in_flight: 0 would never download anything; use at least 1 (the "
        "default is 8)");
  }
  if (retries.attempts == 0) {
    throw std::invalid_argument(
        "RemoteOptions::retries.attempts: 0 would send no request; use at least 1 (the default "
        "is 6)");
  }
  if (timeouts.connect.count() <= 0 || timeouts.low_speed_time.count() <= 0 ||
      timeouts.cache_room.count() < 0) {
    throw std::invalid_argument(fmt::format(
        "RemoteOptions::timeouts: connect ({} ms) and low_speed_time ({} ms) must be positive, "
        "cache_room ({} ms) not negative",
        timeouts.connect.count(), timeouts.low_speed_time.count(), timeouts.cache_room.count()));
  }
  if (retries.backoff.count() < 0 || retries.max_backoff.count() < 0) {
    throw std::invalid_argument(
        "RemoteOptions::retries: backoff and max_backoff must not be "
        "negative");
  }
}

void upload_file(const std::string& local_path, const std::string& url,
                 const RemoteOptions& options) {
  const detail::net::Url parsed = detail::net::parse_url(url);
  if (parsed.remote()) {
    detail::net::ObjectStore store(options);
    store.put_file(local_path, url);
    return;
  }
  // A local destination: copy the bytes.
  namespace posix = detail::posix;
  posix::Fd in(posix::open_read(local_path.c_str()));
  if (!in.valid()) {
    throw Error(
        posix::errno_message(fmt::format("upload_file: cannot open {}", local_path), errno));
  }
  posix::Fd out(posix::create_file(parsed.path.c_str(), false));
  if (!out.valid()) {
    throw Error(posix::errno_message(
        fmt::format("upload_file: cannot create {}; check that its directory exists", parsed.path),
        errno));
  }
  std::vector<std::byte> buffer(std::size_t{1} << 20);
  for (;;) {
    const ssize_t n = posix::read_full(in.get(), buffer.data(), buffer.size());
    if (n < 0) {
      throw Error(
          posix::errno_message(fmt::format("upload_file: cannot read {}", local_path), errno));
    }
    if (n == 0) break;
    if (posix::write_all(out.get(), buffer.data(), static_cast<std::size_t>(n)) != 0) {
      throw Error(
          posix::errno_message(fmt::format("upload_file: cannot write {}", parsed.path), errno));
    }
  }
}

}  // namespace stoker
