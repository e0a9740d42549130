// The shard readers and writers when the system says no: an open, a read (at the start or in the
// middle of a file), a write or the spawn of a pipe command made to fail through os/posix's
// fault injection. Each is a stoker::Error naming the file and the call, and leaves no
// descriptor or process behind.
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "os/posix.hpp"
#include "stoker/mnist_dataset.hpp"
#include "stoker/tfrecord_dataset.hpp"
#include "stoker/webdataset.hpp"
#include "support/clean_state.hpp"
#include "support/files.hpp"

using namespace stoker;
namespace posix = stoker::detail::posix;
using posix::Call;
using stoker::test::TempDir;

namespace {

// A 4 MiB tar shard of 64 samples of one 64 KiB field ("bin"), and its path.
std::string big_shard(const std::string& dir) {
  WebDatasetWriterOptions wo;
  wo.pattern = dir + "/big-%d.tar";
  wo.write_index = false;
  WebDatasetWriter writer(wo);
  const std::string bytes(64 * 1024, 'b');
  for (int i = 0; i < 64; ++i) {
    const std::pair<std::string, std::span<const std::byte>> fields[] = {
        {"bin", std::as_bytes(std::span<const char>(bytes.data(), bytes.size()))}};
    writer.write(fmt::format("k{:03}", i), fields);
  }
  return writer.close().at(0);
}

std::string tfrecord_file(const std::string& dir) {
  const std::string path = dir + "/f.tfrecord";
  TFRecordWriter writer(path);
  for (int i = 0; i < 3000; ++i) {
    Sample s;
    s.set("data", Tensor::from(std::vector<std::uint8_t>(1000, static_cast<std::uint8_t>(i))));
    writer.write(s);
  }
  writer.close();
  return path;
}

// Every record of a stream, counting the errors (each must satisfy `check`).
template <class Check>
std::pair<std::size_t, std::size_t> drain(ShardedStream& stream, Check&& check) {
  std::size_t good = 0;
  std::size_t errors = 0;
  for (std::size_t guard = 0; guard < 100000; ++guard) {
    try {
      if (!stream.next()) break;
      ++good;
    } catch (const Error& e) {
      check(e);
      ++errors;
    }
  }
  return {good, errors};
}

struct ClearInjections {
  ~ClearInjections() { posix::clear_injected_failures(); }
};

}  // namespace

TEST_CASE("an open that fails is an error naming the shard", "[shards][fault][io]") {
  TempDir tmp("io-open");
  const std::string shard = big_shard(tmp.path);
  const std::string records = tfrecord_file(tmp.path);
  const test::ProcessState baseline = test::process_state();
  {
    ClearInjections clear;
    WebDatasetShards tar({shard});
    TFRecordDataset tfr({records});
    // The datasets open their files lazily, in the process that reads.
    posix::inject_failure(Call::kOpen, EACCES);
    REQUIRE_THROWS_WITH(tar.get(0), Catch::Contains("cannot open shard " + shard) &&
                                        Catch::Contains("Permission denied"));
    REQUIRE(tar.get(0).size() == 1);  // the next open works
    posix::inject_failure(Call::kOpen, EACCES);
    REQUIRE_THROWS_WITH(tfr.get(0), Catch::Contains("TFRecordDataset: cannot open " + records) &&
                                        Catch::Contains("Permission denied"));
    ShardedStream stream = WebDatasetShards::stream({shard});
    posix::inject_failure(Call::kOpen, EMFILE);
    REQUIRE_THROWS_WITH(stream.next(), Catch::Contains("cannot open shard " + shard) &&
                                           Catch::Contains("Too many open files"));
    // A shard that cannot be opened to be indexed (the first open is of its cached index).
    posix::inject_failure(Call::kOpen, EIO, 2);
    WebDatasetOptions no_index;
    no_index.write_index = false;
    std::filesystem::remove(shard + ".idx");
    REQUIRE_THROWS_WITH(WebDatasetShards({shard}, no_index),
                        Catch::Contains("WebDatasetShards: cannot open shard " + shard));
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("a read that fails mid-file is an error naming the shard and the offset",
          "[shards][fault][io]") {
  TempDir tmp("io-read");
  const std::string shard = big_shard(tmp.path);
  const std::string records = tfrecord_file(tmp.path);
  const test::ProcessState baseline = test::process_state();
  {
    ClearInjections clear;
    WebDatasetOptions no_index;
    no_index.write_index = false;
    // Indexing: the second 1 MiB read of the shard fails.
    posix::inject_failure(Call::kRead, EIO, 1, 1);
    REQUIRE_THROWS_WITH(WebDatasetShards({shard}, no_index),
                        Catch::Contains("cannot read shard " + shard + " at byte ") &&
                            Catch::Contains("Input/output error"));
    // Map-style: one record's read.
    WebDatasetShards ds({shard}, no_index);
    posix::inject_failure(Call::kRead, EIO);
    try {
      (void)ds.get(7);
      FAIL("no error");
    } catch (const ShardError& e) {
      REQUIRE(e.path() == shard);
      REQUIRE(e.offset() == 7 * (64 * 1024 + 512) + 512);
      REQUIRE_THAT(e.what(), Catch::Contains("Input/output error"));
    }
    REQUIRE(ds.get(7).size() == 1);
    // Streaming a tar: the third read fails; the error names the shard.
    StreamOptions in_order;
    in_order.shuffle = false;
    ShardedStream stream = WebDatasetShards::stream({shard}, in_order, no_index);
    posix::inject_failure(Call::kRead, EIO, 1, 2);
    const auto [good, errors] = drain(stream, [&](const Error& e) {
      REQUIRE_THAT(e.what(), Catch::Contains(shard) && Catch::Contains("Input/output error"));
    });
    REQUIRE(errors >= 1);
    REQUIRE(good >= 16);  // what the first two reads held
    // Streaming a TFRecord file.
    TFRecordOptions tfr_options;
    tfr_options.write_index = false;
    ShardedStream tfr = TFRecordDataset::stream({records}, in_order, tfr_options);
    posix::inject_failure(Call::kRead, EIO, 1, 1);
    bool said_why = false;
    const auto [tfr_good, tfr_errors] = drain(tfr, [&](const Error& e) {
      REQUIRE_THAT(e.what(), Catch::Contains(records));
      said_why = said_why || std::string(e.what()).find("Input/output error") != std::string::npos;
    });
    REQUIRE(said_why);  // then, maybe, that the file ended before its index said
    REQUIRE(tfr_errors >= 1);
    REQUIRE(tfr_good == 3000);  // the stream reads on past its bad records
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("a pipe command that cannot be started, or whose output cannot be read",
          "[shards][fault][io]") {
  TempDir tmp("io-pipe");
  const std::string shard = big_shard(tmp.path);
  const std::string pipe = "pipe:cat " + shard;
  const test::ProcessState baseline = test::process_state();
  {
    ClearInjections clear;
    // The counting pass runs the command in the main process.
    posix::inject_failure(Call::kSpawn, EAGAIN);
    REQUIRE_THROWS_WITH(WebDatasetShards::stream({pipe}),
                        Catch::Contains("cannot start the command of " + pipe) &&
                            Catch::Contains("Resource temporarily unavailable"));
    // With its count given, the reading process runs it.
    StreamOptions so;
    so.sample_counts = {64};
    so.shuffle = false;
    ShardedStream stream = WebDatasetShards::stream({pipe}, so);
    posix::inject_failure(Call::kSpawn, EAGAIN);
    REQUIRE_THROWS_WITH(stream.next(), Catch::Contains("cannot start the command of " + pipe));
    // A read of its output fails in the middle: an error, and the command is killed and reaped.
    ShardedStream again = WebDatasetShards::stream({pipe}, so);
    REQUIRE(again.next());
    posix::inject_failure(Call::kRead, EIO, 1, 3);
    const auto [good, errors] =
        drain(again, [&](const Error& e) { REQUIRE_THAT(e.what(), Catch::Contains(pipe)); });
    REQUIRE(errors >= 1);
    REQUIRE(good == 63);  // and the first: the stream runs the command again and reads on
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("a write that fails is an error naming the file, for each writer",
          "[shards][fault][io]") {
  TempDir tmp("io-write");
  const test::ProcessState baseline = test::process_state();
  {
    ClearInjections clear;
    WebDatasetWriterOptions wo;
    wo.pattern = tmp.path + "/w-%d.tar";
    WebDatasetWriter writer(wo);
    const std::string bytes(2 << 20, 'w');  // over the 1 MiB flush: written at once
    const std::pair<std::string, std::span<const std::byte>> fields[] = {
        {"bin", std::as_bytes(std::span<const char>(bytes.data(), bytes.size()))}};
    posix::inject_failure(Call::kWrite, ENOSPC);
    REQUIRE_THROWS_WITH(
        writer.write("a", fields),
        Catch::Contains("WebDatasetWriter: cannot write " + tmp.path + "/w-0.tar") &&
            Catch::Contains("No space left on device"));
    posix::inject_failure(Call::kOpen, EROFS);
    WebDatasetWriterOptions ro = wo;
    ro.pattern = tmp.path + "/r-%d.tar";
    WebDatasetWriter read_only(ro);
    REQUIRE_THROWS_WITH(read_only.write("a", fields),
                        Catch::Contains("cannot create shard " + tmp.path + "/r-0.tar"));

    TFRecordWriter records(tmp.path + "/w.tfrecord");
    Sample s;
    s.set("data", Tensor::from(std::vector<std::uint8_t>(100, 1)));
    records.write(s);
    posix::inject_failure(Call::kWrite, ENOSPC);
    REQUIRE_THROWS_WITH(records.close(),
                        Catch::Contains("TFRecordWriter: writing " + tmp.path + "/w.tfrecord") &&
                            Catch::Contains("No space left on device"));
    REQUIRE_THROWS_WITH(records.write(s), Catch::Contains("is closed"));
    posix::inject_failure(Call::kOpen, EROFS);
    REQUIRE_THROWS_WITH(TFRecordWriter(tmp.path + "/x.tfrecord"),
                        Catch::Contains("TFRecordWriter: cannot create " + tmp.path));
  }
  STOKER_REQUIRE_CLEAN(baseline);
}

TEST_CASE("a gzip MNIST file whose read fails is an error naming it", "[mnist][fault][io]") {
  TempDir tmp("io-mnist");
  const auto be32 = [](std::string& out, std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xff));
  };
  std::string images("\0\0\x08\x03", 4);
  be32(images, 3000);
  be32(images, 28);
  be32(images, 28);
  // Bytes gzip cannot shrink: the compressed file takes three 1 MiB reads.
  std::mt19937 random(7);
  for (std::size_t i = 0; i < 3000 * 784; ++i) images.push_back(static_cast<char>(random()));
  std::string labels("\0\0\x08\x01", 4);
  be32(labels, 3000);
  labels.append(3000, '\x02');
  test::write_file(tmp.path + "/train-images-idx3-ubyte", images);
  test::write_file(tmp.path + "/train-labels-idx1-ubyte", labels);
  REQUIRE(std::system(("gzip " + tmp.path + "/train-images-idx3-ubyte").c_str()) == 0);
  REQUIRE(MnistDataset(tmp.path).size() == 3000);
  const test::ProcessState baseline = test::process_state();
  {
    ClearInjections clear;
    posix::inject_failure(Call::kRead, EIO, 1, 1);  // the second 1 MiB
    REQUIRE_THROWS_WITH(MnistDataset(tmp.path),
                        Catch::Contains(tmp.path + "/train-images-idx3-ubyte.gz") &&
                            Catch::Contains("at byte 1048576") &&
                            Catch::Contains("Input/output error"));
  }
  STOKER_REQUIRE_CLEAN(baseline);
}
