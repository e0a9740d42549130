// The remote tests' servers: nginx and s3rver, started by the ctest fixture
// (tests/remote/servers.sh, whose servers.env STOKER_REMOTE_SERVERS names), and FaultProxy,
// the fault-injecting proxy (tests/remote/fault_proxy.cpp) that a test starts in front of one
// of them and that ends with the test (it exits when its stdin closes).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "stoker/remote.hpp"
#include "support/files.hpp"

namespace stoker::test {

struct RemoteServers {
  int http_port = 0;
  int https_port = 0;
  int s3_port = 0;
  std::string www;      // nginx's root: files written here are served
  std::string ca_file;  // the HTTPS certificate (self-signed)
  std::string bucket;   // s3rver's bucket

  // Throws std::runtime_error when the servers were not started (run the tests through ctest,
  // or tests/remote/servers.sh start DIR and STOKER_REMOTE_SERVERS=DIR/servers.env).
  static const RemoteServers& get() {
    static const RemoteServers servers = load();
    return servers;
  }
  std::string http(const std::string& path) const {
    return fmt::format("http://127.0.0.1:{}/{}", http_port, path);
  }
  std::string https(const std::string& path) const {
    return fmt::format("https://localhost:{}/{}", https_port, path);
  }
  std::string s3_endpoint() const { return fmt::format("http://127.0.0.1:{}", s3_port); }
  // Options for s3rver: its endpoint, path-style addressing (the credentials S3RVER/S3RVER come
  // from the environment ctest sets), a cache in `cache_dir`, quick retries.
  RemoteOptions s3_options(const std::string& cache_dir, int port = 0) const {
    RemoteOptions o;
    o.endpoint = fmt::format("http://127.0.0.1:{}", port != 0 ? port : s3_port);
    o.addressing = AddressingStyle::kPath;
    o.cache_dir = cache_dir;
    o.retries.backoff = std::chrono::milliseconds(20);
    o.retries.max_backoff = std::chrono::milliseconds(200);
    o.ca_file = ca_file;
    return o;
  }

 private:
  static RemoteServers load() {
    const char* env = std::getenv("STOKER_REMOTE_SERVERS");
    if (env == nullptr) {
      throw std::runtime_error(
          "RemoteServers: STOKER_REMOTE_SERVERS is not set: run the remote tests through ctest "
          "(its fixture starts the servers), or tests/remote/servers.sh start DIR and set "
          "STOKER_REMOTE_SERVERS=DIR/servers.env");
    }
    std::ifstream in(env);
    if (!in) throw std::runtime_error(std::string("RemoteServers: cannot read ") + env);
    std::map<std::string, std::string> kv;
    for (std::string line; std::getline(in, line);) {
      const std::size_t eq = line.find('=');
      if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
    }
    // s3rver's one account, and nothing of this machine's own AWS set-up.
    ::setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    ::setenv("AWS_REGION", "us-east-1", 1);
    ::setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/stoker-test", 1);
    ::setenv("AWS_CONFIG_FILE", "/nonexistent/stoker-test", 1);
    for (const char* name : {"AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_REGION",
                             "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE"}) {
      ::unsetenv(name);
    }
    RemoteServers s;
    s.http_port = std::stoi(kv.at("HTTP_PORT"));
    s.https_port = std::stoi(kv.at("HTTPS_PORT"));
    s.s3_port = std::stoi(kv.at("S3_PORT"));
    s.www = kv.at("WWW");
    s.ca_file = kv.at("CA_FILE");
    s.bucket = kv.at("BUCKET");
    return s;
  }
};

// tests/remote/fault_proxy.cpp as a child process; see its header for the arguments.
class FaultProxy {
 public:
  explicit FaultProxy(int upstream_port, std::vector<std::string> args = {}) {
    int in[2];
    int out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
      throw std::runtime_error("FaultProxy: pipe failed");
    }
    std::vector<std::string> argv = {STOKER_FAULT_PROXY, "--upstream",
                                     fmt::format("127.0.0.1:{}", upstream_port)};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], STDIN_FILENO);
      ::dup2(out[1], STDOUT_FILENO);
      std::vector<char*> raw;
      for (std::string& a : argv) raw.push_back(a.data());
      raw.push_back(nullptr);
      ::execv(raw[0], raw.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    stdout_ = ::fdopen(out[0], "r");
    char line[64] = {};
    if (stdout_ == nullptr || std::fgets(line, sizeof line, stdout_) == nullptr ||
        std::sscanf(line, "port %d", &port_) != 1) {
      stop();
      throw std::runtime_error("FaultProxy: " STOKER_FAULT_PROXY " did not start");
    }
  }
  ~FaultProxy() { stop(); }
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  int port() const noexcept { return port_; }
  // Stops the proxy and returns how many faults it injected.
  int stop() {
    if (pid_ > 0) {
      ::close(stdin_);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      pid_ = 0;
      char line[64];
      while (stdout_ != nullptr && std::fgets(line, sizeof line, stdout_) != nullptr) {
        if (std::string_view(line).substr(0, 6) == "fault ") ++faults_;
      }
      if (stdout_ != nullptr) std::fclose(stdout_);
      stdout_ = nullptr;
    }
    return faults_;
  }

 private:
  pid_t pid_ = 0;
  int stdin_ = -1;
  FILE* stdout_ = nullptr;
  int port_ = 0;
  int faults_ = 0;
};

}  // namespace stoker::test
