#include "os/net/object_store.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <ctime>
#include <random>
#include <stdexcept>
#include <thread>

#include <curl/curl.h>
#include <fmt/format.h>

#include "os/mapped_file.hpp"
#include "os/posix.hpp"

namespace stoker::detail::net {
namespace {

constexpr std::string_view kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

bool is_expired_code(std::string_view code) noexcept {
  return code == "ExpiredToken" || code == "ExpiredTokenException" ||
         code == "TokenRefreshRequired" || code == "RequestExpired";
}

bool is_retryable_code(std::string_view code) noexcept {
  return code == "SlowDown" || code == "InternalError" || code == "ServiceUnavailable" ||
         code == "RequestTimeout" || code == "Throttling" || code == "ThrottlingException" ||
         code == "RequestLimitExceeded" || code == "OperationAborted";
}

// The <title> of an HTML error page, when there is one.
std::string html_title(std::string_view body) {
  const std::size_t open = body.find("<title>");
  if (open == std::string_view::npos) return {};
  const std::size_t close = body.find("</title>", open);
  if (close == std::string_view::npos) return {};
  return std::string(body.substr(open + 7, std::min<std::size_t>(close - open - 7, 200)));
}

bool dns_label(std::string_view bucket) noexcept {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  for (const char c : bucket) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return bucket.front() != '-' && bucket.back() != '-';
}

std::string plural(std::size_t n, std::string_view word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

}  // namespace

Failure classify(const HttpResponse& response) {
  Failure f;
  f.status = response.status;
  if (!response.transport_ok()) {
    const auto code = static_cast<CURLcode>(response.curl_code);
    switch (code) {
      case CURLE_UNSUPPORTED_PROTOCOL:
      case CURLE_URL_MALFORMAT:
      case CURLE_PEER_FAILED_VERIFICATION:
      case CURLE_SSL_CACERT_BADFILE:
      case CURLE_SSL_CERTPROBLEM:
      case CURLE_FAILED_INIT:
        f.kind = Failure::Kind::kFatal;
        break;
      default:
        f.kind = Failure::Kind::kRetry;
    }
    std::string what;
    switch (code) {
      case CURLE_COULDNT_CONNECT:
        what = "could not connect";
        break;
      case CURLE_COULDNT_RESOLVE_HOST:
        what = "could not resolve the host";
        break;
      case CURLE_OPERATION_TIMEDOUT:
        what = "timed out (stalled)";
        break;
      case CURLE_PARTIAL_FILE:
        what = "the body was cut short";
        break;
      case CURLE_RECV_ERROR:
        what = "the connection was reset while receiving";
        break;
      case CURLE_SEND_ERROR:
        what = "the connection was reset while sending";
        break;
      case CURLE_GOT_NOTHING:
        what = "the server closed the connection without an answer";
        break;
      case CURLE_PEER_FAILED_VERIFICATION:
        what =
            "the server's TLS certificate was not trusted (set RemoteOptions::ca_file or "
            "AWS_CA_BUNDLE)";
        break;
      default:
        what = "the transfer failed";
        break;
    }
    f.cause = fmt::format("{} (curl: {})", what, response.curl_message);
    return f;
  }
  if (response.status >= 200 && response.status < 300) return f;

  std::string message;
  if (const auto body = parse_error_body(response.error_body)) {
    f.code = body->code;
    message = body->message;
  } else {
    message = html_title(response.error_body);
  }
  if (const std::string* after = response.header("retry-after")) {
    unsigned seconds = 0;
    const auto [ptr, ec] = std::from_chars(after->data(), after->data() + after->size(), seconds);
    if (ec == std::errc()) f.retry_after = std::chrono::seconds(std::min(seconds, 3600u));
  }
  const std::string_view reason = reason_phrase(response.status);
  f.cause = fmt::format("HTTP {}{}{}{}{}", response.status, f.code.empty() ? "" : " ", f.code,
                        message.empty() ? (reason.empty() ? "" : " ") : ": ",
                        message.empty() ? std::string(reason) : message);
  if (is_expired_code(f.code)) {
    f.kind = Failure::Kind::kExpiredCredentials;
  } else if (response.status >= 500 || response.status == 429 || response.status == 408 ||
             is_retryable_code(f.code)) {
    f.kind = Failure::Kind::kRetry;
  } else {
    f.kind = Failure::Kind::kFatal;
    if (response.status >= 300 && response.status < 400) {
      if (const std::string* location = response.header("location")) {
        f.cause += fmt::format(" (redirected to {})", *location);
      } else if (const std::string* region = response.header("x-amz-bucket-region")) {
        f.cause += fmt::format(" (the bucket is in {})", *region);
      }
    }
  }
  return f;
}

std::chrono::milliseconds backoff_delay(const RetryOptions& retries, std::size_t attempt,
                                        std::chrono::milliseconds retry_after) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const std::int64_t cap = retries.max_backoff.count();
  const std::size_t shift = std::min<std::size_t>(attempt > 0 ? attempt - 1 : 0, 30);
  const std::int64_t ceiling =
      std::min<std::int64_t>(cap, retries.backoff.count() * (std::int64_t{1} << shift));
  std::uniform_int_distribution<std::int64_t> pick(0, std::max<std::int64_t>(0, ceiling));
  const std::int64_t wait = std::max<std::int64_t>(pick(rng), std::min(cap, retry_after.count()));
  return std::chrono::milliseconds(wait);
}

// ---------------------------------------------------------------------------------------------

struct ObjectStore::RangeFetch {
  std::uint64_t id = 0;
  std::string url;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::string etag;
  RangeSink sink;
  RangeDone done;
  // The client's thread only (sink and completion): where the bytes have reached, and the
  // current try's view of its response.
  std::uint64_t next = 0;
  std::uint64_t skip = 0;
  bool head_checked = false;
  std::string head_error;
  std::size_t attempts = 0;
  bool refreshed = false;
  TransferCounters* counters = nullptr;
  // Under `mutex`: the current transfer, and whether cancel_range() ended the fetch.
  std::mutex mutex;
  std::uint64_t transfer = 0;
  bool cancelled = false;
  bool finished = false;
};

ObjectStore::ObjectStore(RemoteOptions options, TransferCounters* counters)
    : options_(std::move(options)), counters_(counters) {
  options_.validate();
  settings_ = resolve_s3_settings(options_);
}

std::string ObjectStore::describe_settings() const {
  std::lock_guard lock(settings_mutex_);
  return fmt::format("credentials from {}, region {}, endpoint {}", settings_.credentials_source,
                     settings_.region,
                     settings_.endpoint.empty() ? std::string("AWS") : settings_.endpoint);
}

void ObjectStore::count_request(bool retry, TransferCounters* counters) noexcept {
  if (counters == nullptr) counters = counters_;
  if (counters == nullptr) return;
  counters->requests.fetch_add(1, std::memory_order_relaxed);
  if (retry) counters->retries.fetch_add(1, std::memory_order_relaxed);
}

bool ObjectStore::refresh_credentials() {
  S3Settings fresh = resolve_s3_settings(options_);
  std::lock_guard lock(settings_mutex_);
  const bool changed =
      fresh.credentials.access_key_id != settings_.credentials.access_key_id ||
      fresh.credentials.secret_access_key != settings_.credentials.secret_access_key ||
      fresh.credentials.session_token != settings_.credentials.session_token;
  settings_ = std::move(fresh);
  return changed;
}

HttpRequest ObjectStore::make_request(const std::string& url_text, std::string method,
                                      std::vector<std::pair<std::string, std::string>> query,
                                      HeaderList headers, std::span<const std::byte> body,
                                      std::string payload_sha256) {
  const Url url = parse_url(url_text);
  HttpRequest r;
  r.method = std::move(method);
  r.body = body;
  r.connect_timeout = options_.timeouts.connect;
  r.low_speed_time = options_.timeouts.low_speed_time;
  r.low_speed_bytes = options_.timeouts.low_speed_bytes;
  if (url.scheme == Scheme::kHttp || url.scheme == Scheme::kHttps) {
    r.url = url_text;
    if (!query.empty()) {
      r.url += url.query.empty() ? '?' : '&';
      r.url += canonical_query(query);
    }
    r.headers = std::move(headers);
    std::lock_guard lock(settings_mutex_);
    r.ca_file = settings_.ca_file;
    return r;
  }
  if (url.scheme != Scheme::kS3) {
    throw std::invalid_argument(fmt::format("remote: '{}' is not a remote URL", url_text));
  }
  S3Settings s;
  {
    std::lock_guard lock(settings_mutex_);
    s = settings_;
  }
  r.ca_file = s.ca_file;
  const std::string& bucket = url.host;
  const std::string key_path = uri_encode(url.key(), true);
  std::string scheme = "https";
  std::string host;
  std::uint16_t port = 0;
  if (!s.endpoint.empty()) {
    const Url endpoint = parse_url(s.endpoint);
    scheme = endpoint.scheme == Scheme::kHttps ? "https" : "http";
    host = endpoint.host.find(':') != std::string::npos ? "[" + endpoint.host + "]" : endpoint.host;
    port = endpoint.port;
  } else {
    host = fmt::format("s3.{}.amazonaws.com", s.region);
  }
  bool virtual_style = false;
  switch (s.addressing) {
    case AddressingStyle::kPath:
      virtual_style = false;
      break;
    case AddressingStyle::kVirtual:
      if (!dns_label(bucket)) {
        throw std::invalid_argument(fmt::format(
            "RemoteOptions::addressing: the bucket '{}' is not a DNS label, so it cannot be "
            "addressed virtual-hosted; use AddressingStyle::kPath",
            bucket));
      }
      virtual_style = true;
      break;
    case AddressingStyle::kDefault:
      virtual_style = s.endpoint.empty() && dns_label(bucket);
      break;
  }
  std::string path;
  if (virtual_style) {
    host = bucket + "." + host;
    path = "/" + key_path;
  } else {
    path = "/" + uri_encode(bucket, false);
    if (!url.key().empty()) path += "/" + key_path;
  }
  const bool default_port =
      port == 0 || (scheme == "https" && port == 443) || (scheme == "http" && port == 80);
  const std::string host_header = default_port ? host : fmt::format("{}:{}", host, port);
  r.url = fmt::format("{}://{}{}", scheme, host_header, path);
  const std::string canonical = canonical_query(query);
  if (!canonical.empty()) r.url += "?" + canonical;
  if (payload_sha256.empty()) {
    payload_sha256 = body.empty() ? std::string(kEmptySha256) : sha256_hex(body);
  }
  if (s.credentials.empty()) {
    r.headers = std::move(headers);
    return r;
  }
  SigningInput in;
  in.method = r.method;
  in.host = host_header;
  in.path = path;
  in.query = std::move(query);
  in.headers = headers;
  in.payload_sha256 = payload_sha256;
  in.region = s.region;
  in.time = std::time(nullptr);
  SignedRequest signed_request = sign_v4(in, s.credentials);
  r.headers = std::move(headers);
  for (auto& h : signed_request.headers) r.headers.push_back(std::move(h));
  return r;
}

RemoteError ObjectStore::make_error(std::string_view operation, const std::string& url,
                                    const Failure& failure, std::size_t attempts) const {
  RemoteError::Details d;
  d.url = url;
  d.status = failure.status;
  d.attempts = attempts;
  d.cause = failure.cause;
  d.server_code = failure.code;
  d.retryable = failure.kind == Failure::Kind::kRetry;
  std::string what;
  std::string todo;
  const std::string& code = failure.code;
  if (failure.kind == Failure::Kind::kRetry) {
    what = fmt::format("gave up after {} (last: {})", plural(attempts, "attempt"), failure.cause);
    todo =
        "the server is unreachable or overloaded: check it, or raise "
        "RemoteOptions::retries.attempts / retries.backoff";
  } else if (failure.kind == Failure::Kind::kExpiredCredentials) {
    what =
        fmt::format("the credentials expired ({}, {})", failure.cause, plural(attempts, "attempt"));
    todo = fmt::format(
        "refresh them where they were found ({}); stoker re-reads them when the "
        "server says they expired",
        describe_settings());
  } else {
    what = fmt::format("{} ({}, {})",
                       code == "NoSuchBucket"                         ? "no such bucket"
                       : code == "NoSuchKey" || failure.status == 404 ? "no such object"
                       : code == "InvalidAccessKeyId"    ? "the server does not know the access key"
                       : code == "SignatureDoesNotMatch" ? "the server refused the signature"
                       : failure.status == 403           ? "access denied"
                       : failure.status == 401           ? "authentication required"
                       : failure.status == 0             ? "the request failed"
                                                         : "the server refused the request",
                       failure.cause, plural(attempts, "attempt"));
    if (code == "NoSuchBucket") {
      todo = fmt::format("check the bucket name and the endpoint ({})", describe_settings());
    } else if (code == "NoSuchKey" || failure.status == 404) {
      todo = "check the URL (list_shards() lists what a prefix holds)";
    } else if (failure.status == 403 || failure.status == 401 || code == "InvalidAccessKeyId" ||
               code == "SignatureDoesNotMatch") {
      todo = fmt::format("check the credentials and the bucket's policy ({})", describe_settings());
    } else if (failure.status >= 300 && failure.status < 400) {
      todo = "set RemoteOptions::region (or AWS_REGION) to the bucket's region, or the endpoint";
    } else {
      todo = "check the URL and the server";
    }
  }
  return RemoteError(fmt::format("remote: {} {}: {}; {}", operation, url, what, todo),
                     std::move(d));
}

HttpResponse ObjectStore::perform(std::string_view operation, const std::string& url,
                                  const std::function<HttpRequest()>& build, BodySink sink,
                                  bool missing_ok, TransferCounters* counters) {
  bool refreshed = false;
  for (std::size_t attempt = 1;; ++attempt) {
    HttpRequest request = build();
    count_request(attempt > 1, counters);
    HttpResponse response = client().perform(std::move(request), sink);
    const Failure f = classify(response);
    if (f.kind == Failure::Kind::kNone) return response;
    if (missing_ok && response.status == 404 && f.code != "NoSuchBucket") return response;
    if (f.kind == Failure::Kind::kExpiredCredentials && !refreshed) {
      refreshed = true;
      if (refresh_credentials()) continue;
    }
    if (f.kind != Failure::Kind::kRetry || attempt >= options_.retries.attempts) {
      throw make_error(operation, url, f, attempt);
    }
    std::this_thread::sleep_for(backoff_delay(options_.retries, attempt, f.retry_after));
  }
}

ObjectInfo ObjectStore::stat(const std::string& url) {
  const HttpResponse response = perform("HEAD", url, [&] { return make_request(url, "HEAD"); });
  ObjectInfo info;
  const std::string* length = response.header("content-length");
  if (length == nullptr ||
      std::from_chars(length->data(), length->data() + length->size(), info.size).ec !=
          std::errc()) {
    Failure f;
    f.status = response.status;
    f.kind = Failure::Kind::kFatal;
    f.cause = "the answer to HEAD has no Content-Length";
    throw make_error("HEAD", url, f, 1);
  }
  if (const std::string* etag = response.header("etag")) info.etag = *etag;
  return info;
}

std::optional<std::string> ObjectStore::get(const std::string& url, std::uint64_t max_bytes,
                                            bool missing_ok, TransferCounters* counters) {
  if (counters == nullptr) counters = counters_;
  std::string body;
  bool too_large = false;
  const HttpResponse response = perform(
      "GET", url,
      [&] {
        body.clear();
        return make_request(url, "GET");
      },
      [&](std::span<const std::byte> bytes, const HttpResponse&) {
        if (body.size() + bytes.size() > max_bytes) {
          too_large = true;
          return false;
        }
        body.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        if (counters != nullptr) counters->bytes.fetch_add(bytes.size(), std::memory_order_relaxed);
        return true;
      },
      missing_ok, counters);
  if (response.status == 404) return std::nullopt;
  if (too_large) {
    Failure f;
    f.status = response.status;
    f.kind = Failure::Kind::kFatal;
    f.cause = fmt::format("it is larger than the {} bytes expected of it", max_bytes);
    throw make_error("GET", url, f, 1);
  }
  return body;
}

std::vector<std::pair<std::string, std::uint64_t>> ObjectStore::list(const std::string& prefix_url,
                                                                     std::size_t page_size) {
  const Url url = parse_url(prefix_url);
  if (url.scheme != Scheme::kS3) {
    throw std::invalid_argument(fmt::format(
        "list_shards: '{}' cannot be listed: only s3:// prefixes can (HTTP has no listing); name "
        "the shards with a brace range instead (train-{{000..099}}.tar)",
        prefix_url));
  }
  const std::string bucket_url = fmt::format("s3://{}", url.host);
  const std::string prefix(url.key());
  std::vector<std::pair<std::string, std::uint64_t>> out;
  std::string token;
  for (;;) {
    std::string body;
    perform(
        "ListObjectsV2", prefix_url,
        [&] {
          body.clear();
          std::vector<std::pair<std::string, std::string>> query = {{"list-type", "2"},
                                                                    {"prefix", prefix}};
          if (!token.empty()) query.emplace_back("continuation-token", token);
          if (page_size > 0) query.emplace_back("max-keys", std::to_string(page_size));
          return make_request(bucket_url, "GET", std::move(query));
        },
        [&](std::span<const std::byte> bytes, const HttpResponse&) {
          if (body.size() + bytes.size() > (std::size_t{64} << 20)) return false;
          body.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          return true;
        });
    ListPage page;
    try {
      page = parse_list_page(body);
    } catch (const Error& e) {
      Failure f;
      f.status = 200;
      f.kind = Failure::Kind::kFatal;
      f.cause = e.what();
      throw make_error("ListObjectsV2", prefix_url, f, 1);
    }
    for (ListedObject& o : page.objects) {
      out.emplace_back(fmt::format("s3://{}/{}", url.host, o.key), o.size);
    }
    if (!page.truncated) break;
    if (page.next_token == token) {
      Failure f;
      f.status = 200;
      f.kind = Failure::Kind::kFatal;
      f.cause = "the server returned the same continuation token twice";
      throw make_error("ListObjectsV2", prefix_url, f, 1);
    }
    token = page.next_token;
  }
  std::sort(out.begin(), out.end());
  return out;
}

void ObjectStore::put_file(const std::string& local_path, const std::string& url_text) {
  const Url url = parse_url(url_text);
  if (url.scheme == Scheme::kS3 && url.key().empty()) {
    throw std::invalid_argument(
        fmt::format("upload_file: '{}' names a bucket, not an object; add the key", url_text));
  }
  struct ::stat st {};
  if (!posix::stat_path(local_path.c_str(), st)) {
    throw Error(
        posix::errno_message(fmt::format("upload_file: cannot stat {}", local_path), errno));
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  std::shared_ptr<const MappedFile> file;
  std::span<const std::byte> all;
  if (size > 0) {
    file = MappedFile::open(local_path, "upload_file");
    all = file->bytes();
  }
  if (url.scheme != Scheme::kS3 || size <= 2 * options_.part_size) {
    const std::string hash = url.scheme == Scheme::kS3 ? sha256_hex(all) : std::string();
    perform("PUT", url_text, [&] { return make_request(url_text, "PUT", {}, {}, all, hash); });
    return;
  }
  // Multipart: create, upload the parts, complete (abort on any failure).
  std::string created;
  perform(
      "CreateMultipartUpload", url_text,
      [&] {
        created.clear();
        return make_request(url_text, "POST", {{"uploads", ""}});
      },
      [&](std::span<const std::byte> bytes, const HttpResponse&) {
        created.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        return created.size() < (1 << 20);
      });
  const std::string upload_id = parse_upload_id(created);
  try {
    std::string complete = "<CompleteMultipartUpload>";
    std::size_t number = 1;
    for (std::uint64_t offset = 0; offset < size; offset += options_.part_size, ++number) {
      const std::span<const std::byte> part =
          all.subspan(offset, std::min<std::uint64_t>(options_.part_size, size - offset));
      const std::string hash = sha256_hex(part);
      const std::vector<std::pair<std::string, std::string>> query = {
          {"partNumber", std::to_string(number)}, {"uploadId", upload_id}};
      const HttpResponse response = perform("UploadPart", url_text, [&] {
        return make_request(url_text, "PUT", query, {}, part, hash);
      });
      const std::string* etag = response.header("etag");
      if (etag == nullptr) {
        Failure f;
        f.status = response.status;
        f.kind = Failure::Kind::kFatal;
        f.cause = fmt::format("the answer to part {} has no ETag", number);
        throw make_error("UploadPart", url_text, f, 1);
      }
      complete +=
          fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", number, *etag);
    }
    complete += "</CompleteMultipartUpload>";
    const auto body = std::as_bytes(std::span(complete.data(), complete.size()));
    std::string answer;
    const HttpResponse done = perform(
        "CompleteMultipartUpload", url_text,
        [&] {
          answer.clear();
          return make_request(url_text, "POST", {{"uploadId", upload_id}}, {}, body);
        },
        [&](std::span<const std::byte> bytes, const HttpResponse&) {
          answer.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          return answer.size() < (1 << 20);
        });
    // S3 can answer 200 and put an <Error> in the body.
    if (const auto error = parse_error_body(answer)) {
      Failure f;
      f.status = done.status;
      f.code = error->code;
      f.kind = Failure::Kind::kFatal;
      f.cause = fmt::format("HTTP {} {}: {}", done.status, error->code, error->message);
      throw make_error("CompleteMultipartUpload", url_text, f, 1);
    }
  } catch (...) {
    try {
      perform("AbortMultipartUpload", url_text, [&] {
        return make_request(url_text, "DELETE", {{"uploadId", upload_id}});
      });
    } catch (...) {
      // The upload's own error is the one to report.
    }
    throw;
  }
}

// ---------------------------------------------------------------------------------------------
// Ranged fetches

std::uint64_t ObjectStore::fetch_range(const std::string& url, std::uint64_t begin,
                                       std::uint64_t end, std::string etag, RangeSink sink,
                                       RangeDone done, TransferCounters* counters) {
  auto fetch = std::make_shared<RangeFetch>();
  fetch->counters = counters != nullptr ? counters : counters_;
  fetch->url = url;
  fetch->begin = begin;
  fetch->end = end;
  fetch->next = begin;
  fetch->etag = std::move(etag);
  fetch->sink = std::move(sink);
  fetch->done = std::move(done);
  {
    std::lock_guard lock(fetches_mutex_);
    fetch->id = next_fetch_++;
    fetches_.emplace_back(fetch->id, fetch);
  }
  std::exception_ptr error;
  bool ended_here = false;
  {
    std::lock_guard lock(fetch->mutex);
    if (begin >= end) {
      fetch->finished = true;
    } else {
      error = start_attempt(fetch, {});
    }
    // Read under the lock: once it is released, a transfer that started can complete on the
    // client's thread, and finish_attempt() then sets `finished` and calls `done` itself.
    ended_here = fetch->finished;
  }
  if (after_start_hook_) after_start_hook_();
  if (ended_here) {
    forget(fetch->id);
    fetch->done(error);
  }
  return fetch->id;
}

void ObjectStore::forget(std::uint64_t id) {
  std::lock_guard lock(fetches_mutex_);
  std::erase_if(fetches_, [&](const auto& item) { return item.first == id; });
}

ObjectStore::~ObjectStore() {
  std::vector<std::uint64_t> ids;
  {
    std::lock_guard lock(fetches_mutex_);
    for (const auto& item : fetches_) ids.push_back(item.first);
  }
  for (const std::uint64_t id : ids) cancel_range(id);
}

std::exception_ptr ObjectStore::start_attempt(const std::shared_ptr<RangeFetch>& fetch,
                                              std::chrono::steady_clock::time_point not_before) {
  ++fetch->attempts;
  count_request(fetch->attempts > 1, fetch->counters);
  fetch->head_checked = false;
  fetch->head_error.clear();
  fetch->skip = 0;
  HeaderList headers = {{"Range", fmt::format("bytes={}-{}", fetch->next, fetch->end - 1)}};
  if (!fetch->etag.empty()) headers.emplace_back("If-Match", fetch->etag);
  HttpRequest request;
  try {
    request = make_request(fetch->url, "GET", {}, std::move(headers));
  } catch (...) {
    fetch->finished = true;
    return std::current_exception();
  }
  RangeFetch* raw = fetch.get();
  fetch->transfer = client().start(
      std::move(request),
      [this, raw](std::span<const std::byte> bytes, const HttpResponse& head) {
        RangeFetch& f = *raw;
        if (!f.head_checked) {
          f.head_checked = true;
          if (head.status == 206) {
            // "bytes a-b/total": the range must start where it was asked to.
            const std::string* range = head.header("content-range");
            std::uint64_t first = 0;
            if (range == nullptr || range->rfind("bytes ", 0) != 0 ||
                std::from_chars(range->data() + 6, range->data() + range->size(), first).ec !=
                    std::errc() ||
                first != f.next) {
              f.head_error = fmt::format(
                  "the server answered the range bytes={}-{} with '{}'", f.next, f.end - 1,
                  range == nullptr ? std::string("no Content-Range") : *range);
              return false;
            }
          } else {
            f.skip = f.next;  // 200: the whole object; what comes before the range is dropped
          }
        }
        std::size_t offset = 0;
        if (f.skip > 0) {
          const auto dropped =
              static_cast<std::size_t>(std::min<std::uint64_t>(f.skip, bytes.size()));
          f.skip -= dropped;
          offset = dropped;
        }
        const auto useful = static_cast<std::size_t>(
            std::min<std::uint64_t>(bytes.size() - offset, f.end - f.next));
        if (useful > 0) {
          std::string why;
          if (!f.sink(f.next, bytes.subspan(offset, useful), why)) {
            f.head_error = std::move(why);
            return false;
          }
          f.next += useful;
          if (f.counters != nullptr) f.counters->bytes.fetch_add(useful, std::memory_order_relaxed);
        }
        // Bytes past the range (a 200's rest of the object) end the transfer there. A body
        // that ends with the range ends it by itself: stopping it at its last byte instead
        // would make libcurl close the connection, and the next part open a new one.
        return offset + useful == bytes.size();
      },
      [this, fetch](HttpResponse&& response) { finish_attempt(fetch, std::move(response)); },
      not_before);
  return nullptr;
}

void ObjectStore::finish_attempt(const std::shared_ptr<RangeFetch>& fetch,
                                 HttpResponse&& response) {
  std::unique_lock lock(fetch->mutex);
  if (fetch->cancelled || fetch->finished) return;
  Failure f = classify(response);
  if (!fetch->head_error.empty()) {
    f.kind = Failure::Kind::kFatal;
    f.cause = fetch->head_error;
  } else if (f.kind == Failure::Kind::kNone && fetch->next < fetch->end) {
    f.kind = Failure::Kind::kRetry;
    f.cause =
        fmt::format("the body ended at byte {} of [{}, {})", fetch->next, fetch->begin, fetch->end);
  }
  std::exception_ptr error;
  if (f.kind == Failure::Kind::kNone) {
    fetch->finished = true;
  } else {
    bool again = f.kind == Failure::Kind::kRetry && fetch->attempts < options_.retries.attempts;
    auto when = std::chrono::steady_clock::now() +
                backoff_delay(options_.retries, fetch->attempts, f.retry_after);
    if (f.kind == Failure::Kind::kExpiredCredentials && !fetch->refreshed) {
      fetch->refreshed = true;
      try {
        again = refresh_credentials();
      } catch (...) {
        again = false;
      }
      when = {};
    }
    if (again) {
      error = start_attempt(fetch, when);
      if (!fetch->finished) return;
    } else {
      fetch->finished = true;
      error = std::make_exception_ptr(make_error("GET", fetch->url, f, fetch->attempts));
    }
  }
  lock.unlock();
  forget(fetch->id);
  fetch->done(error);
}

void ObjectStore::cancel_range(std::uint64_t id) {
  std::shared_ptr<RangeFetch> fetch;
  {
    std::lock_guard lock(fetches_mutex_);
    for (auto& [fid, f] : fetches_) {
      if (fid == id) fetch = f;
    }
    std::erase_if(fetches_, [&](const auto& item) { return item.first == id; });
  }
  if (fetch == nullptr) return;
  std::uint64_t transfer = 0;
  {
    std::lock_guard lock(fetch->mutex);
    fetch->cancelled = true;
    transfer = fetch->transfer;
  }
  client().cancel(transfer);
}

}  // namespace stoker::detail::net
