// Remote shards through the datasets and the loader: WebDataset tar shards, TFRecord files and
// an MDS directory on s3rver and nginx read map-style and streaming exactly as their local
// copies; index files found beside the shards on the server; list_shards() over brace ranges
// and S3 prefixes; stoker-shard --output uploads; a 2-worker loader that downloads each shard
// once and delivers every sample once under injected resets; the loader's timeout still
// holding when a server stalls; and two mpirun ranks on one node fetching each shard once.
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "datasets/remote/shard_cache.hpp"
#include "remote/remote_support.hpp"
#include "stoker/data_loader.hpp"
#include "stoker/mds_dataset.hpp"
#include "stoker/remote.hpp"
#include "stoker/remote_shards.hpp"
#include "stoker/tfrecord_dataset.hpp"
#include "stoker/webdataset.hpp"
#include "support/error_message.hpp"

using namespace stoker;
using namespace stoker::test;
namespace fs = std::filesystem;

namespace {

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// Tar shards of `per_shard` samples each under dir: sample i has "index" (i) and "bin" (a
// payload of `payload` bytes from i). Returns the shard paths (their .idx beside them).
std::vector<std::string> write_tar_shards(const std::string& dir, std::size_t shards,
                                          std::size_t per_shard, std::size_t payload) {
  std::vector<std::string> paths;
  std::size_t next = 0;
  for (std::size_t j = 0; j < shards; ++j) {
    WebDatasetWriterOptions options;
    options.pattern = fmt::format("{}/shard-{:03}-%d.tar", dir, j);
    WebDatasetWriter writer(options);
    for (std::size_t k = 0; k < per_shard; ++k, ++next) {
      const std::string index = std::to_string(next);
      const std::string bin = pattern_bytes(payload, next);
      const std::pair<std::string, std::span<const std::byte>> fields[] = {
          {"index", as_bytes(index)}, {"bin", as_bytes(bin)}};
      writer.write(fmt::format("{:06}", next), fields);
    }
    for (std::string& p : writer.close()) paths.push_back(std::move(p));
  }
  return paths;
}

// Uploads every file of `local` (and its .idx when `with_index`) under s3://bucket/<prefix>.
std::vector<std::string> upload_all(const std::vector<std::string>& local,
                                    const std::string& prefix, const RemoteOptions& o,
                                    bool with_index) {
  std::vector<std::string> urls;
  for (const std::string& p : local) {
    const std::string url = fmt::format("s3://{}/{}{}", RemoteServers::get().bucket, prefix,
                                        fs::path(p).filename().string());
    upload_file(p, url, o);
    if (with_index && fs::exists(p + ".idx")) upload_file(p + ".idx", url + ".idx", o);
    urls.push_back(url);
  }
  return urls;
}

// Puts the shards `local` and their .idx files into nginx's root under `dir`; returns `dir`.
std::string put_www_shards(const std::vector<std::string>& local, const std::string& dir) {
  for (const std::string& p : local) {
    const std::string name = dir + "/" + fs::path(p).filename().string();
    put_www(name, read_file(p));
    put_www(name + ".idx", read_file(p + ".idx"));
  }
  return dir;
}

// Their URLs through the server (or a proxy) on `port`.
std::vector<std::string> www_urls(const std::vector<std::string>& local, const std::string& dir,
                                  int port) {
  std::vector<std::string> urls;
  for (const std::string& p : local) {
    urls.push_back(
        fmt::format("http://127.0.0.1:{}/{}/{}", port, dir, fs::path(p).filename().string()));
  }
  return urls;
}

std::int64_t index_of(const Sample& s) { return s["index"].data<std::int64_t>()[0]; }

std::string bytes_of(const Tensor& t) {
  return std::string(reinterpret_cast<const char*>(t.raw_data()), t.nbytes());
}

// Every sample of a stream's epoch: (index, payload).
std::vector<std::pair<std::int64_t, std::string>> drain(ShardedStream& stream,
                                                        std::uint64_t epoch) {
  std::vector<std::pair<std::int64_t, std::string>> out;
  stream.start_epoch(epoch);
  while (auto s = stream.next()) out.emplace_back(index_of(*s), bytes_of((*s)["bin"]));
  return out;
}

std::uint64_t total_size(const std::vector<std::string>& paths) {
  std::uint64_t n = 0;
  for (const std::string& p : paths) n += fs::file_size(p);
  return n;
}

}  // namespace

TEST_CASE("WebDataset shards on S3 read map-style as their local copies, indexes from the server",
          "[remote][datasets]") {
  TempDir scratch("wds");
  const RemoteServers& s = RemoteServers::get();
  const auto local = write_tar_shards(scratch.path, 3, 20, 3000);
  ShardOptions options;
  options.remote = s.s3_options(scratch.path + "/cache");
  const std::string prefix = unique_key("wds/");
  const auto urls = upload_all(local, prefix, options.remote, true);

  WebDatasetShards mine(local);
  WebDatasetShards remote(urls, options);
  REQUIRE(remote.size() == 60);
  REQUIRE(remote.num_shards() == 3);
  CHECK(remote.shard_name(1) == urls[1]);
  // The indexes came from the server: nothing but them was fetched yet.
  const RemoteStats before = remote.remote_stats();
  CHECK(before.cache_misses == 3);  // the three .idx files
  CHECK(before.bytes_fetched < 3 * 4096);
  for (std::size_t i = 0; i < remote.size(); ++i) {
    const Sample a = mine.get(i);
    const Sample b = remote.get(i);
    CHECK(index_of(b) == static_cast<std::int64_t>(i));
    CHECK(bytes_of(b["bin"]) == bytes_of(a["bin"]));
  }
  const RemoteStats after = remote.remote_stats();
  CHECK(after.bytes_fetched - before.bytes_fetched == total_size(local));  // each shard once
  CHECK(after.cache_misses == 6);

  // Without index files on the server: each shard is downloaded once to be indexed, and its
  // index is kept in the cache for the next time.
  const auto bare = upload_all(local, unique_key("bare/"), options.remote, false);
  WebDatasetShards first(bare, options);
  CHECK(first.remote_stats().bytes_fetched == total_size(local));
  WebDatasetShards second(bare, options);
  CHECK(second.remote_stats().bytes_fetched == 0);
  CHECK(second.remote_stats().cache_hits == 0);  // the cached indexes, not the shards, were read
  CHECK(index_of(second.get(59)) == 59);
}

TEST_CASE("A remote tar stream yields what the local stream yields, reading ahead",
          "[remote][datasets]") {
  TempDir scratch("wds");
  const RemoteServers& s = RemoteServers::get();
  const auto local = write_tar_shards(scratch.path, 4, 25, 20000);
  const std::string dir = put_www_shards(local, unique_key("stream"));
  FaultProxy slow(s.http_port, {"--latency-ms", "20"});
  const std::vector<std::string> urls = www_urls(local, dir, slow.port());
  ShardOptions options;
  options.remote = s.s3_options(scratch.path + "/cache");
  options.remote.part_size = 256 << 10;
  options.remote.read_ahead_shards = 2;
  StreamOptions so;
  so.shuffle_buffer = 16;
  so.seed = 7;
  ShardedStream mine = WebDatasetShards::stream(local, so);
  ShardedStream remote = WebDatasetShards::stream(urls, so, options);
  CHECK(remote.total_samples() == 100);
  const auto expected = drain(mine, 3);
  const auto got = drain(remote, 3);
  CHECK(got == expected);
  const RemoteStats st = remote.remote_stats();
  CHECK(st.bytes_fetched >= total_size(local));
  CHECK(st.bytes_fetched < total_size(local) + 4 * 64 * 1024);  // + the index files
  CHECK(st.retries == 0);
  // The next epoch reads the cache: nothing more comes over the network.
  CHECK(drain(remote, 4) == drain(mine, 4));
  CHECK(remote.remote_stats().bytes_fetched == st.bytes_fetched);
}

TEST_CASE("The index files of remote shards are fetched side by side, not one after another",
          "[remote][datasets]") {
  TempDir scratch("wds");
  const RemoteServers& s = RemoteServers::get();
  const auto local = write_tar_shards(scratch.path, 4, 5, 100);
  const std::string dir = put_www_shards(local, unique_key("side"));
  // 100 ms between nginx sending a response and the client's next request reaching it.
  FaultProxy slow(s.http_port, {"--latency-ms", "100"});
  ShardOptions options;
  options.remote = s.s3_options(scratch.path + "/cache");
  WebDatasetShards remote(www_urls(local, dir, slow.port()), options);
  REQUIRE(remote.size() == 20);
  CHECK(remote.remote_stats().cache_misses == 4);  // the four index files, nothing else
  std::vector<ServedRequest> gets;
  for (const std::string& p : local) {
    for (ServedRequest& r :
         served_requests("/" + dir + "/" + fs::path(p).filename().string() + ".idx")) {
      if (r.range_begin) gets.push_back(std::move(r));
    }
  }
  REQUIRE(gets.size() == 4);
  // The HEADs (no Range) of the four shards and of their four index files: one round. One
  // after the other, the index files' would reach nginx 100 ms after the shards' answers.
  std::vector<ServedRequest> heads;
  for (const std::string& p : local) {
    const std::string uri = "/" + dir + "/" + fs::path(p).filename().string();
    for (const std::string& u : {uri, uri + ".idx"}) {
      for (ServedRequest& r : served_requests(u)) {
        if (!r.range_begin) heads.push_back(std::move(r));
      }
    }
  }
  REQUIRE(heads.size() == 8);
  double first_head = heads[0].start;
  double last_head = heads[0].start;
  for (const ServedRequest& r : heads) {
    first_head = std::min(first_head, r.start);
    last_head = std::max(last_head, r.start);
  }
  CAPTURE(first_head, last_head);
  CHECK(last_head < first_head + 0.050);
  double first_end = gets[0].end;
  for (const ServedRequest& r : gets) first_end = std::min(first_end, r.end);
  for (const ServedRequest& r : gets) {
    CAPTURE(r.uri, r.start, first_end);
    // Every GET reached nginx before the first one's answer could have come back through the
    // proxy and a next request gone out (100 ms): fetched one after another, the second would
    // start at least 100 ms after the first ended (200 with its HEAD).
    CHECK(r.start < first_end + 0.050);
  }
  for (std::size_t i = 0; i < remote.size(); ++i) {
    CHECK(index_of(remote.get(i)) == static_cast<std::int64_t>(i));
  }
}

TEST_CASE("A missing remote shard fails when the dataset is built, also one read only as a stream",
          "[remote][datasets]") {
  // A compressed shard with its sample count given is never opened nor indexed while the
  // stream is built: its HEAD still runs then, so the 404 comes here and not from a worker.
  TempDir scratch("wds");
  const RemoteServers& s = RemoteServers::get();
  ShardOptions options;
  options.remote = s.s3_options(scratch.path + "/cache");
  StreamOptions so;
  so.sample_counts = {3};
  const std::string url = s.http(unique_key("absent") + "/shard-000.tar.gz");
  try {
    (void)WebDatasetShards::stream({url}, so, options);
    FAIL("no error for a shard the server does not have");
  } catch (const RemoteError& e) {
    CHECK(e.status() == 404);
    CHECK(e.url() == url);
  }
}

TEST_CASE("A 2-worker loader over remote shards downloads each once and loses no sample to resets",
          "[remote][datasets][faults]") {
  TempDir scratch("wds");
  const RemoteServers& s = RemoteServers::get();
  const auto local = write_tar_shards(scratch.path, 4, 32, 10000);
  ShardOptions options;
  options.remote = s.s3_options(scratch.path + "/cache");
  const auto urls = upload_all(local, unique_key("loader/"), options.remote, true);
  // The first four connections that GET a shard are reset after 100 KB: parts resume where they
  // stopped. (The main process's HEADs and index reads are not among them: they are too short to
  // reach a cut, and would use up the four.)
  FaultProxy resets(s.s3_port, {"--fault", "reset", "--after", "100000", "--times", "4", "--method",
                                "GET", "--match", ".tar HTTP"});
  options.remote.endpoint = fmt::format("http://127.0.0.1:{}", resets.port());
  options.remote.part_size = 128 << 10;
  StreamOptions so;
  so.shuffle_buffer = 8;
  LoaderOptions lo;
  lo.batch_size = 8;
  lo.num_workers = 2;
  lo.timeout = std::chrono::seconds(60);
  DataLoader loader(WebDatasetShards::stream(urls, so, options), lo);
  std::multiset<std::int64_t> seen;
  for (const Batch& b : loader) {
    const std::int64_t* ix = b["index"].data<std::int64_t>();
    for (std::size_t i = 0; i < b.size(); ++i) seen.insert(ix[i]);
  }
  CHECK(seen.size() == 128);
  CHECK(std::set<std::int64_t>(seen.begin(), seen.end()).size() == 128);  // none twice
  CHECK(*seen.begin() == 0);
  CHECK(*seen.rbegin() == 127);
  CHECK(resets.stop() == 4);
  const LoaderStats stats = loader.stats();
  // Both workers' downloads are counted in the main process: each shard came once.
  CHECK(stats.remote_bytes_fetched >= total_size(local));
  CHECK(stats.remote_bytes_fetched < total_size(local) + 4 * 8192);
  CHECK(stats.remote_retries >= 4);
  CHECK(stats.remote_cache_misses >= 4);
  // The next epoch's workers find every shard in the cache (the proxy is gone: a download would
  // fail): the first epoch's workers published their downloads before they exited, though
  // their readers may have read every byte before the last transfer ended.
  std::size_t again = 0;
  for (const Batch& b : loader) again += b.size();
  CHECK(again == 128);
  CHECK(loader.stats().remote_bytes_fetched == 0);
  CHECK(loader.stats().remote_cache_misses == 0);
}

TEST_CASE("The loader's timeout holds when a server stalls: an error, not a hang",
          "[remote][datasets][faults]") {
  TempDir scratch("wds");
  const RemoteServers& s = RemoteServers::get();
  const auto local = write_tar_shards(scratch.path, 1, 8, 100000);
  ShardOptions options;
  options.remote = s.s3_options(scratch.path + "/cache");
  const auto urls = upload_all(local, unique_key("stall/"), options.remote, true);
  FaultProxy stall(
      s.s3_port, {"--fault", "stall", "--after", "50000", "--match", ".tar HTTP", "--times", "0"});
  options.remote.endpoint = fmt::format("http://127.0.0.1:{}", stall.port());
  options.remote.timeouts.low_speed_time = std::chrono::seconds(60);  // longer than the loader's
  LoaderOptions lo;
  lo.batch_size = 4;
  lo.num_workers = 1;
  lo.timeout = std::chrono::milliseconds(1500);
  DataLoader loader(WebDatasetShards::stream(urls, {}, options), lo);
  const auto started = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(
      [&] {
        for (const Batch& b : loader) (void)b;
      }(),
      LoaderTimeout);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(20));
}

TEST_CASE("TFRecord files on S3: map-style and streaming, indexed once", "[remote][datasets]") {
  TempDir scratch("tfr");
  const RemoteServers& s = RemoteServers::get();
  std::vector<std::string> local;
  for (int f = 0; f < 2; ++f) {
    const std::string path = fmt::format("{}/part-{}.tfrecord", scratch.path, f);
    TFRecordWriter w(path);
    for (std::int64_t k = 0; k < 30; ++k) {
      Sample e;
      e.set("index", Tensor::from<std::int64_t>({f * 30 + k}, {1}));
      const auto n = static_cast<std::size_t>(100 + k);
      e.set("bin", Tensor::from<std::uint8_t>(
                       std::vector<std::uint8_t>(n, static_cast<std::uint8_t>(k)), {100 + k}));
      w.write_example(e);
    }
    w.close();
    local.push_back(path);
  }
  TFRecordOptions options;
  options.remote = s.s3_options(scratch.path + "/cache");
  const auto urls = upload_all(local, unique_key("tfr/"), options.remote, false);
  TFRecordDataset mine(local);
  TFRecordDataset remote(urls, options);
  REQUIRE(remote.size() == 60);
  for (std::size_t i = 0; i < 60; ++i) {
    CHECK(remote.get(i)["index"].data<std::int64_t>()[0] == static_cast<std::int64_t>(i));
    CHECK(bytes_of(remote.get(i)["bin"]) == bytes_of(mine.get(i)["bin"]));
  }
  const std::uint64_t fetched = remote.remote_stats().bytes_fetched;
  CHECK(fetched == total_size(local));
  StreamOptions so;
  so.shuffle = false;
  ShardedStream stream = TFRecordDataset::stream(urls, so, options);
  stream.start_epoch(0);
  std::int64_t expect = 0;
  while (auto e = stream.next()) CHECK((*e)["index"].data<std::int64_t>()[0] == expect++);
  CHECK(expect == 60);
  CHECK(stream.remote_stats().bytes_fetched == 0);  // the cache had both files
}

TEST_CASE("An MDS directory on S3: index.json and shards through the cache, hashes checked",
          "[remote][datasets]") {
  TempDir scratch("mds");
  const RemoteServers& s = RemoteServers::get();
  const std::string dir = scratch.path + "/mds";
  const std::string cmd = fmt::format(
      "/usr/bin/python3 {}/write_records.py mds {} 50 20 "
      "--hashes sha1,md5",
      STOKER_TEST_SUPPORT_DIR, dir);
  REQUIRE(std::system(cmd.c_str()) == 0);
  MdsOptions options;
  options.remote = s.s3_options(scratch.path + "/cache");
  const std::string prefix = unique_key("mds");
  for (const auto& e : fs::directory_iterator(dir)) {
    upload_file(e.path().string(),
                fmt::format("s3://{}/{}/{}", s.bucket, prefix, e.path().filename().string()),
                options.remote);
  }
  const std::string url = fmt::format("s3://{}/{}", s.bucket, prefix);
  MdsDataset mine(dir);
  MdsDataset remote(url, options);
  REQUIRE(remote.size() == 50);
  for (std::size_t i = 0; i < 50; ++i) {
    CHECK(bytes_of(remote.get(i)["text"]) == bytes_of(mine.get(i)["text"]));
  }
  ShardedStream stream = MdsDataset::stream(url, {}, options);
  std::size_t n = 0;
  stream.start_epoch(0);
  while (stream.next()) ++n;
  CHECK(n == 50);

  // A shard whose bytes are not the ones index.json hashed: refused when it arrives.
  const std::string shard = fs::path(remote.shard_name(0)).filename().string();
  std::string bytes = read_file(dir + "/" + shard);
  bytes[bytes.size() - 1] = static_cast<char>(bytes.back() ^ 0x5a);
  write_file(scratch.path + "/bad", bytes);
  const std::string bad_prefix = unique_key("mds-bad");
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    upload_file(name == shard ? scratch.path + "/bad" : e.path().string(),
                fmt::format("s3://{}/{}/{}", s.bucket, bad_prefix, name), options.remote);
  }
  MdsDataset damaged(fmt::format("s3://{}/{}", s.bucket, bad_prefix), options);
  const std::string message = message_of<MdsError>([&] { damaged.get(0); });
  CHECK(message.find("hash mismatch") != std::string::npos);
  // Not kept: the next reader downloads it again (and is refused again).
  CHECK_FALSE(
      fs::exists(detail::ShardCache::process(options.remote)->entry_path(damaged.shard_name(0))));
}

TEST_CASE("list_shards: brace ranges, S3 prefixes and globs with every page", "[remote][names]") {
  TempDir scratch("list");
  const RemoteServers& s = RemoteServers::get();
  RemoteOptions o = s.s3_options(scratch.path + "/cache");
  const std::string prefix = unique_key("names/");
  write_file(scratch.path + "/x", "x");
  for (const char* name : {"train-000.tar", "train-001.tar", "train-002.tar", "train-000.tar.idx",
                           "val-000.tar", "deeper/train-009.tar"}) {
    upload_file(scratch.path + "/x", fmt::format("s3://{}/{}{}", s.bucket, prefix, name), o);
  }
  const std::string base = fmt::format("s3://{}/{}", s.bucket, prefix);
  CHECK(list_shards(base + "train-{000..002}.tar", o) ==
        std::vector<std::string>{base + "train-000.tar", base + "train-001.tar",
                                 base + "train-002.tar"});
  CHECK(list_shards(base + "train-*.tar", o) == std::vector<std::string>{base + "train-000.tar",
                                                                         base + "train-001.tar",
                                                                         base + "train-002.tar"});
  CHECK(list_shards(base, o).size() == 5);  // every object under the prefix but the index
  CHECK(list_shards("/local/a-{0..1}.tar", o) ==
        std::vector<std::string>{"/local/a-0.tar", "/local/a-1.tar"});
  CHECK(message_of<std::invalid_argument>([&] {
          list_shards("https://host/dir/*.tar", o);
        }).find("only s3:// prefixes can (HTTP has no listing)") != std::string::npos);
  CHECK(fetch_to_cache(base + "val-000.tar", o).find(scratch.path + "/cache/s3/") == 0);
}

TEST_CASE("stoker-shard --output uploads the shards and their indexes to S3", "[remote][tool]") {
#ifndef STOKER_SHARD_TOOL
  WARN("not run: stoker-shard is not built (STOKER_BUILD_BENCH off)");  // Catch2 2 has no SKIP
#else
  TempDir scratch("tool");
  const RemoteServers& s = RemoteServers::get();
  const std::string npy = scratch.path + "/x.npy";
  {
    // A uint8 array of 10 rows of 4.
    // Magic, version 1.0, the header's length (118: 10 + 118 is a multiple of 64), the header.
    std::string header = "{'descr': '|u1', 'fortran_order': False, 'shape': (10, 4), }";
    header.resize(117, ' ');
    header += '\n';
    std::string file = std::string("\x93NUMPY\x01\x00", 8) + std::string(1, '\x76') + '\0' + header;
    for (int i = 0; i < 40; ++i) file.push_back(static_cast<char>(i));
    write_file(npy, file);
  }
  const std::string prefix = unique_key("tool");
  const std::string cmd = fmt::format(
      "AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER {} --npy x={} --output "
      "s3://{}/{}/part-%03d.tar --max-samples 4 --endpoint {} --quiet",
      STOKER_SHARD_TOOL, npy, s.bucket, prefix, s.s3_endpoint());
  REQUIRE(std::system(cmd.c_str()) == 0);
  RemoteOptions o = s.s3_options(scratch.path + "/cache");
  const auto names = list_shards(fmt::format("s3://{}/{}/part-*.tar", s.bucket, prefix), o);
  REQUIRE(names.size() == 3);
  ShardOptions so;
  so.remote = o;
  WebDatasetShards ds(names, so);
  CHECK(ds.size() == 10);
  CHECK(ds.remote_stats().bytes_fetched < 2048);  // the indexes were uploaded too
#endif
}

TEST_CASE("mpirun -np 2 on one node: each shard is downloaded once for both ranks",
          "[remote][datasets][mpi]") {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) {
    FAIL("mpirun is not installed (Debian: openmpi-bin; scripts/test.sh installs it)");
  }
  TempDir scratch("ranks");
  const RemoteServers& s = RemoteServers::get();
  const auto local = write_tar_shards(scratch.path, 4, 40, 20000);
  ShardOptions options;
  options.remote = s.s3_options(scratch.path + "/upload-cache");
  const auto urls = upload_all(local, unique_key("ranks/"), options.remote, true);
  std::uint64_t index_size = 0;
  for (const std::string& p : local) index_size += fs::file_size(p + ".idx");

  // One cache directory for the node, as two ranks on one machine would be given.
  std::string command = fmt::format(
      "timeout -k 10 120 mpirun -np 2 --oversubscribe --allow-run-as-root -x ASAN_OPTIONS=detect_"
      "leaks=0 -x STOKER_REMOTE_SERVERS {} {} {}",
      STOKER_REMOTE_RANKS_PROGRAM, scratch.path, scratch.path + "/node-cache");
  for (const std::string& u : urls) command += " " + u;
  command += " 2>&1";
  INFO(command);
  const int rc = std::system(command.c_str());
  REQUIRE(WIFEXITED(rc));
  REQUIRE(WEXITSTATUS(rc) == 0);

  std::uint64_t index_bytes = 0;
  std::uint64_t shard_bytes = 0;
  std::multiset<std::int64_t> seen;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(fmt::format("{}/rank{}.txt", scratch.path, rank));
    REQUIRE(in.good());
    int file_rank = -1;
    int world = 0;
    std::uint64_t idx = 0;
    std::uint64_t tar = 0;
    in >> file_rank >> world >> idx >> tar;
    REQUIRE(file_rank == rank);
    REQUIRE(world == 2);
    index_bytes += idx;
    shard_bytes += tar;
    std::size_t count = 0;
    for (std::int64_t v; in >> v; ++count) seen.insert(v);
    CHECK(count == 80);  // 160 samples, half each
  }
  // Every sample once across the ranks, and every byte of the dataset fetched exactly once.
  CHECK(seen.size() == 160);
  CHECK(std::set<std::int64_t>(seen.begin(), seen.end()).size() == 160);
  CHECK(index_bytes == index_size);
  CHECK(shard_bytes == total_size(local));
}
