// The memory-cgroup reader against fake /proc and /sys trees: cgroup v1, v2, the hybrid layout,
// a cgroup namespace, and none.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "os/cgroup.hpp"
#include "data/error_text.hpp"
#include "loader/fault_report.hpp"
#include "os/proc.hpp"
#include "support/fake_root.hpp"

using namespace stoker::detail;

using stoker::test::FakeRoot;

TEST_CASE("cgroup v1: the memory controller's directory and oom_kill", "[cgroup]") {
  FakeRoot fake;
  fake.write("/proc/self/cgroup", "5:devices:/\n4:memory:/job42\n0::/\n");
  fake.write("/sys/fs/cgroup/memory/job42/memory.limit_in_bytes", "1073741824\n");
  fake.write("/sys/fs/cgroup/memory/job42/memory.oom_control",
             "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n");
  const MemoryCgroup cg = find_memory_cgroup(fake.root);
  REQUIRE(cg.version == 1);
  REQUIRE(cg.directory == fake.root + "/sys/fs/cgroup/memory/job42");
  const auto oom = read_oom_kill_count(fake.root);
  REQUIRE(oom.has_value());
  REQUIRE(oom->kills == 7);
  REQUIRE(oom->source == fake.root + "/sys/fs/cgroup/memory/job42/memory.oom_control");
}

TEST_CASE("cgroup v2, and the hybrid layout under unified/", "[cgroup]") {
  FakeRoot fake;
  fake.write("/proc/self/cgroup", "0::/user.slice/job\n");
  const bool hybrid = GENERATE(false, true);
  const std::string base = hybrid ? "/sys/fs/cgroup/unified" : "/sys/fs/cgroup";
  fake.write(base + "/user.slice/job/memory.max", "max\n");
  fake.write(base + "/user.slice/job/memory.events",
             "low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n");
  const MemoryCgroup cg = find_memory_cgroup(fake.root);
  REQUIRE(cg.version == 2);
  REQUIRE(cg.directory == fake.root + base + "/user.slice/job");
  REQUIRE(read_oom_kill_count(fake.root)->kills == 2);
}

TEST_CASE("inside a cgroup namespace the mount's root is the cgroup", "[cgroup]") {
  FakeRoot fake;
  fake.write("/proc/self/cgroup", "0::/\n");
  fake.write("/sys/fs/cgroup/memory.max", "536870912\n");
  fake.write("/sys/fs/cgroup/memory.events", "oom_kill 0\n");
  const MemoryCgroup cg = find_memory_cgroup(fake.root);
  REQUIRE(cg.version == 2);
  REQUIRE(read_oom_kill_count(fake.root)->kills == 0);
}

TEST_CASE("without a memory cgroup the count is system-wide, or unknown", "[cgroup]") {
  FakeRoot fake;
  fake.write("/proc/self/cgroup", "0::/\n");
  REQUIRE(find_memory_cgroup(fake.root).version == 0);
  REQUIRE_FALSE(read_oom_kill_count(fake.root).has_value());
  fake.write("/proc/vmstat", "nr_free_pages 100\noom_kill 4\n");
  const auto oom = read_oom_kill_count(fake.root);
  REQUIRE(oom->kills == 4);
  REQUIRE(oom->source == fake.root + "/proc/vmstat");
}

TEST_CASE("find_keyed_value matches whole keys only", "[cgroup]") {
  REQUIRE(find_keyed_value("oom 5\noom_kill 9\n", "oom_kill") == std::optional<std::uint64_t>(9));
  REQUIRE(find_keyed_value("oom_kill_disable 1\n", "oom_kill") == std::nullopt);
  REQUIRE(find_keyed_value("oom_kill x\n", "oom_kill") == std::nullopt);
}

TEST_CASE("a SIGKILL is blamed on the OOM killer only when its counter rose", "[cgroup][crash]") {
  const OomCount before{3, "/sys/fs/cgroup/memory/job/memory.oom_control"};
  OomCount after = before;
  REQUIRE_THAT(sigkill_cause(before, after),
               Catch::Contains("not the OOM killer") && Catch::Contains("stayed at 3"));
  after.kills = 4;
  REQUIRE_THAT(sigkill_cause(before, after), Catch::Contains("the kernel's OOM killer killed it") &&
                                                 Catch::Contains("rose from 3 to 4") &&
                                                 Catch::Contains("lower num_workers"));
  REQUIRE_THAT(sigkill_cause(std::nullopt, std::nullopt), Catch::Contains("dmesg"));
}

TEST_CASE("MemAvailable is read from meminfo in bytes", "[cgroup]") {
  FakeRoot fake;
  fake.write("/proc/meminfo", "MemTotal:       24683624 kB\nMemAvailable:   1000 kB\n");
  REQUIRE(read_meminfo("MemAvailable", fake.root) == std::optional<std::uint64_t>(1024000));
  REQUIRE_THAT(sigbus_cause(64 << 20, 1024000), Catch::Contains("the batch ring holds 64.0 MiB") &&
                                                    Catch::Contains("1000.0 KiB available"));
}
