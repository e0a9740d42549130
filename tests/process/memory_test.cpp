// Running out of memory for real: a worker that outgrows its memory cgroup is killed by the
// kernel's OOM killer, and the error says so (the cgroup's oom_kill counter rose).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>

#include <catch2/catch.hpp>

#include "os/cgroup.hpp"
#include "support/clean_state.hpp"
#include "support/datasets.hpp"

using namespace stoker;

namespace {

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace

TEST_CASE("a worker killed by the OOM killer is reported as such", "[fault][oom]") {
  const detail::MemoryCgroup parent_cg = detail::find_memory_cgroup();
  if (parent_cg.version == 0) {
    WARN("no memory cgroup is mounted here: the OOM-killer test cannot run");
    return;
  }
  const std::string dir = parent_cg.directory + "/stoker-oom-test-" + std::to_string(getpid());
  if (mkdir(dir.c_str(), 0755) != 0) {
    WARN("cannot create a child memory cgroup (" << std::strerror(errno) << "): skipped");
    return;
  }
  const std::string limit = std::to_string(256 << 20);
  const bool limited = parent_cg.version == 1 ? write_file(dir + "/memory.limit_in_bytes", limit)
                                              : write_file(dir + "/memory.max", limit);
  if (parent_cg.version == 2) write_file(dir + "/memory.swap.max", "0");
  if (!limited) {
    rmdir(dir.c_str());
    WARN("cannot set a memory limit on " << dir << ": skipped");
    return;
  }
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(fds[0]);
    std::string report = "could not join the cgroup";
    if (write_file(dir + "/cgroup.procs", std::to_string(getpid()))) {
      test::IndexDataset dataset{16, [](std::size_t i) {
                                   if (i == 5 && test::in_worker()) {
                                     // Far past the limit: the OOM killer must step in.
                                     const std::size_t n = std::size_t{2} << 30;
                                     // volatile: the compiler must not drop the stores.
                                     auto* p = static_cast<volatile char*>(std::malloc(n));
                                     for (std::size_t k = 0; p != nullptr && k < n; k += 4096) {
                                       p[k] = 1;
                                     }
                                     std::free(const_cast<char*>(p));
                                   }
                                 }};
      LoaderOptions opt;
      opt.batch_size = 2;
      opt.num_workers = 1;
      try {
        DataLoader loader(dataset, opt);
        for (const Batch& batch : loader) (void)batch;
        report = "no error";
      } catch (const WorkerCrashed& e) {
        report = e.what();
      } catch (const std::exception& e) {
        report = std::string("other error: ") + e.what();
      }
    }
    (void)!write(fds[1], report.data(), report.size());
    _exit(0);
  }
  close(fds[1]);
  std::string report;
  char buffer[4096];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) > 0;) {
    report.append(buffer, static_cast<std::size_t>(n));
  }
  close(fds[0]);
  waitpid(child, nullptr, 0);
  for (int attempt = 0; attempt < 100 && rmdir(dir.c_str()) != 0; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  INFO(report);
  REQUIRE_THAT(report, Catch::Contains("was killed by signal 9 (SIGKILL)") &&
                           Catch::Contains("while loading sample 5 of batch 2") &&
                           Catch::Contains("the kernel's OOM killer killed it") &&
                           Catch::Contains("rose from") &&
                           Catch::Contains("for this loader (1 + 1) x") &&
                           Catch::Contains("its batch ring holds"));
}
