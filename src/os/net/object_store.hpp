// ObjectStore: remote files as a source of bytes, over HttpClient. It turns a URL into requests
// (S3: the endpoint, path- or virtual-hosted addressing, a fresh SigV4 signature on every try;
// http(s): the URL as it is), sorts failures into those tried again and those that end at once,
// retries with exponential backoff and full jitter, re-reads the credentials when the server
// says they expired, and raises RemoteError with the URL, status, attempts and last cause.
//
//   stat(), get(), list(), put*(): blocking, either process, any thread.
//   fetch_range(): asynchronous; bytes [begin, end) of an object reach `sink` in order (on the
//     client's thread), resumed from the byte reached after a reset, a stall or a cut body;
//     then `done` once, with nullptr or the error. The cache's parallel parts are made of it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "os/net/aws_config.hpp"
#include "os/net/http_client.hpp"
#include "os/net/s3_xml.hpp"
#include "os/net/url.hpp"
#include "stoker/remote.hpp"

namespace stoker::detail::net {

// Counters a store adds to (relaxed atomics; they may live in memory shared by processes).
struct TransferCounters {
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> retries{0};
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

// What a failed try was, and what to do next.
struct Failure {
  enum class Kind : std::uint8_t { kNone, kRetry, kExpiredCredentials, kFatal };
  Kind kind = Kind::kNone;
  long status = 0;
  std::string code;   // S3's error code
  std::string cause;  // one line: "HTTP 503 SlowDown: Please reduce your request rate."
  std::chrono::milliseconds retry_after{0};  // a Retry-After header's wait
};
// A response sorted: 2xx is kNone; 5xx, 429, 408, S3's SlowDown / InternalError /
// RequestTimeout and transport failures (connect, reset, timeout, partial body) are kRetry;
// ExpiredToken and its kin are kExpiredCredentials; other 4xx and 3xx are kFatal.
Failure classify(const HttpResponse& response);

// The backoff before try `attempt` + 1 (attempt >= 1): a uniformly random time in
// [0, min(max, base x 2^(attempt - 1))], at least retry_after (capped at max).
std::chrono::milliseconds backoff_delay(const RetryOptions& retries, std::size_t attempt,
                                        std::chrono::milliseconds retry_after);

struct ObjectInfo {
  std::uint64_t size = 0;
  std::string etag;  // as the server sent it (quotes kept, for If-Match)
};

class ObjectStore {
 public:
  // Resolves the S3 settings (environment, ~/.aws files) once. Throws std::invalid_argument
  // for bad options (RemoteOptions::validate) or a bad endpoint / profile.
  explicit ObjectStore(RemoteOptions options, TransferCounters* counters = nullptr);
  // Cancels the fetches still running (their callbacks are not called).
  ~ObjectStore();
  ObjectStore(const ObjectStore&) = delete;
  ObjectStore& operator=(const ObjectStore&) = delete;

  const RemoteOptions& options() const noexcept { return options_; }
  // Where the credentials came from, the region and the endpoint, for messages.
  std::string describe_settings() const;

  // HEAD. Throws RemoteError.
  ObjectInfo stat(const std::string& url);
  // A whole object of at most `max_bytes` (index files, index.json). nullopt for 404 when
  // `missing_ok`; throws RemoteError otherwise, and for a larger object.
  std::optional<std::string> get(const std::string& url, std::uint64_t max_bytes,
                                 bool missing_ok = false, TransferCounters* counters = nullptr);
  // Every object under an s3:// prefix (ListObjectsV2, all pages), in key order, as s3:// URLs
  // with their sizes. Throws RemoteError; std::invalid_argument for a non-S3 URL.
  // `page_size` > 0 asks for pages of that many keys (max-keys; tests of the continuation).
  std::vector<std::pair<std::string, std::uint64_t>> list(const std::string& prefix_url,
                                                          std::size_t page_size = 0);
  // Writes a local file (S3: one PUT up to 2 x part_size, else a multipart upload; http(s):
  // one PUT). Throws RemoteError, or stoker::Error when the file cannot be read.
  void put_file(const std::string& local_path, const std::string& url);

  // False: the bytes could not be kept (a full disk); the fetch then fails with `why`.
  using RangeSink =
      std::function<bool(std::uint64_t offset, std::span<const std::byte>, std::string& why)>;
  using RangeDone = std::function<void(std::exception_ptr error)>;
  // Asynchronous ranged GET of [begin, end) with retries (see the top). `etag`, when known,
  // is sent as If-Match so a replaced object fails rather than mixing versions. Returns an id
  // for cancel_range().
  // `counters` (else the store's) get the bytes and requests.
  std::uint64_t fetch_range(const std::string& url, std::uint64_t begin, std::uint64_t end,
                            std::string etag, RangeSink sink, RangeDone done,
                            TransferCounters* counters = nullptr);
  // When it returns, the fetch's sink and done are not running and will not run.
  void cancel_range(std::uint64_t id);
  // Runs `task` on the client's thread soon (HttpClient::defer): how a range sink starts or
  // cancels fetches, which it may not do itself.
  static void defer(std::function<void()> task) { client().defer(std::move(task)); }
  // Runs `check` on the client's thread every few milliseconds while fetches run
  // (HttpClient::watch).
  static void watch(std::function<void()> check) { client().watch(std::move(check)); }

  // The request for one try at `url` (signed now, for S3). For tests and the bench's naive
  // clients.
  HttpRequest make_request(const std::string& url, std::string method,
                           std::vector<std::pair<std::string, std::string>> query = {},
                           HeaderList headers = {}, std::span<const std::byte> body = {},
                           std::string payload_sha256 = {});
  // The error raised after `attempts` tries whose last failure is `failure`.
  RemoteError make_error(std::string_view operation, const std::string& url, const Failure& failure,
                         std::size_t attempts) const;
  // Tests only: runs in fetch_range() once the first try has started and the fetch's lock is
  // released, before fetch_range() returns; a transfer can complete on the client's thread
  // meanwhile (a test widens that window with a sleep).
  void set_after_start_hook(std::function<void()> hook) { after_start_hook_ = std::move(hook); }

 private:
  struct RangeFetch;
  // One blocking request with the retry policy; returns the 2xx response or throws.
  HttpResponse perform(std::string_view operation, const std::string& url,
                       const std::function<HttpRequest()>& build, BodySink sink = {},
                       bool missing_ok = false, TransferCounters* counters = nullptr);
  // After kExpiredCredentials: true when re-reading them found others.
  bool refresh_credentials();
  void count_request(bool retry, TransferCounters* counters) noexcept;
  // With the fetch's lock held; returns the error when no request could be made.
  std::exception_ptr start_attempt(const std::shared_ptr<RangeFetch>& fetch,
                                   std::chrono::steady_clock::time_point not_before);
  void forget(std::uint64_t id);
  void finish_attempt(const std::shared_ptr<RangeFetch>& fetch, HttpResponse&& response);

  RemoteOptions options_;
  TransferCounters* counters_ = nullptr;
  // This process's client, looked up on each use: a store inherited by a fork()ed child must
  // not drive its parent's connections.
  static HttpClient& client() { return HttpClient::process(); }
  mutable std::mutex settings_mutex_;
  S3Settings settings_;
  std::mutex fetches_mutex_;
  std::uint64_t next_fetch_ = 1;
  std::vector<std::pair<std::uint64_t, std::shared_ptr<RangeFetch>>> fetches_;
  std::function<void()> after_start_hook_;
};

}  // namespace stoker::detail::net
