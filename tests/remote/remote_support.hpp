// Helpers of the remote tests: deterministic file contents, objects put on the test servers,
// and a downloaded range collected in memory.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "os/net/object_store.hpp"
#include "support/files.hpp"
#include "support/remote_servers.hpp"

namespace stoker::test {

// `n` bytes that differ with `seed` (and from one position to the next).
inline std::string pattern_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t v = rng();
    for (std::size_t k = 0; k < 8 && i + k < n; ++k) out[i + k] = static_cast<char>(v >> (8 * k));
  }
  return out;
}

// A key of its own for each test process (tests run in parallel against one s3rver).
inline std::string unique_key(const std::string& name) {
  return fmt::format("t{}-{}/{}", ::getpid(),
                     std::chrono::steady_clock::now().time_since_epoch().count(), name);
}

// Puts `bytes` at s3://<bucket>/<key> through the store (PUT, or multipart when large).
inline std::string put_s3(detail::net::ObjectStore& store, const std::string& key,
                          const std::string& bytes, const std::string& scratch_dir) {
  const std::string local = scratch_dir + "/upload-" + std::to_string(bytes.size());
  write_file(local, bytes);
  const std::string url = fmt::format("s3://{}/{}", RemoteServers::get().bucket, key);
  store.put_file(local, url);
  return url;
}

// Writes `bytes` into nginx's root; returns its path there.
inline std::string put_www(const std::string& name, const std::string& bytes) {
  const std::string path = RemoteServers::get().www + "/" + name;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  write_file(path, bytes);
  return name;
}

// A request nginx served, from its access log (servers.sh writes "<end> <duration> <uri>
// \"<Range header>\"", times in seconds by the server's clock).
struct ServedRequest {
  double start = 0;
  double end = 0;
  std::string uri;
  std::optional<std::uint64_t> range_begin;  // the first byte asked for, with a Range header
};

// The requests nginx has served so far whose path is `uri`.
inline std::vector<ServedRequest> served_requests(const std::string& uri) {
  std::vector<ServedRequest> out;
  std::istringstream log(read_file(RemoteServers::get().www + "/../nginx-access.log"));
  for (std::string line; std::getline(log, line);) {
    std::istringstream fields(line);
    ServedRequest r;
    double took = 0;
    std::string range;
    fields >> r.end >> took >> r.uri >> range;
    if (!fields || r.uri != uri) continue;
    r.start = r.end - took;
    if (range.rfind("\"bytes=", 0) == 0) r.range_begin = std::stoull(range.substr(7));
    out.push_back(std::move(r));
  }
  return out;
}

struct Fetched {
  std::string bytes;
  std::exception_ptr error;
};

// fetch_range() of [begin, end) collected in memory; waits at most `limit`.
inline Fetched fetch(detail::net::ObjectStore& store, const std::string& url, std::uint64_t begin,
                     std::uint64_t end, std::chrono::seconds limit = std::chrono::seconds(60)) {
  auto result = std::make_shared<Fetched>();
  result->bytes.assign(end - begin, '\0');
  std::promise<void> done;
  std::future<void> finished = done.get_future();
  store.fetch_range(
      url, begin, end, "",
      [result, begin](std::uint64_t offset, std::span<const std::byte> bytes, std::string&) {
        std::memcpy(result->bytes.data() + (offset - begin), bytes.data(), bytes.size());
        return true;
      },
      [result, &done](std::exception_ptr error) {
        result->error = error;
        done.set_value();
      });
  REQUIRE(finished.wait_for(limit) == std::future_status::ready);
  return *result;
}

}  // namespace stoker::test
