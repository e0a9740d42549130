// HttpClient: the one door through which network bytes enter stoker. One client per process,
// on libcurl's multi interface: every transfer of the process shares its connection cache
// (keep-alive, TLS sessions), and one thread of the client drives them all. The thread exists
// only while transfers are pending (it ends when the last one finishes, so an idle main process
// forks workers with one thread) and is stopped around fork() (pthread_atfork): the parent's
// thread resumes, a child starts a client of its own on first use and never touches the
// parent's connections.
//
// Who calls what: start(), cancel() and perform() from any thread (not from a sink). A sink runs
// on the client's thread with the client's lock held: it must be quick (a pwrite, a counter)
// and must not call the client but for defer(), which runs a task after the sinks' round. A
// completion (and a deferred task) runs on the client's thread without the lock and may
// start() again (a retry).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "os/net/sigv4.hpp"

namespace stoker::detail::net {

struct ForkGuard;

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD, PUT, POST, DELETE
  std::string url;
  HeaderList headers;
  // PUT and POST: the body, kept alive by the caller until the completion has run.
  std::span<const std::byte> body;
  std::string ca_file;  // empty: the system's certificate authorities
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds low_speed_time{15000};
  std::uint64_t low_speed_bytes = 1024;
};

struct HttpResponse {
  int curl_code = 0;             // CURLE_OK, or what failed (connect, reset, timeout, partial body)
  std::string curl_message;      // curl's description of curl_code
  long status = 0;               // 0 when no response came
  HeaderList headers;            // of the final response, names in lower case
  std::string error_body;        // a non-2xx response's body (its first 64 KiB)
  std::uint64_t body_bytes = 0;  // a 2xx body's bytes given to the sink
  bool sink_stopped = false;     // the sink returned false (the transfer was ended, not failed)
  bool cancelled = false;

  bool transport_ok() const noexcept { return curl_code == 0 || sink_stopped; }
  bool ok() const noexcept { return transport_ok() && status >= 200 && status < 300; }
  // The value of a response header (name in lower case); nullptr when absent.
  const std::string* header(std::string_view name) const noexcept;
};

// The body bytes of a 2xx response, in order; false ends the transfer. `head` holds the
// response's status and headers (its other fields are not filled yet).
using BodySink = std::function<bool(std::span<const std::byte> bytes, const HttpResponse& head)>;
using Completion = std::function<void(HttpResponse&&)>;

class HttpClient {
 public:
  // This process's client. Either process; never throws but std::bad_alloc (a libcurl that
  // cannot start makes each transfer fail with its message).
  static HttpClient& process();

  // Queues a transfer; it starts at `not_before` (a retry's backoff) or at once. `done` is called
  // exactly once unless cancel() removes the transfer first. Returns its id (never 0).
  std::uint64_t start(HttpRequest request, BodySink sink, Completion done,
                      std::chrono::steady_clock::time_point not_before = {});
  // Removes a transfer; when cancel() returns, its sink and completion are not running and will
  // not run (called from a completion on the client's thread, it does not wait for that
  // completion itself). Unknown or finished ids are ignored.
  void cancel(std::uint64_t id);
  // Runs `task` on the client's thread, without the lock, soon: from a sink, once the current
  // round of sinks has ended (what a sink that must start or cancel a transfer calls); from
  // any other thread, at the thread's next turn.
  void defer(std::function<void()> task);
  // Runs `check` on the client's thread, without the lock, every few milliseconds while
  // transfers are active, for the life of this process's client: what no sink sees between
  // bytes (a reader in another process asking for a part before any byte has come). It may
  // start or cancel transfers.
  void watch(std::function<void()> check);
  // start() and wait for the completion. Blocks (curl's timeouts bound it).
  HttpResponse perform(HttpRequest request, BodySink sink = {});

  // Transfers queued or running now (tests).
  std::size_t pending_approx() const;
  // Whether the client's thread is running (tests: it ends when idle).
  bool thread_running_approx() const;
  // Tests: waits (up to `limit`) until no transfer is pending, then closes every cached
  // connection, so a test can check it leaves no descriptor open. False when still busy.
  bool close_idle_connections(std::chrono::milliseconds limit);

  struct Impl;
  friend struct ForkGuard;
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

 private:
  HttpClient();
  ~HttpClient();
  std::unique_ptr<Impl> impl_;
};

// The HTTP reason phrase of a status ("Service Unavailable"); "" for unknown ones.
std::string_view reason_phrase(long status) noexcept;

}  // namespace stoker::detail::net
