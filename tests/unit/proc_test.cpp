// os/proc.hpp, the one /proc reader: the parse_* functions on sample texts (smaps_rollup lines
// that start like "Pss" without being it, /proc/stat lines too short to use, meminfo keys that
// are suffixes of others, statm, the shared-memory lines of maps), read_meminfo under a fake
// root, count_threads() and process_tree() of this process (with a forked child, the one fork
// in this file). The tree memory reader and sampler are tested on real trees in
// tests/process/memory_sampler_test.cpp.
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "os/posix.hpp"
#include "os/proc.hpp"
#include "support/fake_root.hpp"

using namespace stoker::detail;
using stoker::test::FakeRoot;

namespace {

constexpr std::uint64_t kKiB = 1024;

// The kernel's layout: the lines that share a prefix with Pss come first.
constexpr const char* kSmapsRollup =
    "55ed63fd9000-7ffe3f50f000 ---p 00000000 00:00 0                          [rollup]\n"
    "Rss:                1772 kB\n"
    "Pss_Dirty:           116 kB\n"
    "Pss_Anon:            111 kB\n"
    "Pss_File:             53 kB\n"
    "Pss_Shmem:             5 kB\n"
    "Pss:                 170 kB\n"
    "Shared_Clean:       1600 kB\n"
    "Private_Clean:        48 kB\n"
    "Private_Dirty:       124 kB\n"
    "SwapPss:               9 kB\n";

}  // namespace

TEST_CASE("proc: smaps_rollup's Pss is not Pss_Anon, Pss_Dirty or SwapPss", "[proc]") {
  const auto m = parse_process_memory(kSmapsRollup);
  REQUIRE(m.has_value());
  CHECK(m->rss_bytes == 1772 * kKiB);
  CHECK(m->pss_bytes == 170 * kKiB);
  CHECK(m->private_dirty_bytes == 124 * kKiB);
}

TEST_CASE("proc: smaps_rollup without Rss or Pss is unreadable, without Private_Dirty it is 0",
          "[proc]") {
  CHECK_FALSE(parse_process_memory("Rss: 10 kB\nPss_Anon: 4 kB\n").has_value());
  CHECK_FALSE(parse_process_memory("Pss: 4 kB\n").has_value());
  CHECK_FALSE(parse_process_memory("").has_value());
  const auto m = parse_process_memory("Rss: 10 kB\nPss: 4 kB\n");
  REQUIRE(m.has_value());
  CHECK(m->private_dirty_bytes == 0);
}

TEST_CASE("proc: a kB field is found only as a whole key at a line's start", "[proc]") {
  const std::string meminfo =
      "MemTotal:       16303480 kB\n"
      "MemFree:          812944 kB\n"
      "MemAvailable:    9081104 kB\n"
      "SwapTotal:       2097148 kB\n"
      "SwapFree:        2097148 kB\n"
      "HugePages_Total:       0\n"
      "Hugepagesize:       2048 kB\n";
  CHECK(parse_kb_field(meminfo, "MemTotal") == 16303480 * kKiB);
  CHECK(parse_kb_field(meminfo, "MemAvailable") == 9081104 * kKiB);
  CHECK(parse_kb_field(meminfo, "SwapFree") == 2097148 * kKiB);
  CHECK(parse_kb_field(meminfo, "HugePages_Total") ==
        std::uint64_t{0});                                 // no unit: the number, x 1024
  CHECK(parse_kb_field(meminfo, "Mem") == std::nullopt);   // a prefix of keys, not a key
  CHECK(parse_kb_field(meminfo, "Free") == std::nullopt);  // inside a key, not at its start
  CHECK(parse_kb_field(meminfo, "Cached") == std::nullopt);
  CHECK(parse_kb_field("Key: none\n", "Key") == std::nullopt);
  CHECK(parse_kb_field("Key:", "Key") == std::nullopt);
  CHECK(parse_kb_field("Key", "Key") == std::nullopt);
  CHECK(parse_kb_field("Key: 99999999999999999999 kB\n", "Key") == std::nullopt);  // > 2^64
  CHECK(parse_kb_field("Key: 18014398509481984 kB\n", "Key") == std::nullopt);     // 2^54: x 1024
  CHECK(parse_kb_field("Key: 18014398509481983 kB\n", "Key") ==
        std::uint64_t{18014398509481983} * kKiB);
}

TEST_CASE("proc: private anonymous memory leaves out shared mappings' dirty pages", "[proc]") {
  const std::string smaps =
      "55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]\n"
      "Size:                132 kB\n"
      "Private_Dirty:         40 kB\n"
      "VmFlags: rd wr mr mw me ac sd\n"
      "7f1000000000-7f1000100000 rw-s 00000000 00:01 1234                       /memfd:ring "
      "(deleted)\n"
      "Size:               1024 kB\n"
      "Private_Dirty:        512 kB\n"
      "7f2000000000-7f2000002000 rw-p 0001d000 08:01 42                         "
      "/usr/lib/libc.so.6\n"
      "Private_Clean:          4 kB\n"
      "Private_Dirty:          8 kB\n"
      "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n"
      "Private_Dirty:         12 kB\n";
  // The heap, the copy-on-write copy of libc's data and the stack; not the memfd's 512 kB.
  CHECK(parse_private_anonymous(smaps) == (40 + 8 + 12) * kKiB);
  CHECK(parse_private_anonymous("") == std::nullopt);
  CHECK(parse_private_anonymous("Private_Dirty: 4 kB\n") == std::nullopt);  // no mapping line
  CHECK(parse_private_anonymous(" leading blank\n") == std::nullopt);
}

TEST_CASE(
    "proc: this process's private and resident anonymous memory grow with its heap, not a "
    "shared map",
    "[proc]") {
  // Fresh mappings on both sides, not the allocator: a std::vector may reuse heap pages that
  // were dirty (and counted) before. The bounds are half the size either way, so pages the
  // kernel drops from the count under memory pressure do not decide the result; what is tested
  // is which side of the line each mapping's pages fall on.
  const std::optional<std::uint64_t> before = read_own_private_anonymous();
  const std::optional<std::uint64_t> anon_before = read_own_anonymous_resident();  // RssAnon
  REQUIRE(before.has_value());
  REQUIRE(anon_before.has_value());
  constexpr std::size_t kBytes = std::size_t{8} << 20;
  void* shared = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  std::memset(shared, 1, kBytes);
  const std::optional<std::uint64_t> with_shared = read_own_private_anonymous();
  const std::optional<std::uint64_t> anon_with_shared = read_own_anonymous_resident();
  void* heap = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(heap != MAP_FAILED);
  // Each page different: where same-page merging (KSM) runs, identical pages become shared.
  std::memset(heap, 1, kBytes);
  for (std::uint64_t page = 0; page < kBytes / 4096; ++page) {
    std::memcpy(static_cast<char*>(heap) + page * 4096, &page, sizeof page);
  }
  const std::optional<std::uint64_t> with_heap = read_own_private_anonymous();
  const std::optional<std::uint64_t> anon_with_heap = read_own_anonymous_resident();
  ::munmap(shared, kBytes);
  ::munmap(heap, kBytes);
  REQUIRE(with_shared.has_value());
  REQUIRE(with_heap.has_value());
  CHECK(*with_shared < *before + kBytes / 2);      // the shared pages are not in it
  CHECK(*with_heap >= *with_shared + kBytes / 2);  // the private ones are
  CHECK(*with_heap <= *with_shared + kBytes + kBytes / 4);
  // RssAnon likewise: shared memory is RssShmem, the private pages are in it.
  REQUIRE(anon_with_shared.has_value());
  REQUIRE(anon_with_heap.has_value());
  CHECK(*anon_with_shared < *anon_before + kBytes / 2);
  CHECK(*anon_with_heap >= *anon_with_shared + kBytes / 2);
  CHECK(*anon_with_heap <= *anon_with_shared + kBytes + kBytes / 4);
}

TEST_CASE("proc: /proc/stat's cpu line", "[proc]") {
  // user nice system idle iowait irq softirq steal guest guest_nice
  const auto t = parse_cpu_times("cpu  100 20 30 400 50 6 7 8 900 1000\ncpu0 1 2 3 4 5\n");
  REQUIRE(t.has_value());
  CHECK(t->total == 100 + 20 + 30 + 400 + 50 + 6 + 7 + 8);  // guest is inside user already
  CHECK(t->idle == 400);
  CHECK(t->iowait == 50);
  // Old kernels give fewer columns: five are enough.
  const auto five = parse_cpu_times("cpu 1 2 3 4 5\n");
  REQUIRE(five.has_value());
  CHECK(five->total == 15);
  CHECK(five->iowait == 5);
}

TEST_CASE("proc: a /proc/stat without a usable cpu line", "[proc]") {
  CHECK_FALSE(parse_cpu_times("cpu  1 2 3 4\n").has_value());  // fewer than 5 numbers
  CHECK_FALSE(parse_cpu_times("cpu  1 2 x 4 5\n").has_value());
  CHECK_FALSE(parse_cpu_times("cpu0 1 2 3 4 5\n").has_value());  // a per-CPU line first
  CHECK_FALSE(parse_cpu_times("intr 1 2 3 4 5\n").has_value());
  CHECK_FALSE(parse_cpu_times("cpu").has_value());
  CHECK_FALSE(parse_cpu_times("").has_value());
}

TEST_CASE("proc: read_meminfo under a fake root, and a missing file", "[proc]") {
  FakeRoot fake;
  fake.write("/proc/meminfo", "MemTotal: 2048 kB\nMemAvailable: 1024 kB\n");
  CHECK(read_meminfo("MemAvailable", fake.root) == 1024 * kKiB);
  CHECK(read_meminfo("SwapTotal", fake.root) == std::nullopt);
  CHECK(read_meminfo("MemAvailable", fake.root + "/nowhere") == std::nullopt);
  // This machine's.
  const auto total = read_meminfo("MemTotal");
  REQUIRE(total.has_value());
  CHECK(*total > 0);
}

TEST_CASE("proc: this process's memory and CPU time", "[proc]") {
  const auto m = read_process_memory(0);
  REQUIRE(m.has_value());
  CHECK(m->rss_bytes > 0);
  CHECK(m->pss_bytes > 0);
  CHECK(m->pss_bytes <= m->rss_bytes);
  const auto self = read_process_memory(::getpid());
  REQUIRE(self.has_value());
  CHECK(self->rss_bytes > 0);
  CHECK_FALSE(read_process_memory(-5).has_value());  // no such process: nullopt, no throw
  const auto t = read_cpu_times();
  REQUIRE(t.has_value());
  CHECK(t->total >= t->idle + t->iowait);
}

TEST_CASE("proc: count_threads sees this process's threads", "[proc]") {
  const std::size_t before = count_threads(0);
  CHECK(before >= 1);
  CHECK(count_threads(::getpid()) == before);
  std::atomic<bool> release{false};
  std::thread extra([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  const std::size_t during = count_threads(0);
  release.store(true);
  extra.join();
  CHECK(during == before + 1);
  CHECK(count_threads(-5) == 0);
}

TEST_CASE("proc: process_tree holds this process first, then a forked child", "[proc]") {
  const pid_t self = ::getpid();
  const std::vector<pid_t> alone = process_tree(self);
  REQUIRE_FALSE(alone.empty());
  CHECK(alone.front() == self);

  int hold[2];
  REQUIRE(posix::make_pipe(hold) == 0);
  const pid_t child = posix::fork_process();
  REQUIRE(child >= 0);
  if (child == 0) {
    posix::close_fd(hold[1]);
    char byte;
    (void)posix::read_full(hold[0], &byte, 1);  // until the parent closes its end
    ::_exit(0);
  }
  posix::close_fd(hold[0]);
  const std::vector<pid_t> tree = process_tree(self);
  const std::string children_file =
      "/proc/" + std::to_string(self) + "/task/" + std::to_string(self) + "/children";
  struct ::stat st {};
  const bool kernel_lists_children = posix::stat_path(children_file.c_str(), st);
  posix::close_fd(hold[1]);  // the child exits
  int status = 0;
  REQUIRE(posix::wait_pid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));

  REQUIRE_FALSE(tree.empty());
  CHECK(tree.front() == self);
  if (!kernel_lists_children) {
    WARN("this kernel has no " << children_file
                               << " (CONFIG_PROC_CHILDREN is off): the child cannot be listed");
    CHECK(tree.size() == alone.size());
    return;
  }
  CHECK(std::find(tree.begin(), tree.end(), child) != tree.end());
  CHECK(std::count(tree.begin(), tree.end(), self) == 1);
}

TEST_CASE("proc: statm's size, resident and shared pages, and its anonymous part", "[proc]") {
  const auto p = parse_statm("2099476 5736 5618 168 0 151 0\n");
  REQUIRE(p.has_value());
  CHECK(p->size == 2099476);
  CHECK(p->resident == 5736);
  CHECK(p->shared == 5618);
  CHECK(p->anonymous() == 118);
  // A zombie's statm: all zeros.
  const auto zombie = parse_statm("0 0 0 0 0 0 0\n");
  REQUIRE(zombie.has_value());
  CHECK(zombie->anonymous() == 0);
  CHECK(parse_statm("12 3 1").has_value());  // no newline, no more fields: enough
}

TEST_CASE("proc: statm text that cannot be used", "[proc]") {
  CHECK_FALSE(parse_statm("").has_value());
  CHECK_FALSE(parse_statm("12 3").has_value());            // two fields
  CHECK_FALSE(parse_statm("12 x 1 0 0 0 0").has_value());  // not a number
  CHECK_FALSE(parse_statm("12 3 4 0 0 0 0").has_value());  // shared above resident
  CHECK_FALSE(parse_statm("-12 3 1").has_value());
  CHECK_FALSE(parse_statm("99999999999999999999 3 1").has_value());  // > 2^64
}

namespace {

// A main process's maps: the ring (memfd, shared), a read-only second view of a cache memfd, a
// private mapping of a memfd (its written pages are anonymous), a PyTorch batch in /dev/shm, a
// System V segment, a MAP_SHARED | MAP_ANONYMOUS mapping, a shared mapping of an ordinary file
// (page cache), libraries, heap and stack; then lines that are cut short or malformed.
constexpr const char* kMaps =
    "00400000-00452000 r-xp 00000000 08:02 173521                             /usr/bin/prog\n"
    "55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]\n"
    "7f0f40000000-7f1740000000 rw-s 00000000 00:01 4121                       "
    "/memfd:stoker-ring (deleted)\n"
    "7f1800000000-7f1800400000 r--s 00000000 00:01 4200                       "
    "/memfd:stoker-cache (deleted)\n"
    "7f1900000000-7f1900400000 rw-s 00000000 00:01 4200                       "
    "/memfd:stoker-cache (deleted)\n"
    "7f1a00000000-7f1a00100000 rw-p 00000000 00:01 4300                       "
    "/memfd:private (deleted)\n"
    "7f1b00000000-7f1b00930000 rw-s 00000000 00:19 88                         "
    "/dev/shm/torch_1234_567_0 (deleted)\n"
    "7f1c00000000-7f1c00010000 rw-s 00000000 00:01 32769                      "
    "/SYSV0000002a (deleted)\n"
    "7f1d00000000-7f1d00002000 rw-s 00000000 00:01 9                          "
    "/dev/zero (deleted)\n"
    "7f1e00000000-7f1e00100000 rw-s 00000000 fd:01 131                        /data/my file.bin\n"
    "7f2000000000-7f2000002000 rw-p 0001d000 08:01 42                         /usr/lib/libc.so.6\n"
    "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n"
    "7f3000000000-7f3000001000 rw-s 00000000 00:01\n"
    "7f3100000000-7f3100001000 rw-s 00000000 00:01 77\n"
    "7f3200000000-7f3100001000 rw-s 00000000 00:01 78     /memfd:backwards (deleted)\n"
    "7f33000000007f3300001000 rw-s 00000000 00:01 79     /memfd:no-dash (deleted)\n"
    "7f3400000000-7f3400001000 rw-s 00000000 00:01:03 80  /memfd:bad-device (deleted)\n"
    "7f3500000000-7f3500001000 rws 00000000 00:01 81      /memfd:short-perms (deleted)\n"
    "7f3600000000-7f3600001000 rw-s 00000000 100000000:01 82 /memfd:huge-major (deleted)\n"
    "7f3700000000-7f3700001000 rw-s 00000000 00:01 83     /memfd:last line, no newline";

}  // namespace

TEST_CASE("proc: the shared-memory mappings of a maps text", "[proc]") {
  const std::vector<ShmemMapping> m = parse_shmem_mappings(kMaps);
  REQUIRE(m.size() == 7);
  CHECK(m[0].start == 0x7f0f40000000);
  CHECK(m[0].end == 0x7f1740000000);
  CHECK(m[0].device == ((std::uint64_t{0} << 32) | 1));
  CHECK(m[0].inode == 4121);
  CHECK(m[0].name == "/memfd:stoker-ring (deleted)");
  // Both views of the cache are listed: the reader counts the object once, by inode.
  CHECK(m[1].name == "/memfd:stoker-cache (deleted)");
  CHECK(m[2].inode == m[1].inode);
  CHECK(m[2].start == 0x7f1900000000);
  // The private memfd mapping is not one (its written pages are the process's anonymous ones).
  CHECK(m[3].name == "/dev/shm/torch_1234_567_0 (deleted)");
  CHECK(m[3].device == 0x19);
  CHECK(m[3].end - m[3].start == 0x930000);
  CHECK(m[4].name == "/SYSV0000002a (deleted)");
  CHECK(m[4].inode == 32769);
  CHECK(m[5].name == "/dev/zero (deleted)");
  // The file on disk is page cache; the lines after the stack are malformed but the last one,
  // which has no newline.
  CHECK(m[6].name == "/memfd:last line, no newline");
  CHECK(m[6].inode == 83);
}

TEST_CASE("proc: maps texts without a shared-memory mapping", "[proc]") {
  CHECK(parse_shmem_mappings("").empty());
  CHECK(parse_shmem_mappings("\n\n").empty());
  CHECK(parse_shmem_mappings("garbage\n-\n 1-2 rw-s\n").empty());
  // The device's major and minor numbers are hexadecimal, as the kernel prints them.
  const auto hex = parse_shmem_mappings("1000-2000 rw-s 00000000 fd:1f 5 /memfd:x (deleted)\n");
  REQUIRE(hex.size() == 1);
  CHECK(hex[0].device == ((std::uint64_t{0xfd} << 32) | 0x1f));
  // A shared mapping whose path merely contains a shared-memory name is a file like any other.
  CHECK(parse_shmem_mappings("1000-2000 rw-s 00000000 08:01 5 /home/u/dev/shm/x\n").empty());
  CHECK(parse_shmem_mappings("1000-2000 rw-p 00000000 00:01 5 /dev/zero (deleted)\n").empty());
}
