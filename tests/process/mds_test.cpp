// MdsDataset: MDS directories written by Python (tests/support/write_records.py: struct, json,
// hashlib, and the zstd tool for compressed shards; no `streaming` package) read back with
// every column exact, map-style and streaming through the DataLoader with 0/1/2/4 workers, and
// damaged directories: a missing shard, a hash mismatch, an unknown encoding, pickle, a corrupt
// sample, each reported with the file, or skipped under kSkip.
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "stoker/data_loader.hpp"
#include "stoker/mds_dataset.hpp"
#include "support/datasets.hpp"
#include "support/files.hpp"

using namespace stoker;

namespace {

using stoker::test::TempDir;

// `count` samples, `per_shard` to a shard; extra arguments for write_records.py mds.
std::string write_mds(const std::string& dir, int count, int per_shard,
                      const std::string& extra = "") {
  const std::string cmd = std::string("/usr/bin/python3 ") + STOKER_TEST_SUPPORT_DIR +
                          "/write_records.py mds " + dir + " " + std::to_string(count) + " " +
                          std::to_string(per_shard) + " " + extra;
  REQUIRE(std::system(cmd.c_str()) == 0);
  return dir;
}

using stoker::test::read_file;
using stoker::test::write_file;
void replace_in_file(const std::string& path, const std::string& from, const std::string& to) {
  std::string text = read_file(path);
  const std::size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  write_file(path, text.replace(at, from.size(), to));
}

std::string text_of(const Tensor& t) {
  return {reinterpret_cast<const char*>(t.raw_data()), t.nbytes()};
}

// Every column of sample k, as write_records.py writes it.
void check_sample(const Sample& s, std::int64_t k) {
  INFO("sample " << k);
  REQUIRE(s.size() == 9);
  CHECK(s.fields()[0].name == "arr");  // the columns, sorted by name as MDSWriter sorts them
  const Tensor& arr = s["arr"];
  CHECK(arr.dtype() == DType::kInt16);
  CHECK(arr.shape() == Shape{2, k % 3 + 1});
  for (std::size_t i = 0; i < arr.numel(); ++i) {
    CHECK(arr.data<std::int16_t>()[i] ==
          static_cast<std::int16_t>(k + static_cast<std::int64_t>(i)));
  }
  CHECK(text_of(s["blob"]) ==
        std::string(static_cast<std::size_t>(k % 5), static_cast<char>(k % 256)));
  CHECK(s["fixed"].shape() == Shape{2, 2});
  CHECK(s["fixed"].data<float>()[3] == static_cast<float>(k + 3));
  CHECK(s["id"].shape() == Shape{});
  CHECK(s["id"].item<std::int64_t>() == k);
  CHECK(s["label"].item<std::uint8_t>() == k % 10);
  CHECK(text_of(s["meta"]) == "{\"k\": " + std::to_string(k) + "}");
  CHECK(s["num"].item<std::int64_t>() == -k);
  CHECK(s["score"].item<float>() == static_cast<float>(k) / 4);
  CHECK(text_of(s["text"]) == "text " + std::to_string(k));
}

MdsOptions id_and_label() {
  MdsOptions options;
  options.fields = {{"id", "", {}}, {"label", "", {}}, {"fixed", "", {}}};
  return options;
}

template <class Loader>
std::vector<std::int64_t> epoch_ids(Loader& loader) {
  std::vector<std::int64_t> ids;
  for (const Batch& batch : loader) {
    const Tensor& id = batch["id"];
    for (std::size_t i = 0; i < id.numel(); ++i) {
      const std::int64_t k = id.data<std::int64_t>()[i];
      REQUIRE(batch["label"].data<std::uint8_t>()[i] == k % 10);
      REQUIRE(batch["fixed"].data<float>()[4 * i] == static_cast<float>(k));
      ids.push_back(k);
    }
  }
  return ids;
}

std::vector<std::int64_t> iota(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

std::vector<std::int64_t> sorted(std::vector<std::int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST_CASE("MdsDataset reads every column of a Python-written directory back exactly", "[mds]") {
  TempDir dir;
  write_mds(dir.path, 45, 10, "--hashes md5,sha1");
  MdsDataset ds(dir.path);
  REQUIRE(ds.size() == 45);
  CHECK(ds.num_shards() == 5);
  for (std::size_t k = 0; k < ds.size(); ++k) check_sample(ds.get(k), static_cast<std::int64_t>(k));
  // The verified hash is cached beside each shard.
  struct stat st {};
  CHECK(::stat((dir.path + "/shard.00000.mds.stoker.idx").c_str(), &st) == 0);
  MdsDataset again(dir.path, id_and_label());
  const Sample s = again.get(44);
  CHECK(s.size() == 3);
  CHECK(s["id"].item<std::int64_t>() == 44);
}

TEST_CASE("MdsDataset map-style: every sample once, the same order for 0, 1, 2 and 4 workers",
          "[mds]") {
  TempDir dir;
  write_mds(dir.path, 90, 16);
  std::vector<std::int64_t> first;
  for (const int workers : {0, 1, 2, 4}) {
    LoaderOptions opt;
    opt.batch_size = 8;
    opt.num_workers = workers;
    opt.shuffle = true;
    opt.seed = 21;
    DataLoader loader(MdsDataset(dir.path, id_and_label()), opt);
    const std::vector<std::int64_t> ids = epoch_ids(loader);
    CHECK(sorted(ids) == iota(90));
    if (first.empty()) {
      first = ids;
    } else {
      CHECK(ids == first);
    }
  }
}

TEST_CASE("MdsDataset::stream reads zstd, gz and bz2 shards, every sample once per epoch",
          "[mds]") {
  for (const std::string compression : {"zstd:3", "gz:6", "bz2:9"}) {
    INFO(compression);
    TempDir dir;
    write_mds(dir.path, 48, 10, "--compression " + compression + " --hashes sha1 --drop-raw");
    CHECK_THROWS_WITH(MdsDataset(dir.path), Catch::Contains("exists only compressed") &&
                                                Catch::Contains("MdsDataset::stream()"));
    StreamOptions unshuffled;
    unshuffled.shuffle = false;
    ShardedStream stream = MdsDataset::stream(dir.path, unshuffled);
    stream.start_epoch(0);
    for (std::int64_t k = 0; k < 48; ++k) {
      const auto sample = stream.next();
      REQUIRE(sample.has_value());
      check_sample(*sample, k);
    }
    CHECK_FALSE(stream.next().has_value());
    for (const int workers : {0, 2, 4}) {
      StreamOptions so;
      so.seed = 4;
      so.shuffle_buffer = 6;
      LoaderOptions opt;
      opt.batch_size = 4;
      opt.num_workers = workers;
      DataLoader loader(MdsDataset::stream(dir.path, so, id_and_label()), opt);
      const std::vector<std::int64_t> ids = epoch_ids(loader);
      CHECK(sorted(ids) == iota(48));
      DataLoader again(MdsDataset::stream(dir.path, so, id_and_label()), opt);
      CHECK(epoch_ids(again) == ids);
    }
  }
}

TEST_CASE("MdsDataset::stream resume delivers exactly the rest of the epoch", "[mds]") {
  TempDir dir;
  write_mds(dir.path, 64, 12, "--compression zstd:1");
  StreamOptions so;
  so.seed = 2;
  so.shuffle_buffer = 10;
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  DataLoader full(MdsDataset::stream(dir.path, so, id_and_label()), opt);
  const std::vector<std::int64_t> all = epoch_ids(full);
  DataLoader first(MdsDataset::stream(dir.path, so, id_and_label()), opt);
  std::vector<std::int64_t> seen;
  std::string state;
  std::uint64_t batches = 0;
  for (const Batch& batch : first) {
    for (std::size_t i = 0; i < batch.size(); ++i)
      seen.push_back(batch["id"].data<std::int64_t>()[i]);
    if (++batches == 4) {
      state = first.dataset().state(0, batches, opt);
      break;
    }
  }
  DataLoader resumed(MdsDataset::stream(dir.path, so, id_and_label()), opt);
  resumed.dataset().load_state(state);
  const std::vector<std::int64_t> rest = epoch_ids(resumed);
  seen.insert(seen.end(), rest.begin(), rest.end());
  CHECK(seen == all);
}

TEST_CASE("A damaged MDS directory is reported with the file and what to do", "[mds]") {
  TempDir dir;
  const std::string index = dir.path + "/index.json";
  SECTION("a missing shard") {
    write_mds(dir.path, 30, 10);
    REQUIRE(std::remove((dir.path + "/shard.00001.mds").c_str()) == 0);
    CHECK_THROWS_WITH(MdsDataset(dir.path),
                      Catch::Contains("MdsDataset: shard 1 is missing: neither " + dir.path +
                                      "/shard.00001.mds"));
    CHECK_THROWS_AS(MdsDataset::stream(dir.path), MdsError);
  }
  SECTION("a hash mismatch") {
    write_mds(dir.path, 30, 10, "--hashes sha1");
    const std::string shard = dir.path + "/shard.00002.mds";
    std::string bytes = read_file(shard);
    bytes[bytes.size() - 1] ^= 1;  // same size, other contents
    write_file(shard, bytes);
    try {
      MdsDataset ds(dir.path);
      FAIL("no error for the hash mismatch");
    } catch (const MdsError& e) {
      CHECK_THAT(e.what(), Catch::Contains(shard + ": hash mismatch: its sha1 is") &&
                               Catch::Contains("re-copy it"));
      CHECK(e.path() == shard);
    }
    MdsOptions unchecked;
    unchecked.verify_hashes = false;
    CHECK(MdsDataset(dir.path, unchecked).size() == 30);
    // Streaming finds it when it reads the shard: each of its records is an error.
    StreamOptions so;
    so.shuffle = false;
    ShardedStream stream = MdsDataset::stream(dir.path, so);
    stream.start_epoch(0);
    for (int k = 0; k < 20; ++k) REQUIRE(stream.next().has_value());
    CHECK_THROWS_WITH(stream.next(), Catch::Contains("hash mismatch"));
  }
  SECTION("an unknown encoding") {
    write_mds(dir.path, 10, 10);
    replace_in_file(index, "\"str_int\"", "\"complex128\"");
    CHECK_THROWS_WITH(
        MdsDataset(dir.path),
        Catch::Contains(index + ": shard 0: column \"num\": MDS encoding \"complex128\""));
  }
  SECTION("a pickle column") {
    write_mds(dir.path, 10, 10);
    replace_in_file(index, "\"json\"", "\"pkl\"");
    CHECK_THROWS_WITH(MdsDataset(dir.path),
                      Catch::Contains("column 'meta' is encoded as pkl (Python pickle), which "
                                      "stoker refuses"));
    // A Sample that leaves the column out does not need it.
    CHECK(MdsDataset(dir.path, id_and_label()).get(3)["id"].item<std::int64_t>() == 3);
  }
  SECTION("not an MDS index") {
    write_file(index, "{\"version\": 2, \"shards\": [{\"format\": \"json\"}]}");
    CHECK_THROWS_WITH(MdsDataset(dir.path), Catch::Contains("format \"json\" is not \"mds\""));
    REQUIRE(std::remove(index.c_str()) == 0);
    CHECK_THROWS_WITH(MdsDataset(dir.path), Catch::Contains("index.json does not exist"));
  }
}

TEST_CASE("A corrupt MDS sample under kSkip is skipped and counted, the rest read", "[mds]") {
  TempDir dir;
  write_mds(dir.path, 30, 30);
  const std::string shard = dir.path + "/shard.00000.mds";
  std::string bytes = read_file(shard);
  // Sample 13 starts with the u32 sizes of its variable columns: make the first one huge.
  std::uint32_t begin = 0;
  std::memcpy(&begin, bytes.data() + 4 + 4 * 13, 4);
  bytes[begin + 3] = '\x7f';
  write_file(shard, bytes);
  MdsDataset ds(dir.path);
  CHECK_THROWS_WITH(ds.get(13), Catch::Contains("MdsDataset: " + shard + ": record 13 at byte " +
                                                std::to_string(begin)) &&
                                    Catch::Contains("column \"arr\" of"));
  for (const int workers : {0, 2}) {
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = workers;
    opt.on_sample_error = OnSampleError::kSkip;
    DataLoader loader(MdsDataset(dir.path, id_and_label()), opt);
    std::vector<std::int64_t> expected = iota(30);
    expected.erase(expected.begin() + 13);
    CHECK(epoch_ids(loader) == expected);
    CHECK(loader.stats().skipped_samples == 1);
  }
}

TEST_CASE("MdsDataset decodes jpeg and png columns through the decoders' image entries", "[mds]") {
  TempDir dir;
  write_mds(dir.path, 10, 10);
  // The bytes stay the blob's; the encoding says png, so the "png" decoder gets them.
  replace_in_file(dir.path + "/index.json", "\"bytes\"", "\"png\"");
  MdsOptions options;
  options.decoders.set("png", [](std::span<const std::uint8_t> bytes, std::string_view source) {
    if (source.find("column 'blob'") == std::string_view::npos) throw Error("no source");
    return Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(bytes.size()) + 1000);
  });
  MdsDataset ds(dir.path, options);
  for (std::size_t k = 0; k < 10; ++k) {
    CHECK(ds.get(k)["blob"].item<std::int64_t>() == static_cast<std::int64_t>(k % 5) + 1000);
  }
  // A decoder for the column's own name wins over the image entry.
  options.decoders.set("blob", [](std::span<const std::uint8_t>, std::string_view) {
    return Tensor::scalar<std::int64_t>(-1);
  });
  CHECK(MdsDataset(dir.path, options).get(3)["blob"].item<std::int64_t>() == -1);
}
