#include "os/net/http_client.hpp"

#include <curl/curl.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "os/posix.hpp"

namespace stoker::detail::net {
namespace {

constexpr std::size_t kMaxErrorBody = 64 * 1024;
constexpr long kReceiveBuffer = 256 * 1024;  // CURLOPT_BUFFERSIZE: fewer, larger sink calls
constexpr long kMaxIdleWaitMs = 1000;
// How often watch()'s checks run while transfers are active.
constexpr auto kWatchEvery = std::chrono::milliseconds(2);

struct Transfer {
  std::uint64_t id = 0;
  HttpRequest request;
  BodySink sink;
  Completion done;
  std::chrono::steady_clock::time_point not_before;
  CURL* easy = nullptr;
  curl_slist* header_list = nullptr;
  std::size_t upload_offset = 0;
  HttpResponse response;
  bool status_known = false;
  bool success_status = false;
  bool cancelled = false;
  char error[CURL_ERROR_SIZE] = {};
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.remove_suffix(1);
  return s;
}

std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string_view line(data, size * count);
  if (line.substr(0, 5) == "HTTP/") {
    t->response.headers.clear();  // a new response: 100 Continue came first, or a redirect
    t->status_known = false;
    return size * count;
  }
  const std::size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    t->response.headers.emplace_back(lower(trim(line.substr(0, colon))),
                                     std::string(trim(line.substr(colon + 1))));
  }
  return size * count;
}

std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t n = size * count;
  if (!t->status_known) {
    long status = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
    t->response.status = status;
    t->status_known = true;
    t->success_status = status >= 200 && status < 300;
  }
  if (!t->success_status) {
    const std::size_t room = kMaxErrorBody - std::min(kMaxErrorBody, t->response.error_body.size());
    t->response.error_body.append(data, std::min(room, n));
    return n;
  }
  if (t->sink) {
    if (!t->sink(std::span(reinterpret_cast<const std::byte*>(data), n), t->response)) {
      t->response.sink_stopped = true;
      return CURL_WRITEFUNC_ERROR;
    }
  }
  t->response.body_bytes += n;
  return n;
}

std::size_t on_upload(char* buffer, std::size_t size, std::size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::span<const std::byte> body = t->request.body;
  const std::size_t n = std::min(size * count, body.size() - t->upload_offset);
  std::memcpy(buffer, body.data() + t->upload_offset, n);
  t->upload_offset += n;
  return n;
}

int on_seek(void* user, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(user);
  if (origin != SEEK_SET || offset < 0 ||
      static_cast<std::size_t>(offset) > t->request.body.size()) {
    return CURL_SEEKFUNC_CANTSEEK;
  }
  t->upload_offset = static_cast<std::size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

std::once_flag g_curl_init;
CURLcode g_curl_init_code = CURLE_OK;

}  // namespace

const std::string* HttpResponse::header(std::string_view name) const noexcept {
  for (const auto& [key, value] : headers) {
    if (key == name) return &value;
  }
  return nullptr;
}

struct HttpClient::Impl {
  mutable std::mutex mutex;
  std::condition_variable changed;  // a cancelled transfer left, or a completion finished
  CURLM* multi = nullptr;
  pid_t owner = 0;  // the process this client serves
  std::map<std::uint64_t, std::unique_ptr<Transfer>> pending;
  std::map<std::uint64_t, std::unique_ptr<Transfer>> active;
  std::vector<CURL*> idle_handles;
  std::uint64_t next_id = 1;
  std::uint64_t running_completion = 0;  // the id whose completion runs now (0: none)
  std::thread thread;
  std::atomic<std::thread::id> driver;  // the thread's id while it runs
  bool in_sinks = false;  // the driver runs curl_multi_perform (its sinks), holding the lock
  std::vector<std::function<void()>> deferred;  // defer()'s tasks
  std::vector<std::function<void()>> watches;   // watch()'s checks
  std::chrono::steady_clock::time_point next_watch;
  bool thread_running = false;
  bool paused = false;  // around fork(): no thread may start

  Impl() : owner(posix::self_pid()) {
    std::call_once(g_curl_init, [] { g_curl_init_code = curl_global_init(CURL_GLOBAL_DEFAULT); });
    if (g_curl_init_code == CURLE_OK) multi = curl_multi_init();
    if (multi != nullptr) curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, 64L);
  }

  // Called with the lock held.
  void ensure_thread() {
    if (thread_running || paused) return;
    if (thread.joinable()) thread.join();  // it ended when idle; it holds no lock any more
    thread_running = true;
    thread = std::thread([this] { run(); });
  }

  void configure(Transfer& t) {
    CURL* easy = nullptr;
    if (!idle_handles.empty()) {
      easy = idle_handles.back();
      idle_handles.pop_back();
      curl_easy_reset(easy);
    } else {
      easy = curl_easy_init();
    }
    t.easy = easy;
    if (easy == nullptr) return;
    const HttpRequest& r = t.request;
    curl_easy_setopt(easy, CURLOPT_URL, r.url.c_str());
    curl_easy_setopt(easy, CURLOPT_PRIVATE, &t);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, t.error);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(easy, CURLOPT_BUFFERSIZE, kReceiveBuffer);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(std::max<std::int64_t>(1, r.connect_timeout.count())));
    curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(r.low_speed_bytes));
    curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME,
                     static_cast<long>(std::max<std::int64_t>(
                         1, std::chrono::ceil<std::chrono::seconds>(r.low_speed_time).count())));
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &t);
    if (!r.ca_file.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, r.ca_file.c_str());
    if (r.method == "HEAD") {
      curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
    } else if (r.method == "PUT") {
      curl_easy_setopt(easy, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(easy, CURLOPT_READFUNCTION, on_upload);
      curl_easy_setopt(easy, CURLOPT_READDATA, &t);
      curl_easy_setopt(easy, CURLOPT_SEEKFUNCTION, on_seek);
      curl_easy_setopt(easy, CURLOPT_SEEKDATA, &t);
      curl_easy_setopt(easy, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    } else if (r.method == "POST") {
      curl_easy_setopt(easy, CURLOPT_POST, 1L);
      curl_easy_setopt(easy, CURLOPT_POSTFIELDS, r.body.data());
      curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    } else if (r.method != "GET") {
      curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, r.method.c_str());
    }
    for (const auto& [name, value] : r.headers) {
      const std::string line = fmt::format("{}: {}", name, value);
      t.header_list = curl_slist_append(t.header_list, line.c_str());
    }
    // No "Expect: 100-continue" round trip before a body; no compressed bodies.
    t.header_list = curl_slist_append(t.header_list, "Expect:");
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, t.header_list);
  }

  // Fills the response of a finished (or removed) transfer and recycles its handle.
  void release(Transfer& t, CURLcode code) {
    if (t.easy != nullptr) {
      curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &t.response.status);
      curl_multi_remove_handle(multi, t.easy);
      idle_handles.push_back(t.easy);
      t.easy = nullptr;
    }
    if (t.header_list != nullptr) {
      curl_slist_free_all(t.header_list);
      t.header_list = nullptr;
    }
    t.response.curl_code = static_cast<int>(code);
    if (code != CURLE_OK) {
      t.response.curl_message =
          t.error[0] != '\0' ? std::string(t.error) : std::string(curl_easy_strerror(code));
    }
  }

  void begin(Transfer& t) {
    configure(t);
    if (t.easy == nullptr || multi == nullptr) {
      t.response.curl_code = CURLE_FAILED_INIT;
      t.response.curl_message = "libcurl could not be initialised";
      return;
    }
    const CURLMcode added = curl_multi_add_handle(multi, t.easy);
    if (added != CURLM_OK) {
      release(t, CURLE_FAILED_INIT);
      t.response.curl_message = curl_multi_strerror(added);
    }
  }

  void run() {
    std::unique_lock lock(mutex);
    driver = std::this_thread::get_id();
    for (;;) {
      if (paused) break;
      std::vector<std::unique_ptr<Transfer>> finished;
      // Cancelled transfers leave first (cancel() waits for this).
      bool removed = false;
      for (auto it = active.begin(); it != active.end();) {
        if (it->second->cancelled) {
          release(*it->second, CURLE_ABORTED_BY_CALLBACK);
          it = active.erase(it);
          removed = true;
        } else {
          ++it;
        }
      }
      if (removed) changed.notify_all();
      const auto now = std::chrono::steady_clock::now();
      auto next_due = std::chrono::steady_clock::time_point::max();
      for (auto it = pending.begin(); it != pending.end();) {
        if (it->second->not_before > now) {
          next_due = std::min(next_due, it->second->not_before);
          ++it;
          continue;
        }
        Transfer& t = *it->second;
        begin(t);
        if (t.response.curl_code != CURLE_OK) {
          finished.push_back(std::move(it->second));
        } else {
          active.emplace(it->first, std::move(it->second));
        }
        it = pending.erase(it);
      }
      if (active.empty() && pending.empty() && finished.empty() && deferred.empty()) break;
      if (!active.empty()) {
        int running = 0;
        in_sinks = true;
        curl_multi_perform(multi, &running);  // sinks run here, under the lock
        in_sinks = false;
        int left = 0;
        while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
          if (msg->msg != CURLMSG_DONE) continue;
          Transfer* t = nullptr;
          curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &t);
          const std::uint64_t id = t->id;
          release(*t, msg->data.result);
          auto found = active.find(id);
          finished.push_back(std::move(found->second));
          active.erase(found);
        }
      }
      if (!finished.empty()) {
        for (std::unique_ptr<Transfer>& t : finished) {
          running_completion = t->id;
          lock.unlock();
          t->done(std::move(t->response));
          t.reset();
          lock.lock();
          running_completion = 0;
        }
        changed.notify_all();
        continue;  // a completion may have queued a retry
      }
      if (!deferred.empty()) {
        std::vector<std::function<void()>> tasks = std::move(deferred);
        deferred.clear();
        lock.unlock();
        for (auto& task : tasks) task();
        tasks.clear();
        lock.lock();
        continue;  // a task may have started transfers
      }
      long wait_ms = kMaxIdleWaitMs;
      if (!active.empty() && !watches.empty()) {
        const auto at = std::chrono::steady_clock::now();
        if (at >= next_watch) {
          next_watch = at + kWatchEvery;
          std::vector<std::function<void()>> checks = watches;  // a check may add one
          lock.unlock();
          for (auto& check : checks) check();
          checks.clear();
          lock.lock();
          continue;  // a check may have started transfers
        }
        wait_ms = std::min<long>(
            wait_ms, std::chrono::ceil<std::chrono::milliseconds>(next_watch - at).count());
      }
      long curl_ms = -1;
      curl_multi_timeout(multi, &curl_ms);
      if (curl_ms >= 0) wait_ms = std::min(wait_ms, curl_ms);
      if (next_due != std::chrono::steady_clock::time_point::max()) {
        const auto until = std::chrono::duration_cast<std::chrono::milliseconds>(
                               next_due - std::chrono::steady_clock::now())
                               .count();
        wait_ms = std::clamp<long>(static_cast<long>(until) + 1, 0, wait_ms);
      }
      if (active.empty() && wait_ms <= 0) continue;
      lock.unlock();
      curl_multi_poll(multi, nullptr, 0, static_cast<int>(std::max(0L, wait_ms)), nullptr);
      lock.lock();
    }
    thread_running = false;
    driver = std::thread::id();
    changed.notify_all();
  }

  // Stops the thread (before fork(), at exit); transfers stay where they are.
  void pause() {
    std::unique_lock lock(mutex);
    paused = true;
    if (multi != nullptr) curl_multi_wakeup(multi);
    if (thread.joinable() && thread.get_id() != std::this_thread::get_id()) {
      lock.unlock();
      thread.join();
      lock.lock();
    }
  }
  void resume() {
    std::lock_guard lock(mutex);
    paused = false;
    if (!pending.empty() || !active.empty() || !deferred.empty()) ensure_thread();
  }
};

namespace {

std::mutex g_process_mutex;
HttpClient* g_process_client = nullptr;
pid_t g_process_pid = 0;
// Clients a fork() child inherited from its parent: never used, never destroyed (their
// connections are the parent's), kept reachable here.
std::vector<HttpClient*>* g_inherited = nullptr;

HttpClient* current_client() noexcept {
  return g_process_client != nullptr && g_process_pid == posix::self_pid() ? g_process_client
                                                                           : nullptr;
}

}  // namespace

// Around fork(): the client's thread is stopped (its lock free, no transfer mid-callback), so
// the child inherits a quiet copy it will not use; the parent's thread resumes.
struct ForkGuard {
  static void prepare() {
    if (HttpClient* c = current_client()) c->impl_->pause();
    g_process_mutex.lock();
  }
  static void parent() {
    g_process_mutex.unlock();
    if (HttpClient* c = current_client()) c->impl_->resume();
  }
  static void child() { g_process_mutex.unlock(); }
  static void at_exit() {
    if (HttpClient* c = current_client()) c->impl_->pause();
  }
};

HttpClient& HttpClient::process() {
  static std::once_flag registered;
  std::call_once(registered, [] {
    pthread_atfork(&ForkGuard::prepare, &ForkGuard::parent, &ForkGuard::child);
  });
  std::lock_guard lock(g_process_mutex);
  if (HttpClient* c = current_client()) return *c;
  if (g_process_client != nullptr) {
    if (g_inherited == nullptr) g_inherited = new std::vector<HttpClient*>();
    g_inherited->push_back(g_process_client);
  }
  g_process_client = new HttpClient();
  g_process_pid = posix::self_pid();
  // After curl_global_init (in the constructor), so it runs before OpenSSL's own exit handler:
  // no transfer is left running while the libraries are torn down.
  static std::once_flag exit_registered;
  std::call_once(exit_registered, [] { std::atexit(&ForkGuard::at_exit); });
  return *g_process_client;
}

HttpClient::HttpClient() : impl_(std::make_unique<Impl>()) {}
HttpClient::~HttpClient() = default;

std::uint64_t HttpClient::start(HttpRequest request, BodySink sink, Completion done,
                                std::chrono::steady_clock::time_point not_before) {
  auto t = std::make_unique<Transfer>();
  t->request = std::move(request);
  t->sink = std::move(sink);
  t->done = std::move(done);
  t->not_before = not_before;
  std::lock_guard lock(impl_->mutex);
  const std::uint64_t id = impl_->next_id++;
  t->id = id;
  impl_->pending.emplace(id, std::move(t));
  impl_->ensure_thread();
  if (impl_->multi != nullptr) curl_multi_wakeup(impl_->multi);
  return id;
}

void HttpClient::defer(std::function<void()> task) {
  if (std::this_thread::get_id() == impl_->driver.load() && impl_->in_sinks) {
    impl_->deferred.push_back(std::move(task));  // from a sink: this thread holds the lock
    return;
  }
  std::lock_guard lock(impl_->mutex);
  impl_->deferred.push_back(std::move(task));
  impl_->ensure_thread();
  if (impl_->multi != nullptr) curl_multi_wakeup(impl_->multi);
}

void HttpClient::watch(std::function<void()> check) {
  std::lock_guard lock(impl_->mutex);
  impl_->watches.push_back(std::move(check));
}

void HttpClient::cancel(std::uint64_t id) {
  std::unique_ptr<Transfer> removed;
  std::unique_lock lock(impl_->mutex);
  if (impl_->owner != posix::self_pid()) return;  // a fork's copy: nothing of it runs here
  const bool on_driver = std::this_thread::get_id() == impl_->driver;
  if (auto p = impl_->pending.find(id); p != impl_->pending.end()) {
    removed = std::move(p->second);
    impl_->pending.erase(p);
  } else if (auto a = impl_->active.find(id); a != impl_->active.end()) {
    if (on_driver) {
      impl_->release(*a->second, CURLE_ABORTED_BY_CALLBACK);
      removed = std::move(a->second);
      impl_->active.erase(a);
    } else {
      a->second->cancelled = true;
      if (impl_->multi != nullptr) curl_multi_wakeup(impl_->multi);
      impl_->changed.wait(lock,
                          [&] { return impl_->active.count(id) == 0 || !impl_->thread_running; });
    }
  }
  if (!on_driver) {
    impl_->changed.wait(lock, [&] { return impl_->running_completion != id; });
  }
  lock.unlock();
  removed.reset();
}

HttpResponse HttpClient::perform(HttpRequest request, BodySink sink) {
  std::promise<HttpResponse> promise;
  std::future<HttpResponse> result = promise.get_future();
  start(std::move(request), std::move(sink),
        [&promise](HttpResponse&& response) { promise.set_value(std::move(response)); });
  return result.get();
}

std::size_t HttpClient::pending_approx() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->pending.size() + impl_->active.size();
}

bool HttpClient::thread_running_approx() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->thread_running;
}

bool HttpClient::close_idle_connections(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::unique_lock lock(impl_->mutex);
  while (impl_->thread_running || !impl_->pending.empty() || !impl_->active.empty()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    lock.lock();
  }
  if (impl_->thread.joinable()) impl_->thread.join();
  for (CURL* easy : impl_->idle_handles) curl_easy_cleanup(easy);
  impl_->idle_handles.clear();
  if (impl_->multi != nullptr) {
    curl_multi_cleanup(impl_->multi);  // closes the cached connections
    impl_->multi = curl_multi_init();
    if (impl_->multi != nullptr) curl_multi_setopt(impl_->multi, CURLMOPT_MAXCONNECTS, 64L);
  }
  return true;
}

std::string_view reason_phrase(long status) noexcept {
  switch (status) {
    case 200:
      return "OK";
    case 206:
      return "Partial Content";
    case 301:
      return "Moved Permanently";
    case 307:
      return "Temporary Redirect";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 412:
      return "Precondition Failed";
    case 416:
      return "Range Not Satisfiable";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "";
  }
}

}  // namespace stoker::detail::net
