// Workers live exactly as long as the training process: the main thread may exit through
// pthread_exit while another thread trains (the workers stay, every sample arrives once), and
// when the process dies by SIGKILL its workers and its size probe go within 2 s. This
// process's /proc reads (memory cgroup, OOM counter, own memory) still work once the main
// thread has gone. The training program is tests/lifetime/main_thread_exit.cpp, run as a
// child whose stdout the test reads (a Catch2 test cannot pthread_exit its own main thread).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "os/posix.hpp"
#include "support/clean_state.hpp"

namespace posix = stoker::detail::posix;
using Clock = std::chrono::steady_clock;

namespace {

// main_thread_exit with `args`, its stdout read through a pipe.
struct Program {
  pid_t pid = -1;
  int out = -1;
  std::string text;  // what it printed so far

  explicit Program(const std::vector<std::string>& args) {
    int ends[2];
    REQUIRE(::pipe(ends) == 0);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::dup2(ends[1], STDOUT_FILENO);
      ::close(ends[0]);
      ::close(ends[1]);
      std::vector<char*> argv{const_cast<char*>(STOKER_LIFETIME_PROGRAM)};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(STOKER_LIFETIME_PROGRAM, argv.data());
      ::_exit(127);
    }
    ::close(ends[1]);
    out = ends[0];
  }
  ~Program() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
    ::close(out);
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  // Reads until `lines` lines have come, the program closed its stdout, or `timeout` passed.
  void read_lines(std::size_t lines, std::chrono::seconds timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    std::size_t seen = 0;
    while (seen < lines && Clock::now() < deadline) {
      pollfd p{out, POLLIN, 0};
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (posix::poll_fds(&p, 1, static_cast<int>(std::max<long long>(left, 1))) <= 0) continue;
      char c = 0;
      if (::read(out, &c, 1) != 1) break;
      text += c;
      if (c == '\n') ++seen;
    }
  }

  // SIGKILLs and reaps the program.
  void kill() {
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
  }
};

// The pids after "ok pids" in a report ("ok pids 12 13").
std::vector<pid_t> reported_pids(const std::string& text) {
  std::vector<pid_t> pids;
  if (text.rfind("ok pids", 0) != 0) return pids;
  std::istringstream in(text.substr(7));
  for (pid_t pid = 0; in >> pid;) pids.push_back(pid);
  return pids;
}

// Waits up to `limit` for every pid to be gone (or a zombie, left to whoever adopted it).
bool all_gone_within(const std::vector<pid_t>& pids, std::chrono::milliseconds limit) {
  const Clock::time_point deadline = Clock::now() + limit;
  for (;;) {
    bool gone = true;
    for (const pid_t pid : pids) gone = gone && !stoker::test::process_alive(pid);
    if (gone) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// The text after "<key>: " up to the end of its line.
std::string field(const std::string& text, const std::string& key) {
  const std::size_t at = text.find(key + ": ");
  if (at == std::string::npos) return "";
  const std::size_t start = at + key.size() + 2;
  return text.substr(start, text.find('\n', start) - start);
}

}  // namespace

TEST_CASE("workers outlive the main thread and die with the process", "[lifetime]") {
  const bool persistent = GENERATE(false, true);
  CAPTURE(persistent);
  Program program({"train", persistent ? "1" : "0"});
  program.read_lines(1, std::chrono::seconds(60));
  INFO("the program printed: " << program.text);
  // Epochs 0-2 came whole on the second thread after the main thread (which forked epoch 0's
  // workers and probe) had exited, and epoch 3's workers are running.
  const std::vector<pid_t> workers = reported_pids(program.text);
  REQUIRE(workers.size() == 2);
  for (const pid_t pid : workers) REQUIRE(stoker::test::process_alive(pid));
  program.kill();
  REQUIRE(all_gone_within(workers, std::chrono::seconds(2)));
}

TEST_CASE("the size probe dies with the process", "[lifetime]") {
  Program program({"probe"});
  program.read_lines(1, std::chrono::seconds(30));
  INFO("the program printed: " << program.text);
  const std::vector<pid_t> probe = reported_pids(program.text);
  REQUIRE(probe.size() == 1);
  REQUIRE(stoker::test::process_alive(probe[0]));
  program.kill();  // while the probe is inside a get() that would take 30 s
  REQUIRE(all_gone_within(probe, std::chrono::seconds(2)));
}

TEST_CASE("the cgroup and memory reads survive the main thread's exit", "[lifetime]") {
  Program program({"proc"});
  program.read_lines(5, std::chrono::seconds(30));
  INFO("the program printed: " << program.text);
  REQUIRE(program.text.rfind("zombie\n", 0) == 0);  // read after the main thread had exited
  REQUIRE_FALSE(field(program.text, "before").empty());
  REQUIRE(field(program.text, "after") == field(program.text, "before"));
  REQUIRE(std::stoull("0" + field(program.text, "own rss")) > 0);
  REQUIRE(std::stoull("0" + field(program.text, "estimate main")) > 0);
}
