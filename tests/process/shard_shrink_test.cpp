// A data file cut short while a dataset has it open (another process rewrote it, a network
// filesystem's view changed): every reader of mapped files (TFRecord, MDS, .npy, token shards,
// MNIST) and the tar reader turn it into a ShardError naming the file, in the process that reads
// and through a loader with 2 workers (a WorkerException of that type, never a WorkerCrashed by
// SIGBUS), and a SIGBUS that is not about a mapped data file still kills the process.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "stoker/data_loader.hpp"
#include "stoker/mds_dataset.hpp"
#include "stoker/mnist_dataset.hpp"
#include "stoker/npy_dataset.hpp"
#include "stoker/tfrecord_dataset.hpp"
#include "stoker/token_dataset.hpp"
#include "stoker/webdataset.hpp"
#include "support/datasets.hpp"
#include "support/files.hpp"

using namespace stoker;
namespace fs = std::filesystem;
using stoker::test::TempDir;

namespace {

// The file: 40 Examples of 2,000 bytes framed ({"id": int64 [1], "data": uint8 [n]}).
std::string tfrecord_file(const std::string& dir) {
  const std::string path = dir + "/shrink.tfrecord";
  TFRecordWriter writer(path);
  for (int i = 0; i < 40; ++i) {
    Sample s;
    s.set("id", Tensor::from<std::int64_t>({i}));
    s.set("data", Tensor::from(std::vector<std::uint8_t>(1950, static_cast<std::uint8_t>(i + 1))));
    writer.write_example(s);
  }
  writer.close();
  return path;
}

struct Outcome {
  std::size_t good = 0;
  std::size_t shard_errors = 0;
};

// get(i) for every index: each either returns or throws a ShardError naming `path` and saying
// the file shrank (checked by `check`).
template <class D, class Check>
Outcome get_all(D& ds, const std::string& path, Check&& check) {
  Outcome o;
  for (std::size_t i = 0; i < ds.size(); ++i) {
    try {
      (void)ds.get(i);
      ++o.good;
    } catch (const ShardError& e) {
      INFO(e.what());
      REQUIRE(e.path() == path);
      REQUIRE_THAT(e.what(), Catch::Contains("shrank while it was read"));
      check(e, i);
      ++o.shard_errors;
    }
  }
  return o;
}

// An epoch through a 2-worker loader: every failed batch is a WorkerException of `type` whose
// message names `path`; a WorkerCrashed (SIGBUS) would escape drain_epoch and fail the test.
template <class D>
std::pair<std::size_t, std::size_t> loader_epoch(D dataset, const std::string& path,
                                                 const std::string& type,
                                                 std::size_t batch_size = 4) {
  LoaderOptions opt;
  opt.batch_size = batch_size;
  opt.num_workers = 2;
  DataLoader loader(std::move(dataset), opt);
  std::size_t errors = 0;
  const std::size_t samples = test::drain_epoch(loader, [&](const WorkerException& e) {
    ++errors;
    REQUIRE(e.type_name() == type);
    REQUIRE_THAT(e.original_what(), Catch::Contains(path) && Catch::Contains("shrank"));
  });
  return {samples, errors};
}

void write_bytes(const std::string& path, const void* data, std::size_t n,
                 const std::vector<std::byte>& header = {}) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()),
            static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

}  // namespace

TEST_CASE("a TFRecord file cut while it is read: TFRecordError naming it, no SIGBUS",
          "[shrink][tfrecord]") {
  TempDir tmp("shrink-tfr");
  const std::string path = tfrecord_file(tmp.path);
  REQUIRE(fs::file_size(path) == 40 * 2000);
  for (const bool verify : {true, false}) {
    CAPTURE(verify);
    TFRecordOptions options;
    options.verify_crc = verify;
    options.write_index = false;
    TFRecordDataset ds({path}, options);
    REQUIRE(ds.get(0)["id"].data<std::int64_t>()[0] == 0);
    fs::resize_file(path, 8292);
    const Outcome o = get_all(ds, path, [&](const ShardError& e, std::size_t i) {
      REQUIRE(dynamic_cast<const TFRecordError*>(&e) != nullptr);
      REQUIRE(e.offset() == 2000 * i);
      REQUIRE_THAT(e.what(), Catch::Contains(fmt::format("record {} at byte {}", i, 2000 * i)) &&
                                 Catch::Contains("it is 8292 bytes now, 80000 when it was opened"));
    });
    // Every record is an error once the file is known to have changed, those that end before
    // byte 8292 too, whatever page a record is on.
    REQUIRE(o.good == 0);
    REQUIRE(o.shard_errors == 40);
    fs::remove(path);
    tfrecord_file(tmp.path);
  }
  // Through 2 workers that inherit the main process's mapping of the file.
  TFRecordOptions options;
  options.write_index = false;
  TFRecordDataset ds({path}, options);
  (void)ds.get(39);
  fs::resize_file(path, 8292);
  const auto [samples, errors] = loader_epoch(ds, path, "stoker::TFRecordError");
  REQUIRE(samples == 0);
  REQUIRE(errors == 10);
}

TEST_CASE("an MDS shard cut while it is read: MdsError naming it, no SIGBUS", "[shrink][mds]") {
  TempDir tmp("shrink-mds");
  const std::string cmd = std::string("/usr/bin/python3 ") + STOKER_TEST_SUPPORT_DIR +
                          "/write_records.py mds " + tmp.path + " 3000 3000";
  REQUIRE(std::system(cmd.c_str()) == 0);
  const std::string shard = tmp.path + "/shard.00000.mds";
  REQUIRE(fs::exists(shard));
  const std::uintmax_t size = fs::file_size(shard);
  REQUIRE(size > 64 * 1024);
  MdsOptions options;
  options.write_index = false;
  MdsDataset ds(tmp.path, options);
  REQUIRE(ds.get(0)["id"].item<std::int64_t>() == 0);
  fs::resize_file(shard, size / 2 + 7);
  const Outcome o = get_all(ds, shard, [&](const ShardError& e, std::size_t) {
    REQUIRE(dynamic_cast<const MdsError*>(&e) != nullptr);
    REQUIRE(e.offset() > 0);
    REQUIRE_THAT(e.what(), Catch::Contains(fmt::format("record")) &&
                               Catch::Contains(fmt::format("{} when it was opened", size)));
  });
  REQUIRE(o.good == 0);
  REQUIRE(o.shard_errors == 3000);

  // The same through 2 workers (the main process mapped the shard first); and streaming, which
  // maps the whole shard.
  const std::string copy = tmp.path + "/copy";
  fs::create_directories(copy);
  REQUIRE(std::system(cmd.substr(0, cmd.find(tmp.path)).append(copy + " 3000 3000").c_str()) == 0);
  MdsDataset again(copy, options);
  (void)again.get(2999);
  StreamOptions in_order;
  in_order.shuffle = false;
  ShardedStream stream = again.stream(in_order);
  REQUIRE(stream.next());  // its cursor has mapped the shard
  fs::resize_file(copy + "/shard.00000.mds", size / 2 + 7);
  const auto [samples, errors] =
      loader_epoch(again, copy + "/shard.00000.mds", "stoker::MdsError", 100);
  REQUIRE(samples == 0);
  REQUIRE(errors == 30);
  REQUIRE_THROWS_WITH(stream.next(), Catch::Contains("shrank while it was read"));
}

TEST_CASE("a tar shard cut while it is read: ShardError naming it and the offsets",
          "[shrink][webdataset]") {
  TempDir tmp("shrink-tar");
  WebDatasetWriterOptions wo;
  wo.pattern = tmp.path + "/s-%d.tar";
  WebDatasetWriter writer(wo);
  for (int i = 0; i < 40; ++i) {
    const std::string bytes(3000, static_cast<char>('a' + i % 26));
    const std::pair<std::string, std::span<const std::byte>> fields[] = {
        {"bin", std::as_bytes(std::span<const char>(bytes.data(), bytes.size()))}};
    writer.write(fmt::format("k{:03}", i), fields);
  }
  const std::string shard = writer.close().at(0);
  WebDatasetShards ds({shard});
  (void)ds.get(0);
  fs::resize_file(shard, 20000);
  std::size_t good = 0;
  for (std::size_t i = 0; i < ds.size(); ++i) {
    try {
      (void)ds.get(i);
      ++good;
    } catch (const ShardError& e) {
      REQUIRE(e.path() == shard);
      REQUIRE(e.offset() > 0);
      REQUIRE_THAT(e.what(), Catch::Contains(fmt::format("shard {} ends at byte", shard)));
    }
  }
  REQUIRE(good == 5);  // 5 x 3,584 bytes end before byte 20000
  LoaderOptions opt;
  opt.batch_size = 5;
  opt.num_workers = 2;
  DataLoader loader(ds, opt);
  std::size_t errors = 0;
  const std::size_t samples = test::drain_epoch(loader, [&](const WorkerException& e) {
    ++errors;
    REQUIRE(e.type_name() == "stoker::ShardError");
    REQUIRE_THAT(e.original_what(), Catch::Contains(shard));
  });
  REQUIRE(samples == 5);
  REQUIRE(errors == 7);
}

TEST_CASE("an .npy file, a token shard and MNIST images cut while they are read", "[shrink]") {
  TempDir tmp("shrink-views");
  SECTION("npy") {
    const std::string path = tmp.path + "/x.npy";
    std::vector<float> values(1000 * 256);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 977);
    const std::vector<std::int64_t> shape = {1000, 256};
    write_bytes(path, values.data(), values.size() * 4, make_npy_header(DType::kFloat32, shape));
    NpyDataset ds(path);
    (void)ds.get(999);
    fs::resize_file(path, 256 * 1024 + 3);
    const Outcome o = get_all(ds, path, [](const ShardError& e, std::size_t i) {
      REQUIRE_THAT(e.what(), Catch::Contains(fmt::format("row {}", i)));
    });
    REQUIRE(o.shard_errors == 1000);  // the sentinel (the file's last byte) is gone
    const auto [samples, errors] = loader_epoch(ds, path, "stoker::ShardError", 100);
    REQUIRE(samples == 0);
    REQUIRE(errors == 10);
  }
  SECTION("token shard") {
    const std::string path = tmp.path + "/tokens.bin";
    std::vector<std::uint16_t> tokens(200000);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(i + 1);
    write_bytes(path, tokens.data(), tokens.size() * 2);
    TokenOptions options;
    options.context = 64;
    options.dtype = DType::kUInt16;
    TokenDataset ds({path}, options);
    (void)ds.get(0);
    fs::resize_file(path, 100000);
    const Outcome o = get_all(ds, path, [](const ShardError& e, std::size_t i) {
      REQUIRE_THAT(e.what(), Catch::Contains(fmt::format("window {}", i)));
    });
    REQUIRE(o.good == 0);
    const auto [samples, errors] = loader_epoch(ds, path, "stoker::ShardError", 256);
    REQUIRE(samples == 0);
    REQUIRE(errors > 0);
  }
  SECTION("MNIST") {
    const auto be32 = [](std::vector<std::byte>& out, std::uint32_t v) {
      for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<std::byte>((v >> s) & 0xff));
    };
    std::vector<std::byte> images_header{std::byte{0}, std::byte{0}, std::byte{8}, std::byte{3}};
    be32(images_header, 2000);
    be32(images_header, 28);
    be32(images_header, 28);
    std::vector<std::uint8_t> pixels(2000 * 784);
    for (std::size_t i = 0; i < pixels.size(); ++i)
      pixels[i] = static_cast<std::uint8_t>(i % 255 + 1);
    write_bytes(tmp.path + "/train-images-idx3-ubyte", pixels.data(), pixels.size(), images_header);
    std::vector<std::byte> labels_header{std::byte{0}, std::byte{0}, std::byte{8}, std::byte{1}};
    be32(labels_header, 2000);
    std::vector<std::uint8_t> labels(2000, 3);
    write_bytes(tmp.path + "/train-labels-idx1-ubyte", labels.data(), labels.size(), labels_header);
    for (const DType dtype : {DType::kUInt8, DType::kFloat32}) {
      MnistOptions options;
      options.image_dtype = dtype;
      MnistDataset ds(tmp.path, MnistDataset::Mode::kTrain, options);
      (void)ds.get(1999);
      const std::string path = tmp.path + "/train-images-idx3-ubyte";
      fs::resize_file(path, 16 + 1000 * 784);
      const Outcome o = get_all(ds, path, [](const ShardError& e, std::size_t i) {
        REQUIRE_THAT(e.what(), Catch::Contains(fmt::format("image {}", i)));
      });
      REQUIRE(o.shard_errors == 2000);
      const auto [samples, errors] = loader_epoch(ds, path, "stoker::ShardError", 500);
      REQUIRE(samples == 0);
      REQUIRE(errors == 4);
      write_bytes(path, pixels.data(), pixels.size(), images_header);
    }
  }
}

TEST_CASE("a SIGBUS that is not about a mapped data file still kills the process", "[shrink]") {
  TempDir tmp("shrink-other");
  const std::string path = tfrecord_file(tmp.path);
  TFRecordDataset ds({path});
  (void)ds.get(0);  // the guard is installed in this process
  const std::string other = tmp.path + "/other";
  write_bytes(other, std::string(3 * 4096, 'x').data(), 3 * 4096);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // A mapping stoker knows nothing of, cut under it: the default action, as without stoker.
    const int fd = ::open(other.c_str(), O_RDONLY);
    void* map = ::mmap(nullptr, 3 * 4096, PROT_READ, MAP_SHARED, fd, 0);
    if (::truncate(other.c_str(), 10) != 0) ::_exit(3);
    volatile char c = static_cast<const char*>(map)[2 * 4096];
    (void)c;
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
#if defined(__SANITIZE_ADDRESS__)
  // Under ASan the disposition before stoker's is ASan's own handler: it reports the fault
  // and ends the process (abort() with abort_on_error=1, else exit status 1).
  const bool asan_report = (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) ||
                           (WIFEXITED(status) && WEXITSTATUS(status) == 1);
  REQUIRE((asan_report || (WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS)));
#else
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGBUS);
#endif
}
