// probe_system() on fake /proc and /sys trees (cgroup v1, v2, none), the memory estimate's
// arithmetic and table, recommend_num_workers()'s bounds, and the topology.
#include <sched.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cstdlib>

#include <catch2/catch.hpp>

#include "stoker/fmt.hpp"

#include "ipc/ring.hpp"
#include "stoker/memory.hpp"
#include "stoker/topology.hpp"
#include "support/fake_root.hpp"

using namespace stoker;
using stoker::test::FakeRoot;

namespace {

constexpr const char* kMeminfo =
    "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    8000000 kB\n"
    "SwapTotal:       2000000 kB\nSwapFree:        1500000 kB\n";

}  // namespace

TEST_CASE("probe_system: cgroup v2 limits, usage and CPU quota", "[memory][probe]") {
  FakeRoot fake;
  fake.write("/proc/meminfo", kMeminfo);
  fake.write("/proc/self/cgroup", "0::/job\n");
  fake.write("/sys/fs/cgroup/job/memory.max", "4294967296\n");
  fake.write("/sys/fs/cgroup/job/memory.current", "1073741824\n");
  fake.write("/sys/fs/cgroup/job/cpu.max", "250000 100000\n");
  const SystemInfo s = probe_system({fake.root, "/tmp"});
  REQUIRE(s.mem_total.value == std::optional<std::uint64_t>(16000000ULL * 1024));
  REQUIRE(s.mem_available.value == std::optional<std::uint64_t>(8000000ULL * 1024));
  REQUIRE(s.swap_used.value == std::optional<std::uint64_t>(500000ULL * 1024));
  REQUIRE(s.cgroup_limit.value == std::optional<std::uint64_t>(4ULL << 30));
  REQUIRE_THAT(s.cgroup_limit.source, Catch::EndsWith("/sys/fs/cgroup/job/memory.max"));
  REQUIRE(s.cgroup_usage.value == std::optional<std::uint64_t>(1ULL << 30));
  REQUIRE(s.cpu_quota.value == std::optional<double>(2.5));
  // The cgroup leaves 3 GiB, less than MemAvailable's 7.6 GiB.
  REQUIRE(s.usable_memory() == std::optional<std::uint64_t>(3ULL << 30));
}

TEST_CASE("probe_system: cgroup v1 limits and CFS quota", "[memory][probe]") {
  FakeRoot fake;
  fake.write("/proc/meminfo", kMeminfo);
  fake.write("/proc/self/cgroup", "4:memory:/slurm/job7\n3:cpu,cpuacct:/slurm/job7\n");
  fake.write("/sys/fs/cgroup/memory/slurm/job7/memory.limit_in_bytes", "9223372036854771712\n");
  fake.write("/sys/fs/cgroup/memory/slurm/job7/memory.usage_in_bytes", "52428800\n");
  fake.write("/sys/fs/cgroup/cpu,cpuacct/slurm/job7/cpu.cfs_quota_us", "400000\n");
  fake.write("/sys/fs/cgroup/cpu,cpuacct/slurm/job7/cpu.cfs_period_us", "100000\n");
  const SystemInfo s = probe_system({fake.root, "/tmp"});
  // v1's "no limit" is a number near 2^63: unlimited, not 8 EiB.
  REQUIRE_FALSE(s.cgroup_limit.known());
  REQUIRE_THAT(s.cgroup_limit.source, Catch::Contains("(no limit)"));
  REQUIRE(s.cgroup_usage.value == std::optional<std::uint64_t>(50ULL << 20));
  REQUIRE(s.cpu_quota.value == std::optional<double>(4.0));
  REQUIRE(s.usable_memory() == s.mem_available.value);
}

TEST_CASE("probe_system: nothing to read stays unknown, never zero", "[memory][probe]") {
  FakeRoot fake;
  fake.write("/proc/self/cgroup", "0::/\n");
  const SystemInfo s = probe_system({fake.root, "/nonexistent/path"});
  REQUIRE_FALSE(s.mem_available.known());
  REQUIRE(s.mem_available.source == "unknown");
  REQUIRE_FALSE(s.cgroup_limit.known());
  REQUIRE_FALSE(s.cpu_quota.known());
  REQUIRE_FALSE(s.rotational.known());
  REQUIRE_FALSE(s.usable_memory().has_value());
  // What does not depend on the root still comes from this process and machine.
  REQUIRE(s.nofile_limit.known());
  REQUIRE(s.logical_cpus.value.value_or(0) >= 1);
}

TEST_CASE("probe_system: the disk under the data's path rotates or not", "[memory][probe]") {
  FakeRoot fake;
  struct stat st;
  REQUIRE(::stat("/tmp", &st) == 0);
  const std::string dev =
      "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  fake.write(dev + "/queue/rotational", "1\n");
  SystemInfo s = probe_system({fake.root, "/tmp"});
  if (major(st.st_dev) != 0) {  // /tmp on a block device here
    REQUIRE(s.rotational.value == std::optional<bool>(true));
    fake.write(dev + "/queue/rotational", "0\n");
    s = probe_system({fake.root, "/tmp"});
    REQUIRE(s.rotational.value == std::optional<bool>(false));
  }
  REQUIRE(s.network_filesystem.value == std::optional<bool>(false));
}

TEST_CASE("estimate_memory: the ring, the workers and the rule of thumb", "[memory]") {
  EstimateInputs in;
  in.num_workers = 2;
  in.prefetch_factor = 2;
  in.batch_size = 64;
  in.bytes_per_sample = 150528;
  const MemoryEstimate e = estimate_memory(in);
  REQUIRE(e.batch_bytes == 64 * 150528);
  REQUIRE(e.num_slots == 4);
  REQUIRE(e.slot_bytes >= e.batch_bytes);
  REQUIRE(e.slot_bytes < e.batch_bytes + (128u << 10));
  REQUIRE(e.slot_bytes % (64u << 10) == 0);
  const std::size_t kHeaderPage = detail::round_up(detail::kSlotHeaderBytes, detail::kPageSize);
  // The control block and 2 channels, then 4 filled slots.
  REQUIRE(e.ring_bytes == detail::Ring::slots_offset(2) + 4 * e.slot_bytes);
  // One sample in flight (streaming), the default base (no probe), the serve loop's pages.
  REQUIRE(e.worker_base_bytes == (1u << 20));
  REQUIRE(e.worker_private_bytes == 150528 + (1u << 20) + (16u << 10));
  REQUIRE(e.inline_bytes == 0);
  REQUIRE(e.plan_bytes == 0);  // no dataset size given
  REQUIRE(e.loader_bytes == e.ring_bytes + 2 * e.worker_private_bytes);
  REQUIRE(e.total_bytes == e.loader_bytes + e.main_bytes);
  REQUIRE(e.main_bytes > 0);  // this process's anonymous memory, measured
  REQUIRE(e.rule_of_thumb_bytes == 3 * e.batch_bytes);
  SECTION("a user collate holds the whole batch in each worker") {
    in.streaming = false;
    REQUIRE(estimate_memory(in).worker_private_bytes >= 64 * 150528);
  }
  SECTION("in-process: no workers, one ring channel, the loading in the main process") {
    in.num_workers = 0;
    in.worker_base_bytes = 300u << 10;
    in.worker_startup_bytes = 100u << 10;
    const MemoryEstimate z = estimate_memory(in);
    REQUIRE(z.num_slots == 2);
    REQUIRE(z.worker_private_bytes == 0);
    // One slot filled, the other's header page backed.
    REQUIRE(z.ring_bytes == detail::Ring::slots_offset(1) + z.slot_bytes + kHeaderPage);
    // The sample and the probe's buffers, without a fork's start-up.
    REQUIRE(z.inline_bytes == 150528 + (200u << 10));
    REQUIRE(z.loader_bytes == z.ring_bytes + z.inline_bytes);
  }
  SECTION("the epoch plans: 8 bytes an index, three with persistent workers") {
    in.dataset_size = 64 * 100;
    // 6400 indices and 100 batch flags, rounded up to a page, and a page more.
    const std::size_t plan = detail::round_up(6400 * 8 + 100, 4096) + 4096;
    REQUIRE(estimate_memory(in).plan_bytes == plan);
    in.sampler = true;  // size() may plan the next epoch ahead
    REQUIRE(estimate_memory(in).plan_bytes == 2 * plan);
    in.persistent_workers = true;
    REQUIRE(estimate_memory(in).plan_bytes == 3 * plan);
  }
  SECTION("an epoch of fewer batches than slots fills only as many") {
    in.dataset_size = 64 * 3;  // 3 batches, 4 slots
    const MemoryEstimate small = estimate_memory(in);
    // The second worker's part of batch 0 (32 rows) in the fourth slot, which no batch fills.
    const std::size_t part = detail::round_up(
        detail::Ring::payload_start(32) + 32 * 150528 + (std::size_t{4} << 10), 4096);
    REQUIRE(small.ring_bytes == detail::Ring::slots_offset(2) + 3 * small.slot_bytes + part);
    in.streaming = false;  // a user collate: batch 0 is not split
    REQUIRE(estimate_memory(in).ring_bytes ==
            detail::Ring::slots_offset(2) + 3 * small.slot_bytes + kHeaderPage);
    in.streaming = true;
    in.persistent_workers = true;  // they load the next epoch's batches into the fourth
    REQUIRE(estimate_memory(in).ring_bytes == e.ring_bytes);
  }
  SECTION("the table") {
    const std::string table = fmt::format("{}", e);  // stoker/fmt.hpp
    REQUIRE(table == stoker::to_string(e));
    REQUIRE_THAT(table, Catch::Contains("shared ring") && Catch::Contains("4 slots x") &&
                            Catch::Contains("workers") && Catch::Contains("rule of thumb") &&
                            Catch::Contains("(workers + 1) x batch"));
  }
}

TEST_CASE("recommend_num_workers: the tightest bound wins, and says so", "[memory]") {
  SystemInfo s;
  s.physical_cores.value = 8;
  s.logical_cpus.value = 16;
  REQUIRE(recommend_num_workers(s).num_workers == 7);
  REQUIRE_THAT(recommend_num_workers(s).reason, Catch::Contains("8 physical cores"));
  REQUIRE(recommend_num_workers(s, 0, 0.8, 2).num_workers == 3);  // two ranks share 8 cores
  s.cpu_quota.value = 3.0;
  REQUIRE(recommend_num_workers(s).num_workers == 3);
  REQUIRE_THAT(recommend_num_workers(s).reason, Catch::Contains("CPU quota of 3.0"));
  s.mem_available.value = 10ULL << 30;
  REQUIRE(recommend_num_workers(s, 4ULL << 30).num_workers == 2);  // 8 GiB / 4 GiB
  REQUIRE_THAT(recommend_num_workers(s, 4ULL << 30).reason, Catch::Contains("memory: 80%"));
  s.cpu_quota.value.reset();
  s.mem_available.value.reset();
  s.rotational.value = true;
  REQUIRE(recommend_num_workers(s).num_workers == 4);
  REQUIRE_THAT(recommend_num_workers(s).reason, Catch::Contains("rotational"));
  s.rotational.value = false;
  s.network_filesystem.value = true;
  REQUIRE(recommend_num_workers(s).num_workers == 16);
  SystemInfo one;
  one.physical_cores.value = 1;
  REQUIRE(recommend_num_workers(one).num_workers == 1);  // never 0
}

TEST_CASE("Topology: cores, and the cores workers get", "[memory][topology]") {
  const Topology t = Topology::detect();
  REQUIRE(t.physical_cores() >= 1);
  REQUIRE(t.logical_cpus() >= t.physical_cores());
  REQUIRE(t.core_of(t.cores()[0][0]) == 0);
  const Topology four({{0, 4}, {1, 5}, {2, 6}, {3, 7}}, 1, "test");
  // Three workers, the caller on CPU 5 (core 1): cores 0, 2 and 3.
  const auto cpus = worker_cores(four, 3, 5);
  REQUIRE(cpus == std::vector<std::vector<int>>{{0, 4}, {2, 6}, {3, 7}});
  // More workers than free cores: they cycle over the free ones.
  REQUIRE(worker_cores(four, 5, 0)[3] == std::vector<int>{1, 5});
  const Topology single({{0}}, 1, "test");
  REQUIRE(worker_cores(single, 2, 0) == std::vector<std::vector<int>>{{0}, {0}});
  SECTION("without hwloc, sysfs or sysconf stand in") {
    ::setenv("STOKER_NO_HWLOC", "1", 1);
    const Topology fallback = Topology::detect();
    ::unsetenv("STOKER_NO_HWLOC");
    REQUIRE(fallback.source() != "hwloc");
    REQUIRE(fallback.logical_cpus() == t.logical_cpus());
  }
}

TEST_CASE("estimate_memory: remote shards' download buffers, one set per loading process",
          "[memory][remote]") {
  EstimateInputs in;
  in.num_workers = 3;
  in.batch_size = 8;
  in.bytes_per_sample = 1000;
  const MemoryEstimate without = estimate_memory(in);
  in.download_bytes_per_process = 4 << 20;
  const MemoryEstimate with = estimate_memory(in);
  CHECK(with.download_bytes == 3 * (4u << 20));
  CHECK(with.loader_bytes - without.loader_bytes == 3 * (4u << 20));
  CHECK(to_string(with).find("download buffers") != std::string::npos);
  CHECK(to_string(without).find("download buffers") == std::string::npos);
  in.num_workers = 0;  // the main process loads, and downloads
  CHECK(estimate_memory(in).download_bytes == 4u << 20);
}
