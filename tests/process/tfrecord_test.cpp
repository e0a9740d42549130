// TFRecordDataset: TFRecord files written by Python (tests/support/write_records.py: struct and
// zlib, no TensorFlow) read back exactly, map-style and streaming through the DataLoader with
// 0/1/2/4 workers (every record once, in order, deterministic, resumable), and damaged files:
// bad CRCs, corrupt headers and truncation, reported with the file and offset or skipped.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "stoker/data_loader.hpp"
#include "stoker/tfrecord_dataset.hpp"
#include "support/datasets.hpp"
#include "support/files.hpp"

using namespace stoker;

namespace {

using stoker::test::TempDir;

// Records first .. first + count - 1 of write_records.py into `path`.
std::string write_tfrecord(const std::string& path, int first, int count,
                           const std::string& codec = "none") {
  const std::string cmd = std::string("/usr/bin/python3 ") + STOKER_TEST_SUPPORT_DIR +
                          "/write_records.py tfrecord " + path + " " + std::to_string(first) + " " +
                          std::to_string(count) + " --codec " + codec;
  REQUIRE(std::system(cmd.c_str()) == 0);
  return path;
}

using stoker::test::read_file;
using stoker::test::write_file;

// Where each record's frame starts, walking the lengths of a good file.
std::vector<std::size_t> record_offsets(const std::string& bytes) {
  std::vector<std::size_t> offsets;
  for (std::size_t at = 0; at + 16 <= bytes.size();) {
    offsets.push_back(at);
    std::uint64_t length = 0;
    std::memcpy(&length, bytes.data() + at, 8);
    at += static_cast<std::size_t>(length) + 16;
  }
  return offsets;
}

// Three plain files of 40, 25 and 31 records (ids 0..95).
std::vector<std::string> three_files(const TempDir& dir) {
  return {write_tfrecord(dir.path + "/a.tfrecord", 0, 40),
          write_tfrecord(dir.path + "/b.tfrecord", 40, 25),
          write_tfrecord(dir.path + "/c.tfrecord", 65, 31)};
}

TFRecordOptions id_and_label() {
  TFRecordOptions options;
  options.fields = {{"id", "", {}}, {"label", "", {}}};
  options.scalar_features = {"id", "label"};
  return options;
}

template <class Loader>
std::vector<std::int64_t> epoch_ids(Loader& loader) {
  std::vector<std::int64_t> ids;
  for (const Batch& batch : loader) {
    const Tensor& id = batch["id"];
    const Tensor& label = batch["label"];
    for (std::size_t i = 0; i < id.numel(); ++i) {
      REQUIRE(label.data<std::int64_t>()[i] == id.data<std::int64_t>()[i] % 10);
      ids.push_back(id.data<std::int64_t>()[i]);
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

TEST_CASE("TFRecordDataset reads Python-written records back exactly", "[tfrecord]") {
  TempDir dir;
  TFRecordDataset ds(three_files(dir));
  REQUIRE(ds.size() == 96);
  CHECK(ds.num_shards() == 3);
  CHECK(ds.bad_records() == 0);
  for (std::size_t k = 0; k < ds.size(); ++k) {
    const Sample s = ds.get(k);
    REQUIRE(s.size() == 4);
    CHECK(s.fields()[0].name == "id");  // the record's order
    CHECK(s["id"].shape() == Shape{1});
    CHECK(s["id"].data<std::int64_t>()[0] == static_cast<std::int64_t>(k));
    CHECK(s["value"].dtype() == DType::kFloat32);
    CHECK(s["value"].data<float>()[0] == static_cast<float>(k) * 0.5F);
    CHECK(s["value"].data<float>()[1] == -static_cast<float>(k));
    const std::string text = "sample-" + std::to_string(k) + std::string(k % 7, 'x');
    const Tensor& t = s["text"];
    CHECK(std::string(reinterpret_cast<const char*>(t.raw_data()), t.nbytes()) == text);
    CHECK(s["label"].data<std::int64_t>()[0] == static_cast<std::int64_t>(k % 10));
  }
  // The index was cached beside each file; a second dataset reads it instead of scanning.
  struct stat st {};
  CHECK(::stat((dir.path + "/a.tfrecord.stoker.idx").c_str(), &st) == 0);
  TFRecordDataset again(three_files(dir));
  CHECK(again.get(95)["id"].data<std::int64_t>()[0] == 95);
  // Selected fields, renamed, scalars.
  TFRecordOptions options = id_and_label();
  options.fields.push_back({"text", "caption", {}});
  TFRecordDataset some({dir.path + "/b.tfrecord"}, options);
  const Sample s = some.get(3);
  REQUIRE(s.size() == 3);
  CHECK(s["id"].shape() == Shape{});
  CHECK(s["id"].item<std::int64_t>() == 43);
  CHECK(s["caption"].nbytes() == std::string("sample-43").size() + 43 % 7);
}

TEST_CASE("TFRecordDataset map-style: every record once, the same order for 0, 1, 2 and 4 workers",
          "[tfrecord]") {
  TempDir dir;
  const std::vector<std::string> files = three_files(dir);
  std::vector<std::int64_t> first;
  for (const int workers : {0, 1, 2, 4}) {
    LoaderOptions opt;
    opt.batch_size = 7;
    opt.num_workers = workers;
    opt.shuffle = true;
    opt.seed = 11;
    DataLoader loader(TFRecordDataset(files, id_and_label()), opt);
    loader.set_epoch(3);
    const std::vector<std::int64_t> ids = epoch_ids(loader);
    CHECK(sorted(ids) == iota(96));
    if (first.empty()) {
      first = ids;
      CHECK(ids != iota(96));
    } else {
      CHECK(ids == first);
    }
  }
  LoaderOptions in_order;
  in_order.batch_size = 10;
  in_order.num_workers = 2;
  DataLoader loader(TFRecordDataset(files, id_and_label()), in_order);
  CHECK(epoch_ids(loader) == iota(96));
}

TEST_CASE("TFRecordDataset map-style resume goes on with exactly the remaining batches",
          "[tfrecord]") {
  TempDir dir;
  const std::vector<std::string> files = three_files(dir);
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.num_workers = 2;
  opt.shuffle = true;
  opt.seed = 5;
  DataLoader full(TFRecordDataset(files, id_and_label()), opt);
  const std::vector<std::int64_t> all = epoch_ids(full);
  DataLoader first(TFRecordDataset(files, id_and_label()), opt);
  std::vector<std::int64_t> seen;
  std::string state;
  for (const Batch& batch : first) {
    for (std::size_t i = 0; i < batch.size(); ++i)
      seen.push_back(batch["id"].data<std::int64_t>()[i]);
    if (seen.size() == 40) {
      state = first.state();
      break;
    }
  }
  opt.num_workers = 1;
  DataLoader resumed(TFRecordDataset(files, id_and_label()), opt);
  resumed.load_state(state);
  const std::vector<std::int64_t> rest = epoch_ids(resumed);
  seen.insert(seen.end(), rest.begin(), rest.end());
  CHECK(seen == all);
}

TEST_CASE("TFRecordDataset::stream: plain, gzip and zlib files, every record once per epoch",
          "[tfrecord]") {
  TempDir dir;
  // 48 records: the split is exact for 1, 2 and 4 streams.
  const std::vector<std::string> files = {
      write_tfrecord(dir.path + "/a.tfrecord", 0, 20),
      write_tfrecord(dir.path + "/b.tfrecord.gz", 20, 15, "gzip"),
      write_tfrecord(dir.path + "/c.tfrecord", 35, 13, "zlib")};
  CHECK_THROWS_WITH(
      TFRecordDataset({files[2]}),
      Catch::Contains("c.tfrecord is zlib-compressed, which cannot be read at random") &&
          Catch::Contains("TFRecordDataset::stream()"));
  for (const int workers : {0, 1, 2, 4}) {
    StreamOptions so;
    so.seed = 3;
    so.shuffle_buffer = 8;
    std::vector<std::int64_t> runs[2];
    for (auto& ids : runs) {
      LoaderOptions opt;
      opt.batch_size = 4;
      opt.num_workers = workers;
      DataLoader loader(TFRecordDataset::stream(files, so, id_and_label()), opt);
      loader.set_epoch(1);
      ids = epoch_ids(loader);
      CHECK(sorted(ids) == iota(48));
    }
    CHECK(runs[0] == runs[1]);
    CHECK(runs[0] != iota(48));
  }
  // Unshuffled and one worker: the files' order.
  StreamOptions plain;
  plain.shuffle = false;
  LoaderOptions opt;
  opt.batch_size = 5;
  DataLoader loader(TFRecordDataset::stream(files, plain, id_and_label()), opt);
  CHECK(epoch_ids(loader) == iota(48));
}

TEST_CASE("TFRecordDataset::stream resume delivers exactly the rest of the epoch", "[tfrecord]") {
  TempDir dir;
  const std::vector<std::string> files = {
      write_tfrecord(dir.path + "/a.tfrecord.gz", 0, 30, "gzip"),
      write_tfrecord(dir.path + "/b.tfrecord", 30, 34)};
  StreamOptions so;
  so.seed = 9;
  so.shuffle_buffer = 16;
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  DataLoader full(TFRecordDataset::stream(files, so, id_and_label()), opt);
  full.set_epoch(2);
  const std::vector<std::int64_t> all = epoch_ids(full);
  REQUIRE(sorted(all) == iota(64));
  DataLoader first(TFRecordDataset::stream(files, so, id_and_label()), opt);
  first.set_epoch(2);
  std::vector<std::int64_t> seen;
  std::string state;
  std::uint64_t batches = 0;
  for (const Batch& batch : first) {
    for (std::size_t i = 0; i < batch.size(); ++i)
      seen.push_back(batch["id"].data<std::int64_t>()[i]);
    // A whole round of the workers: DataLoader gives the resumed epoch's first batch to
    // worker 0 again.
    if (++batches == 6) {
      state = first.dataset().state(2, batches, opt);
      break;
    }
  }
  DataLoader resumed(TFRecordDataset::stream(files, so, id_and_label()), opt);
  resumed.dataset().load_state(state);
  resumed.set_epoch(2);
  const std::vector<std::int64_t> rest = epoch_ids(resumed);
  seen.insert(seen.end(), rest.begin(), rest.end());
  CHECK(seen == all);
}

TEST_CASE("A bad CRC names the file and byte offset, and with verify_crc off it is not checked",
          "[tfrecord]") {
  TempDir dir;
  const std::string path = write_tfrecord(dir.path + "/a.tfrecord", 0, 10);
  std::string bytes = read_file(path);
  {
    std::string copy = bytes;
    copy[5] ^= 1;  // record 0's length: a corrupt header, found when indexing
    write_file(dir.path + "/probe.tfrecord", copy);
    TFRecordOptions o;
    o.write_index = false;
    TFRecordDataset probe({dir.path + "/probe.tfrecord"}, o);
    CHECK(probe.bad_records() == 1);
    CHECK_THROWS_WITH(probe.get(0),
                      Catch::Contains("probe.tfrecord: record 0 at byte 0: corrupt record header"));
    CHECK(probe.get(1)["id"].data<std::int64_t>()[0] == 1);
  }
  // Record 4's text value ends its data ("sample-4xxxx"): change its last byte.
  const std::size_t end4 = bytes.find("sample-4xxxx") + 11;
  bytes[end4] = 'y';
  write_file(path, bytes);  // same size, newer mtime: the cached index is rebuilt
  TFRecordDataset ds({path});
  CHECK(ds.bad_records() == 0);  // data CRCs are checked when a record is read
  try {
    ds.get(4);
    FAIL("no error for the bad data CRC");
  } catch (const TFRecordError& e) {
    CHECK_THAT(e.what(), Catch::Contains("TFRecordDataset: " + path + ": record 4 at byte ") &&
                             Catch::Contains("bad data CRC") &&
                             Catch::Contains("on_sample_error = kSkip"));
    CHECK(e.path() == path);
    CHECK(e.offset() == record_offsets(read_file(path))[4]);
  }
  TFRecordOptions unchecked;
  unchecked.verify_crc = false;
  TFRecordDataset loose({path}, unchecked);
  const Sample sample = loose.get(4);
  const Tensor& text = sample["text"];
  CHECK(std::string(reinterpret_cast<const char*>(text.raw_data()), text.nbytes()) ==
        "sample-4xxxy");
}

TEST_CASE("Damaged TFRecord files under kSkip: bad records skipped and counted, the rest read",
          "[tfrecord]") {
  TempDir dir;
  const std::string path = write_tfrecord(dir.path + "/a.tfrecord", 0, 30);
  std::string bytes = read_file(path);
  bytes[bytes.find("sample-7") + 2] ^= 1;  // record 7: bad data CRC
  bytes.resize(bytes.size() - 5);          // record 29: truncated
  write_file(path, bytes);
  TFRecordDataset ds({path}, id_and_label());
  CHECK(ds.bad_records() == 1);  // the truncated tail; the bad CRC is found on reading
  for (const int workers : {0, 2}) {
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = workers;
    opt.on_sample_error = OnSampleError::kSkip;
    DataLoader loader(TFRecordDataset({path}, id_and_label()), opt);
    std::vector<std::int64_t> ids = epoch_ids(loader);
    CHECK(loader.stats().skipped_samples == 2);
    std::vector<std::int64_t> expected = iota(29);
    expected.erase(expected.begin() + 7);
    CHECK(ids == expected);
  }
  // The same file streamed: the stream reads on past each bad record so that it still delivers
  // its 30 (padding with the epoch's first records, as EqualBatches::kPad does).
  StreamOptions so;
  so.shuffle = false;
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.on_sample_error = OnSampleError::kSkip;
  DataLoader streamed(TFRecordDataset::stream({path}, so, id_and_label()), opt);
  std::vector<std::int64_t> ids = epoch_ids(streamed);
  CHECK(streamed.stats().skipped_samples == 2);
  CHECK(ids.size() == 30);
  std::vector<std::int64_t> good = iota(29);
  good.erase(good.begin() + 7);
  CHECK(std::vector<std::int64_t>(ids.begin(), ids.begin() + 28) == good);
}

TEST_CASE("A corrupt record header costs one record: the records after it are read", "[tfrecord]") {
  TempDir dir;
  const std::string path = write_tfrecord(dir.path + "/a.tfrecord", 0, 20);
  std::string bytes = read_file(path);
  const std::size_t header9 = record_offsets(bytes)[9];
  bytes[header9 + 2] = '\x7f';  // its length: the length CRC no longer matches
  write_file(path, bytes);
  TFRecordDataset ds({path}, id_and_label());
  REQUIRE(ds.size() == 20);
  CHECK(ds.bad_records() == 1);
  CHECK_THROWS_WITH(ds.get(9), Catch::Contains("record 9 at byte " + std::to_string(header9)) &&
                                   Catch::Contains("corrupt record header"));
  CHECK(ds.get(10)["id"].item<std::int64_t>() == 10);
  CHECK(ds.get(19)["id"].item<std::int64_t>() == 19);
}

TEST_CASE("TFRecordWriter writes Examples that TFRecordDataset reads back", "[tfrecord]") {
  TempDir dir;
  const std::string path = dir.path + "/w.tfrecord";
  TFRecordWriter writer(path);
  for (std::int32_t k = 0; k < 5; ++k) {
    Sample s;
    s.set("grid", Tensor::from<std::int32_t>({k, -k, 2 * k, 3}, Shape{2, 2}));
    s.set("flag", Tensor::scalar<bool>(k % 2 == 1));
    s.set("mean", Tensor::scalar<double>(k + 0.25));
    const std::uint8_t raw[] = {static_cast<std::uint8_t>(k), 0xff};
    s.set("raw", Tensor::from(std::span<const std::uint8_t>(raw, 2)));
    writer.write_example(s);
  }
  const std::string not_an_example = "\x0a\x7f";  // a field longer than the record
  writer.write(std::span<const std::byte>(reinterpret_cast<const std::byte*>(not_an_example.data()),
                                          not_an_example.size()));
  Sample half;
  half.set("h", Tensor::empty(DType::kFloat16, Shape{2}));
  CHECK_THROWS_WITH(writer.write_example(half), Catch::Contains("field 'h' is float16"));
  CHECK(writer.records() == 6);
  writer.close();
  TFRecordDataset ds({path});
  REQUIRE(ds.size() == 6);
  for (std::int64_t k = 0; k < 5; ++k) {
    const Sample s = ds.get(static_cast<std::size_t>(k));
    CHECK(s["grid"].dtype() == DType::kInt64);
    CHECK(std::vector<std::int64_t>(s["grid"].data<std::int64_t>(),
                                    s["grid"].data<std::int64_t>() + 4) ==
          std::vector<std::int64_t>{k, -k, 2 * k, 3});
    CHECK(s["flag"].data<std::int64_t>()[0] == k % 2);
    CHECK(s["mean"].data<float>()[0] == static_cast<float>(k) + 0.25F);
    CHECK(s["raw"].nbytes() == 2);
    CHECK(s["raw"].data<std::uint8_t>()[0] == k);
  }
  // Bytes that are not an Example: a record error naming the file and record.
  CHECK_THROWS_WITH(ds.get(5), Catch::Contains("TFRecordDataset: " + path + ": record 5 at byte") &&
                                   Catch::Contains("not a valid tf.train.Example"));
  CHECK_THROWS_WITH(TFRecordWriter(dir.path + "/no/such/dir.tfrecord"),
                    Catch::Contains("TFRecordWriter: cannot create"));
}

TEST_CASE("TFRecordDataset::stream gives 3 ranks the same number of batches from unequal files",
          "[tfrecord]") {
  TempDir dir;
  const std::vector<std::string> files = {
      write_tfrecord(dir.path + "/a.tfrecord", 0, 37),
      write_tfrecord(dir.path + "/b.tfrecord.gz", 37, 5, "gzip"),
      write_tfrecord(dir.path + "/c.tfrecord", 42, 19)};
  for (const EqualBatches policy : {EqualBatches::kPad, EqualBatches::kDrop}) {
    std::vector<std::size_t> batches;
    std::vector<std::int64_t> ids;
    for (std::size_t rank = 0; rank < 3; ++rank) {
      StreamOptions so;
      so.rank = rank;
      so.world_size = 3;
      so.seed = 1;
      so.equal_batches = policy;
      LoaderOptions opt;
      opt.batch_size = 4;
      opt.num_workers = 2;
      DataLoader loader(TFRecordDataset::stream(files, so, id_and_label()), opt);
      std::size_t n = 0;
      for (const Batch& batch : loader) {
        ++n;
        for (std::size_t i = 0; i < batch.size(); ++i)
          ids.push_back(batch["id"].data<std::int64_t>()[i]);
      }
      batches.push_back(n);
    }
    CHECK(batches[0] == batches[1]);
    CHECK(batches[1] == batches[2]);
    // 61 records over 6 streams: kPad reads 66 (5 twice), kDrop 60 (1 left out).
    const std::vector<std::int64_t> distinct = [&] {
      std::vector<std::int64_t> v = sorted(ids);
      v.erase(std::unique(v.begin(), v.end()), v.end());
      return v;
    }();
    CHECK(ids.size() == (policy == EqualBatches::kPad ? 66U : 60U));
    CHECK(distinct.size() == (policy == EqualBatches::kPad ? 61U : 60U));
  }
}

TEST_CASE("TFRecordDataset decodes a bytes feature through the decoder of its name", "[tfrecord]") {
  TempDir dir;
  const std::string path = write_tfrecord(dir.path + "/a.tfrecord", 0, 12);
  TFRecordOptions options;
  // As an image pipeline would be set for "image/encoded": here the decoder returns the length.
  options.decoders.set("text", [](std::span<const std::uint8_t> bytes, std::string_view source) {
    if (source.find("record") == std::string_view::npos) throw Error("no source");
    return Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(bytes.size()));
  });
  TFRecordDataset ds({path}, options);
  for (std::size_t k = 0; k < 12; ++k) {
    CHECK(ds.get(k)["text"].item<std::int64_t>() ==
          static_cast<std::int64_t>(std::string("sample-").size() + std::to_string(k).size() +
                                    k % 7));
  }
}
