// fault_proxy: a TCP proxy on 127.0.0.1 for the remote tests and bench/remote. It forwards every
// connection to --upstream, delays each byte by half of --latency-ms in each direction (a round
// trip of --latency-ms, without limiting throughput: bytes are queued, not slept on), and
// injects one kind of fault into the first --times connections (0: all) whose first request
// contains --match (and, with --method, starts with that method):
//   reset     server-to-client bytes stop after --after bytes and the client gets a TCP RST
//   stall     ... stop after --after bytes and the connection stays open, silent
//   truncate  ... stop after --after bytes and the connection is closed cleanly (a cut body)
//   respond   the request is answered with --status and an S3 error document of --code, and
//             the connection closed
// It prints "port <n>" when listening, then "fault <connection>" each time it injects one, and
// exits when its standard input closes (the test that started it ended) or on SIGTERM.
// --trace FILE writes one line per request and per response (its start and its body's end, as
// the bytes reach the proxy: ms since the proxy started, the connection, the request line and
// Range, the status and length), for bench/remote's timelines.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

enum class Fault { kNone, kReset, kStall, kTruncate, kRespond };

struct Options {
  std::string upstream_host = "127.0.0.1";
  int upstream_port = 0;
  int latency_ms = 0;
  Fault fault = Fault::kNone;
  std::uint64_t after = 0;
  int times = 0;
  std::string match;
  std::string method;  // "GET": only connections whose first request is a GET
  int status = 503;
  std::string code = "SlowDown";
  std::string trace;
};

FILE* g_trace = nullptr;
const Clock::time_point g_started = Clock::now();

double ms_since_start() {
  return std::chrono::duration<double, std::milli>(Clock::now() - g_started).count();
}

// The value of a header in an HTTP head, or "".
std::string header_value(const std::string& head, const char* name) {
  const std::size_t end = head.find("\r\n\r\n");
  std::size_t at = 0;
  while ((at = head.find("\r\n", at)) != std::string::npos && at < end) {
    at += 2;
    const std::size_t colon = head.find(':', at);
    if (colon == std::string::npos) break;
    if (::strncasecmp(head.c_str() + at, name, std::strlen(name)) == 0 &&
        colon - at == std::strlen(name)) {
      std::size_t v = colon + 1;
      while (v < head.size() && head[v] == ' ') ++v;
      return head.substr(v, head.find("\r\n", v) - v);
    }
  }
  return {};
}

// --trace: a request's first line and Range when a client chunk starts one.
void trace_request(int id, const std::string& bytes) {
  if (g_trace == nullptr || bytes.size() < 4 || bytes.compare(0, 5, "HTTP/") == 0) return;
  const std::size_t eol = bytes.find("\r\n");
  if (eol == std::string::npos || bytes.find(" HTTP/1.") > eol) return;
  std::fprintf(g_trace, "%.1f %d > %s range=%s\n", ms_since_start(), id,
               bytes.substr(0, eol).c_str(), header_value(bytes, "Range").c_str());
}

struct Chunk {
  Clock::time_point due;
  std::string bytes;
  std::size_t sent = 0;
};

struct Connection {
  int id = 0;
  int client = -1;
  int upstream = -1;
  std::deque<Chunk> to_upstream;
  std::deque<Chunk> to_client;
  std::size_t queued_to_client = 0;
  std::size_t queued_to_upstream = 0;
  std::uint64_t sent_to_client = 0;
  bool client_eof = false;
  bool upstream_eof = false;
  bool decided = false;  // whether this connection gets the fault is known
  bool faulty = false;
  bool stalled = false;
  std::uint64_t body_left = 0;  // --trace: the response body bytes still to come
  std::string head;             // the client's first bytes, while undecided
  bool done = false;
};

volatile sig_atomic_t g_stop = 0;
void on_term(int) { g_stop = 1; }

constexpr std::size_t kMaxQueued = 64 << 20;

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

int connect_upstream(const Options& o) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(o.upstream_port));
  ::inet_pton(AF_INET, o.upstream_host.c_str(), &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  set_nonblocking(fd);
  return fd;
}

void close_connection(Connection& c, bool reset) {
  if (c.client >= 0) {
    if (reset) {
      const linger l{1, 0};
      ::setsockopt(c.client, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    ::close(c.client);
  }
  if (c.upstream >= 0) ::close(c.upstream);
  c.client = c.upstream = -1;
  c.done = true;
}

std::string error_response(const Options& o) {
  const std::string body =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>" + o.code +
      "</Code><Message>injected by fault_proxy</Message><RequestId>0</RequestId></Error>";
  return "HTTP/1.1 " + std::to_string(o.status) +
         " Injected\r\nContent-Type: application/xml\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const std::string value = argv[i + 1];
    if (key == "--upstream") {
      const std::size_t colon = value.rfind(':');
      o.upstream_host = value.substr(0, colon);
      o.upstream_port = std::atoi(value.c_str() + colon + 1);
    } else if (key == "--latency-ms") {
      o.latency_ms = std::atoi(value.c_str());
    } else if (key == "--fault") {
      o.fault = value == "reset"      ? Fault::kReset
                : value == "stall"    ? Fault::kStall
                : value == "truncate" ? Fault::kTruncate
                : value == "respond"  ? Fault::kRespond
                                      : Fault::kNone;
    } else if (key == "--after") {
      o.after = std::strtoull(value.c_str(), nullptr, 10);
    } else if (key == "--times") {
      o.times = std::atoi(value.c_str());
    } else if (key == "--match") {
      o.match = value;
    } else if (key == "--method") {
      o.method = value + " ";
    } else if (key == "--status") {
      o.status = std::atoi(value.c_str());
    } else if (key == "--code") {
      o.code = value;
    } else if (key == "--trace") {
      o.trace = value;
    } else {
      std::fprintf(stderr, "fault_proxy: unknown option %s\n", key.c_str());
      std::exit(2);
    }
  }
  if (o.upstream_port == 0) {
    std::fprintf(stderr,
                 "usage: fault_proxy --upstream host:port [--latency-ms N] [--fault "
                 "reset|stall|truncate|respond] [--after BYTES] [--times K] [--match "
                 "TEXT] [--method NAME] [--status N] [--code CODE] [--trace FILE]\n");
    std::exit(2);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (!o.trace.empty()) {
    g_trace = std::fopen(o.trace.c_str(), "w");
    if (g_trace == nullptr) {
      std::perror("fault_proxy: --trace");
      return 2;
    }
  }
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGTERM, on_term);
  const auto half_latency = std::chrono::microseconds(o.latency_ms * 500);

  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener, 128) != 0) {
    std::perror("fault_proxy: listen");
    return 1;
  }
  socklen_t length = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length);
  set_nonblocking(listener);
  std::printf("port %d\n", ntohs(addr.sin_port));
  std::fflush(stdout);

  std::vector<std::unique_ptr<Connection>> connections;
  int accepted = 0;
  int faults = 0;
  std::vector<char> buffer(256 * 1024);
  while (g_stop == 0) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Connection*, bool>> owners;  // (connection, is client side)
    fds.push_back({listener, POLLIN, 0});
    fds.push_back({STDIN_FILENO, POLLIN, 0});
    const auto now = Clock::now();
    auto next_due = Clock::time_point::max();
    for (auto& c : connections) {
      if (c->done) continue;
      short client_events = 0;
      short upstream_events = 0;
      if (!c->client_eof && c->queued_to_upstream < kMaxQueued) client_events |= POLLIN;
      if (!c->upstream_eof && !c->stalled && c->queued_to_client < kMaxQueued) {
        upstream_events |= POLLIN;
      }
      if (!c->to_client.empty()) {
        if (c->to_client.front().due <= now) {
          client_events |= POLLOUT;
        } else {
          next_due = std::min(next_due, c->to_client.front().due);
        }
      }
      if (!c->to_upstream.empty()) {
        if (c->to_upstream.front().due <= now) {
          upstream_events |= POLLOUT;
        } else {
          next_due = std::min(next_due, c->to_upstream.front().due);
        }
      }
      fds.push_back({c->client, client_events, 0});
      owners.emplace_back(c.get(), true);
      fds.push_back({c->upstream, upstream_events, 0});
      owners.emplace_back(c.get(), false);
    }
    int timeout = 1000;
    if (next_due != Clock::time_point::max()) {
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_due - now);
      timeout = static_cast<int>(
          std::max<std::int64_t>(0, std::min<std::int64_t>(1000, wait.count() + 1)));
    }
    if (::poll(fds.data(), fds.size(), timeout) < 0) continue;
    if ((fds[1].revents & (POLLIN | POLLHUP)) != 0) {
      if (::read(STDIN_FILENO, buffer.data(), buffer.size()) <= 0) break;
    }
    if ((fds[0].revents & POLLIN) != 0) {
      for (;;) {
        const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        auto c = std::make_unique<Connection>();
        c->id = ++accepted;
        c->client = fd;
        c->upstream = connect_upstream(o);
        if (c->upstream < 0) {
          close_connection(*c, true);
          continue;
        }
        connections.push_back(std::move(c));
      }
    }
    const auto arrival = Clock::now();
    for (std::size_t i = 2; i < fds.size(); ++i) {
      Connection& c = *owners[i - 2].first;
      const bool client_side = owners[i - 2].second;
      if (c.done || fds[i].revents == 0) continue;
      const int fd = client_side ? c.client : c.upstream;
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        const ssize_t n = ::read(fd, buffer.data(), buffer.size());
        if (n <= 0) {
          if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
          (client_side ? c.client_eof : c.upstream_eof) = true;
        } else if (client_side) {
          std::string bytes(buffer.data(), static_cast<std::size_t>(n));
          if (!c.decided) {
            c.head += bytes;
            const bool head_complete = c.head.find("\r\n\r\n") != std::string::npos;
            if (!head_complete && c.head.size() < 65536) continue;  // held until it is whole
            const bool matches = (o.match.empty() || c.head.find(o.match) != std::string::npos) &&
                                 c.head.rfind(o.method, 0) == 0;
            c.decided = true;
            c.faulty = o.fault != Fault::kNone && matches && (o.times == 0 || faults < o.times);
            if (c.faulty) {
              ++faults;
              std::printf("fault %d\n", c.id);
              std::fflush(stdout);
            }
            bytes = std::move(c.head);
            c.head.clear();
            if (c.faulty && o.fault == Fault::kRespond) {
              c.to_client.push_back({arrival + 2 * half_latency, error_response(o), 0});
              c.upstream_eof = true;  // nothing more from the server on this connection
              ::close(c.upstream);
              c.upstream = -1;
              continue;
            }
          }
          trace_request(c.id, bytes);
          c.queued_to_upstream += bytes.size();
          c.to_upstream.push_back({arrival + half_latency, std::move(bytes), 0});
        } else {
          std::string bytes(buffer.data(), static_cast<std::size_t>(n));
          if (g_trace != nullptr) {
            if (c.body_left == 0 && bytes.compare(0, 5, "HTTP/") == 0) {
              const std::size_t end = bytes.find("\r\n\r\n");
              const std::string content_length = header_value(bytes, "Content-Length");
              std::fprintf(g_trace, "%.1f %d < %s length=%s\n", ms_since_start(), c.id,
                           bytes.substr(0, bytes.find("\r\n")).c_str(), content_length.c_str());
              const std::uint64_t total = std::strtoull(content_length.c_str(), nullptr, 10);
              const std::uint64_t here = end == std::string::npos ? 0 : bytes.size() - end - 4;
              c.body_left = total > here ? total - here : 0;
              if (total > 0 && c.body_left == 0) {
                std::fprintf(g_trace, "%.1f %d < end\n", ms_since_start(), c.id);
              }
            } else if (c.body_left > 0) {
              c.body_left -= std::min<std::uint64_t>(c.body_left, bytes.size());
              if (c.body_left == 0)
                std::fprintf(g_trace, "%.1f %d < end\n", ms_since_start(), c.id);
            }
          }
          if (c.faulty && o.fault != Fault::kRespond) {
            const std::uint64_t room = o.after > c.sent_to_client + c.queued_to_client
                                           ? o.after - c.sent_to_client - c.queued_to_client
                                           : 0;
            if (bytes.size() >= room) {
              bytes.resize(room);
              c.stalled = true;  // nothing past the cut is forwarded
            }
          }
          c.queued_to_client += bytes.size();
          if (!bytes.empty()) c.to_client.push_back({arrival + half_latency, std::move(bytes), 0});
        }
      }
      if ((fds[i].revents & POLLOUT) != 0) {
        auto& queue = client_side ? c.to_client : c.to_upstream;
        const auto t = Clock::now();
        while (!queue.empty() && queue.front().due <= t) {
          Chunk& chunk = queue.front();
          const ssize_t n = ::send(fd, chunk.bytes.data() + chunk.sent,
                                   chunk.bytes.size() - chunk.sent, MSG_NOSIGNAL);
          if (n <= 0) break;
          chunk.sent += static_cast<std::size_t>(n);
          if (client_side) {
            c.sent_to_client += static_cast<std::uint64_t>(n);
            c.queued_to_client -= static_cast<std::size_t>(n);
          } else {
            c.queued_to_upstream -= static_cast<std::size_t>(n);
          }
          if (chunk.sent < chunk.bytes.size()) break;
          queue.pop_front();
        }
      }
    }
    // Faults that fire once the bytes before the cut have been delivered, and closed ends.
    for (auto& c : connections) {
      if (c->done) continue;
      const bool cut = c->faulty && c->stalled && c->to_client.empty();
      if (cut && o.fault == Fault::kReset) {
        close_connection(*c, true);
      } else if (cut && o.fault == Fault::kTruncate) {
        close_connection(*c, false);
      } else if (c->faulty && o.fault == Fault::kRespond && c->to_client.empty() &&
                 c->upstream < 0) {
        ::shutdown(c->client, SHUT_WR);
        close_connection(*c, false);
      } else if ((c->client_eof && c->to_upstream.empty()) ||
                 (c->upstream_eof && c->to_client.empty() && !cut)) {
        close_connection(*c, false);
      }
    }
    std::erase_if(connections, [](const auto& c) { return c->done; });
  }
  for (auto& c : connections) close_connection(*c, false);
  if (g_trace != nullptr) std::fclose(g_trace);
  return 0;
}
