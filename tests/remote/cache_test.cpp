// The node-wide shard cache (src/datasets/remote/shard_cache.hpp) against s3rver and nginx:
// one download per machine however many processes ask, parallel ranged parts, bytes readable
// while they arrive, LRU eviction of unheld entries only, files it did not make left alone, a
// limit too small named at once, and no partial or failed download ever taken as complete.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "datasets/remote/shard_cache.hpp"
#include "os/posix.hpp"
#include "remote/remote_support.hpp"
#include "support/error_message.hpp"

using namespace stoker;
using namespace stoker::detail;
using namespace stoker::test;
namespace fs = std::filesystem;

namespace {

// RemoteCounters in memory that fork()ed children share.
struct SharedCounters {
  SharedCounters() {
    void* p = ::mmap(nullptr, sizeof(RemoteCounters), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    counters = new (p) RemoteCounters();
  }
  ~SharedCounters() { ::munmap(counters, sizeof(RemoteCounters)); }
  RemoteCounters* counters;
};

std::string read_all(const CacheHold& hold) {
  std::string out(hold.size(), '\0');
  REQUIRE(posix::pread_full(hold.fd(), out.data(), out.size(), 0) ==
          static_cast<ssize_t>(out.size()));
  return out;
}

RemoteFile remote(const std::string& url, std::uint64_t size) {
  RemoteFile f;
  f.url = url;
  f.size = size;
  return f;
}

// Files below `dir` (relative names), for checks of what the cache left behind.
std::vector<std::string> files_below(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(fs::relative(e.path(), dir).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool any_ending(const std::vector<std::string>& files, std::string_view suffix) {
  for (const std::string& f : files) {
    if (f.size() >= suffix.size() &&
        f.compare(f.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return true;
    }
  }
  return false;
}

// The ranged GETs nginx served for `name`, by the first byte each asked for.
std::map<std::uint64_t, ServedRequest> gets_by_range(const std::string& name) {
  std::map<std::uint64_t, ServedRequest> gets;
  for (ServedRequest& r : served_requests("/" + name)) {
    if (r.range_begin) gets[*r.range_begin] = std::move(r);
  }
  return gets;
}

// 64 KiB parts, 8 in flight: a 1 MiB shard in 16 parts.
RemoteOptions small_parts(const std::string& cache_dir) {
  RemoteOptions o = RemoteServers::get().s3_options(cache_dir);
  o.part_size = 64 << 10;
  o.parts_in_flight = 8;
  return o;
}

}  // namespace

TEST_CASE("A shard downloads in parallel ranged parts into a verified, renamed entry",
          "[remote][cache]") {
  TempDir scratch("cache");
  const RemoteServers& s = RemoteServers::get();
  RemoteOptions o = s.s3_options(scratch.path + "/cache");
  o.part_size = 64 << 10;
  o.parts_in_flight = 4;
  const std::string data = pattern_bytes((1 << 20) + 123, 21);
  net::ObjectStore direct(o);
  const std::string url = put_s3(direct, unique_key("parts.tar"), data, scratch.path);

  RemoteCounters counters;
  auto cache = ShardCache::process(o);
  auto hold = cache->acquire(remote(url, data.size()), Need::kNow, &counters);
  REQUIRE(hold != nullptr);
  hold->wait_for(hold->size());
  CHECK(hold->complete());
  CHECK(read_all(*hold) == data);
  CHECK(hold->path() == cache->entry_path(url));
  CHECK(test::read_file(hold->path()) == data);
  const RemoteStats st = counters.snapshot();
  CHECK(st.bytes_fetched == data.size());
  CHECK(st.requests == 17);  // ceil(1 MiB + 123 / 64 KiB) parts, no retry
  CHECK(st.cache_misses == 1);
  const auto files = files_below(cache->dir());
  CHECK_FALSE(any_ending(files, ".stoker-part"));
  CHECK(any_ending(files, ".stoker-meta"));
  hold.reset();

  // Again: a hit, nothing fetched; the size is found with a HEAD when not given.
  RemoteFile unsized;
  unsized.url = url;
  auto again = cache->acquire(remote(url, data.size()), Need::kNow, &counters);
  CHECK(again->complete());
  CHECK(counters.snapshot().cache_hits == 1);
  CHECK(counters.snapshot().bytes_fetched == data.size());
}

TEST_CASE("Bytes can be read while the rest of the shard still arrives", "[remote][cache]") {
  TempDir scratch("cache");
  const RemoteServers& s = RemoteServers::get();
  const std::string data = pattern_bytes(2 << 20, 22);
  const std::string name = put_www(unique_key("stream.tar"), data);
  FaultProxy slow(s.http_port, {"--latency-ms", "40"});
  RemoteOptions o = s.s3_options(scratch.path + "/cache");
  o.part_size = 64 << 10;
  o.parts_in_flight = 1;  // one part after another: 32 round trips
  auto cache = ShardCache::process(o);
  const std::string url = fmt::format("http://127.0.0.1:{}/{}", slow.port(), name);
  auto hold = cache->acquire(remote(url, data.size()), Need::kNow, nullptr);
  hold->wait_for(4096);
  CHECK(hold->available() >= 4096);
  CHECK_FALSE(hold->complete());  // the first bytes came long before the last
  std::string head(4096, '\0');
  REQUIRE(posix::pread_full(hold->fd(), head.data(), head.size(), 0) == 4096);
  CHECK(head == data.substr(0, 4096));
  hold->wait_for(data.size());
  CHECK(hold->complete());
  CHECK(read_all(*hold) == data);
}

TEST_CASE("A shard a reader waits for gets its first part before its other parts start",
          "[remote][cache]") {
  TempDir scratch("cache");
  const RemoteServers& s = RemoteServers::get();
  const std::string data = pattern_bytes(1 << 20, 23);
  const std::string name = put_www(unique_key("head.tar"), data);
  // 60 ms between nginx's last byte of a part and the next request reaching it: the proxy
  // delays each direction by half of that.
  FaultProxy slow(s.http_port, {"--latency-ms", "60"});
  const RemoteOptions o = small_parts(scratch.path + "/cache");
  auto cache = ShardCache::process(o);
  const std::string url = fmt::format("http://127.0.0.1:{}/{}", slow.port(), name);
  auto hold = cache->acquire(remote(url, data.size()), Need::kNow, nullptr);
  hold->wait_for(data.size());
  REQUIRE(hold->complete());
  REQUIRE(read_all(*hold) == data);
  const auto gets = gets_by_range(name);
  REQUIRE(gets.size() == 16);
  const ServedRequest head = gets.at(0);
  for (const auto& [begin, get] : gets) {
    CAPTURE(begin, get.start, head.end);
    // Parts 0 and 1 start together; the rest only once part 0 is in (60 ms after nginx sent
    // its last byte: 30 ms is the margin). Started at once, they would begin before it ended.
    if (begin >= 2 * o.part_size) CHECK(get.start >= head.end + 0.030);
  }
}

TEST_CASE("A reader that starts mid-shard gets its part first, from another process too",
          "[remote][cache]") {
  TempDir scratch("cache");
  const RemoteServers& s = RemoteServers::get();
  const std::string data = pattern_bytes(1 << 20, 24);
  const std::string name = put_www(unique_key("middle.tar"), data);
  FaultProxy slow(s.http_port, {"--latency-ms", "200"});
  const RemoteOptions o = small_parts(scratch.path + "/cache");
  const std::string url = fmt::format("http://127.0.0.1:{}/{}", slow.port(), name);
  const RemoteFile file = remote(url, data.size());
  const std::string entry = ShardCache::process(o)->entry_path(url);
  // A child downloads the shard for a reader of its start; this process reads from part 10 on.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 1;
    try {
      auto hold = ShardCache::process(o)->acquire(file, Need::kNow, nullptr);
      hold->wait_for(hold->size());
      code = read_all(*hold) == data ? 0 : 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    ::_exit(code);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!fs::exists(entry + ".stoker-part") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::uint64_t from = 10 * o.part_size + 100;
  auto hold = ShardCache::process(o)->acquire(file, Need::kNow, nullptr, {}, from);
  REQUIRE(hold != nullptr);
  REQUIRE_FALSE(hold->complete());  // the child downloads it
  hold->wait_from(from, from + 4096);
  const std::uint64_t ready = hold->readable_from(from);
  CHECK(ready >= from + 4096);
  std::string bytes(ready - from, '\0');
  REQUIRE(posix::pread_full(hold->fd(), bytes.data(), bytes.size(), static_cast<off_t>(from)) ==
          static_cast<ssize_t>(bytes.size()));
  CHECK(bytes == data.substr(from, bytes.size()));
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  const auto gets = gets_by_range(name);
  REQUIRE(gets.size() == 16);
  // In order, part 10 would start a round trip (200 ms) after part 2, once parts 2 to 9 had
  // begun and one of them ended; published, it starts when the child's download sees it: its
  // client's watch looks every few ms, before the first bytes come a round trip after part 0
  // started (seen only at those bytes, part 10 would start 200 ms after part 0). Half a round
  // trip is the margin.
  const auto start_of = [&](std::uint64_t part) { return gets.at(part * o.part_size).start; };
  CAPTURE(start_of(0), start_of(2), start_of(3), start_of(10), start_of(11));
  CHECK(start_of(10) <= start_of(0) + 0.100);
  CHECK(start_of(10) <= start_of(2) + 0.100);
  CHECK(start_of(11) <= start_of(3) + 0.100);  // and the reader's next part follows it
}

TEST_CASE("Processes that want the same shard download it once", "[remote][cache]") {
  TempDir scratch("cache");
  const RemoteServers& s = RemoteServers::get();
  const std::string data = pattern_bytes(3 << 20, 23);
  const std::string name = put_www(unique_key("once.tar"), data);
  FaultProxy slow(s.http_port, {"--latency-ms", "50"});
  RemoteOptions o = s.s3_options(scratch.path + "/cache");
  o.part_size = 256 << 10;
  o.parts_in_flight = 2;
  const std::string url = fmt::format("http://127.0.0.1:{}/{}", slow.port(), name);
  SharedCounters shared;
  std::vector<pid_t> children;
  for (int i = 0; i < 3; ++i) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 1;
      try {
        auto hold =
            ShardCache::process(o)->acquire(remote(url, data.size()), Need::kNow, shared.counters);
        hold->wait_for(hold->size());
        code = read_all(*hold) == data ? 0 : 2;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child: %s\n", e.what());
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  for (const pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  const RemoteStats st = shared.counters->snapshot();
  CHECK(st.bytes_fetched == data.size());  // once, not three times
  CHECK(st.cache_misses + st.cache_hits == 3);
}

TEST_CASE("LRU eviction removes unheld entries only, and never a file the cache did not make",
          "[remote][cache]") {
  TempDir scratch("cache");
  const RemoteServers& s = RemoteServers::get();
  constexpr std::size_t kSize = 200000;
  RemoteOptions o = s.s3_options(scratch.path + "/cache");
  o.cache_limit = 3 * kSize + kSize / 2;  // room for three
  o.timeouts.cache_room = std::chrono::milliseconds(300);
  std::vector<std::string> urls;
  for (std::size_t i = 0; i < 5; ++i) {
    urls.push_back(
        s.http(put_www(unique_key(fmt::format("lru-{}.tar", i)), pattern_bytes(kSize, 30 + i))));
  }
  auto cache = ShardCache::process(o);
  // A file of the user's in the cache's directory tree.
  const std::string foreign = cache->dir() + "/http/mine.bin";
  fs::create_directories(cache->dir() + "/http");
  write_file(foreign, std::string(kSize * 4, 'x'));
  RemoteCounters counters;
  auto get = [&](std::size_t i) {
    auto h = cache->acquire(remote(urls[i], kSize), Need::kNow, &counters);
    h->wait_for(kSize);
    return h;
  };
  get(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  get(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto held = get(2);  // held from here on
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  get(0);  // a hit makes 0 the most recently used
  CHECK(counters.snapshot().cache_hits == 1);
  get(3);  // evicts 1, the least recently used
  CHECK(counters.snapshot().evictions == 1);
  CHECK_FALSE(fs::exists(cache->entry_path(urls[1])));
  CHECK(fs::exists(cache->entry_path(urls[0])));
  get(4);  // evicts 0 (2 is held, 3 is newer)
  CHECK_FALSE(fs::exists(cache->entry_path(urls[0])));
  CHECK(fs::exists(cache->entry_path(urls[2])));
  CHECK(fs::exists(cache->entry_path(urls[3])));
  CHECK(fs::exists(foreign));
  CHECK(fs::file_size(foreign) == kSize * 4);
  CHECK(cache->usage().first == 3);

  // A file of the user's where an entry would go is neither read nor replaced.
  write_file(cache->entry_path(urls[1]), "not a shard");
  const std::string message = message_of<Error>([&] { get(1); });
  CHECK(message == fmt::format("remote cache: {} exists but the cache did not make it (no "
                               ".stoker-meta beside it), so it is neither read nor replaced; move "
                               "it away, or set RemoteOptions::cache_dir to a directory of its own",
                               cache->entry_path(urls[1])));
  CHECK(test::read_file(cache->entry_path(urls[1])) == "not a shard");
}

TEST_CASE("A cache too small for what its readers hold is a clear error, not a wait forever",
          "[remote][cache]") {
  TempDir scratch("cache");
  const RemoteServers& s = RemoteServers::get();
  constexpr std::size_t kSize = 300000;
  RemoteOptions o = s.s3_options(scratch.path + "/cache");
  o.cache_limit = kSize + kSize / 2;  // one shard
  o.timeouts.cache_room = std::chrono::milliseconds(300);
  const std::string a = s.http(put_www(unique_key("a.tar"), pattern_bytes(kSize, 40)));
  const std::string b = s.http(put_www(unique_key("b.tar"), pattern_bytes(kSize, 41)));
  auto cache = ShardCache::process(o);
  auto held = cache->acquire(remote(a, kSize), Need::kNow, nullptr);
  held->wait_for(kSize);
  // Read-ahead does not wait: no room, no read-ahead.
  CHECK(cache->acquire(remote(b, kSize), Need::kAhead, nullptr) == nullptr);
  bool released = false;
  const auto started = std::chrono::steady_clock::now();
  const std::string message = message_of<Error>(
      [&] { cache->acquire(remote(b, kSize), Need::kNow, nullptr, [&] { released = true; }); });
  CHECK(released);  // the reader was asked to let go of what it does not need
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
  INFO(message);
  CHECK(message.find(fmt::format("remote cache: no room for {}", cache->entry_path(b))) == 0);
  CHECK(message.find("cache_limit is 439.5 KiB, readers hold 293.0 KiB (1 shard) and downloads "
                     "in progress 0 B; raise RemoteOptions::cache_limit to at least 585.9 KiB") !=
        std::string::npos);
  // Once the holder lets go, there is room.
  held.reset();
  auto next = cache->acquire(remote(b, kSize), Need::kNow, nullptr);
  next->wait_for(kSize);
  CHECK(next->complete());
}

TEST_CASE("A failed download leaves no complete file: truncated bodies, full disks, bad hashes",
          "[remote][cache][faults]") {
  TempDir scratch("cache");
  const RemoteServers& s = RemoteServers::get();
  const std::string data = pattern_bytes(400000, 50);
  const std::string name = put_www(unique_key("fail.tar"), data);
  RemoteOptions o = s.s3_options(scratch.path + "/cache");
  o.retries.attempts = 2;

  SECTION("every try cut short") {
    FaultProxy cut(s.http_port, {"--fault", "truncate", "--after", "100000"});
    auto cache = ShardCache::process(o);
    const std::string url = fmt::format("http://127.0.0.1:{}/{}", cut.port(), name);
    auto hold = cache->acquire(remote(url, data.size()), Need::kNow, nullptr);
    const std::string message = message_of<RemoteError>([&] { hold->wait_for(data.size()); });
    CHECK(message.find("gave up after 2 attempts (last: the body was cut short") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(cache->entry_path(url)));
    CHECK_FALSE(any_ending(files_below(cache->dir()), ".stoker-part"));
  }
  SECTION("the disk is full") {
    auto cache = ShardCache::process(o);
    const std::string url = s.http(name);
    posix::inject_failure(posix::Call::kPwrite, ENOSPC, 1);
    auto hold = cache->acquire(remote(url, data.size()), Need::kNow, nullptr);
    const std::string message = message_of<RemoteError>([&] { hold->wait_for(data.size()); });
    posix::clear_injected_failures();
    CHECK(message.find(fmt::format("cannot write {}.stoker-part: ", cache->entry_path(url))) !=
          std::string::npos);
    CHECK(message.find("No space left on device") != std::string::npos);
    CHECK_FALSE(fs::exists(cache->entry_path(url)));
  }
  SECTION("the check of the complete file fails") {
    auto cache = ShardCache::process(o);
    RemoteFile f = remote(s.http(name), data.size());
    f.verify = [](int, std::uint64_t) { throw Error("MdsDataset: hash mismatch (test)"); };
    f.verify_token = "test";
    auto hold = cache->acquire(f, Need::kNow, nullptr);
    CHECK(message_of<Error>([&] { hold->wait_for(data.size()); }) ==
          "MdsDataset: hash mismatch (test)");
    CHECK_FALSE(fs::exists(cache->entry_path(f.url)));
  }
}

TEST_CASE("A partial file left by a killed process is never read, and its follower takes over",
          "[remote][cache][faults]") {
  TempDir scratch("cache");
  const RemoteServers& s = RemoteServers::get();
  const std::string data = pattern_bytes(600000, 60);
  const std::string name = put_www(unique_key("killed.tar"), data);
  // The first connection stalls after 100 KB, forever: the child downloading through it hangs.
  FaultProxy stall(s.http_port, {"--fault", "stall", "--after", "100000", "--times", "1"});
  RemoteOptions o = s.s3_options(scratch.path + "/cache");
  o.parts_in_flight = 1;
  const std::string url = fmt::format("http://127.0.0.1:{}/{}", stall.port(), name);
  const std::string entry = ShardCache::process(o)->entry_path(url);
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto hold = ShardCache::process(o)->acquire(remote(url, data.size()), Need::kNow, nullptr);
    hold->wait_for(50000);
    (void)!::write(ready[1], "x", 1);
    hold->wait_for(data.size());  // stalls
    ::_exit(0);
  }
  char c;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  ::close(ready[1]);
  // This process follows the child's download, then the child dies.
  auto hold = ShardCache::process(o)->acquire(remote(url, data.size()), Need::kNow, nullptr);
  CHECK_FALSE(hold->complete());
  CHECK(fs::exists(entry + ".stoker-part"));
  std::thread killer([child] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::kill(child, SIGKILL);
  });
  hold->wait_for(data.size());  // takes over after the death
  killer.join();
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(hold->complete());
  CHECK(read_all(*hold) == data);
  CHECK(test::read_file(entry) == data);

  // A .part with garbage and nobody's lock: never read, downloaded again.
  hold.reset();
  fs::remove(entry);
  fs::remove(entry + ".stoker-meta");
  write_file(entry + ".stoker-part", std::string(data.size(), 'G'));
  auto fresh = ShardCache::process(o)->acquire(remote(url, data.size()), Need::kNow, nullptr);
  fresh->wait_for(data.size());
  CHECK(read_all(*fresh) == data);
  CHECK(stall.stop() == 1);
}
