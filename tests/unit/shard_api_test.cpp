// The public spelling of the shard datasets' API: both forms of stream() (the static factory
// over files, and a dataset's own stream(StreamOptions)), the old names kept as aliases, and
// ShardError as the one base a program catches for a damaged shard.
#include <filesystem>
#include <string>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>

#include "stoker/image_folder_dataset.hpp"
#include "stoker/mds_dataset.hpp"
#include "stoker/tfrecord_dataset.hpp"
#include "stoker/token_dataset.hpp"
#include "stoker/webdataset.hpp"
#include "support/files.hpp"

using namespace stoker;

namespace {

// A TFRecord file of `n` Examples {"id": int64 [1]}.
std::string tfrecord_file(const std::string& dir, int n) {
  const std::string path = dir + "/api.tfrecord";
  TFRecordWriter writer(path);
  for (int i = 0; i < n; ++i) {
    Sample s;
    s.set("id", Tensor::from<std::int64_t>({i}));
    writer.write_example(s);
  }
  writer.close();
  return path;
}

template <class D>
constexpr bool has_member_stream = requires(const D& d, StreamOptions o) {
  { d.stream(o) } -> std::same_as<ShardedStream>;
  { d.stream() } -> std::same_as<ShardedStream>;
};

}  // namespace

TEST_CASE("stream(): the static factory and a dataset's own stream(StreamOptions) both work",
          "[shards][api]") {
  static_assert(has_member_stream<TFRecordDataset>);
  static_assert(has_member_stream<WebDatasetShards>);
  static_assert(has_member_stream<MdsDataset>);
  test::TempDir tmp("api");
  const std::string file = tfrecord_file(tmp.path, 10);
  TFRecordDataset tfr({file});
  StreamOptions opts;
  opts.shuffle = false;
  ShardedStream from_dataset = tfr.stream(opts);
  ShardedStream from_files = TFRecordDataset::stream({file}, opts);
  REQUIRE(from_dataset.total_samples() == 10);
  REQUIRE(from_files.total_samples() == 10);
  for (std::int64_t i = 0; i < 10; ++i) {
    REQUIRE((*from_dataset.next())["id"].data<std::int64_t>()[0] == i);
    REQUIRE((*from_files.next())["id"].data<std::int64_t>()[0] == i);
  }
  REQUIRE_FALSE(from_dataset.next());
  REQUIRE(tfr.stream().total_samples() == 10);
}

TEST_CASE("ShardError is the one base of every format's damaged-shard error", "[shards][api]") {
  static_assert(std::is_base_of_v<Error, ShardError>);
  static_assert(std::is_base_of_v<ShardError, TFRecordError>);
  static_assert(std::is_base_of_v<ShardError, MdsError>);
  test::TempDir tmp("api-error");
  const std::string file = tfrecord_file(tmp.path, 3);
  {
    std::string bytes = test::read_file(file);
    bytes[bytes.size() - 1] = static_cast<char>(bytes.back() ^ 1);  // the last data CRC
    test::write_file(file, bytes);
  }
  std::filesystem::remove(file + ".stoker.idx");
  TFRecordDataset tfr({file});
  try {
    (void)tfr.get(2);
    FAIL("no error");
  } catch (const ShardError& e) {
    REQUIRE(e.path() == file);
    REQUIRE(e.offset() > 0);
    REQUIRE_THAT(e.what(), Catch::Contains("bad data CRC"));
  }
  const MdsError mds("MdsDataset: x: bad", "x/shard.00000.mds", 80);
  REQUIRE(mds.offset() == 80);
  REQUIRE(MdsError("m", "index.json").offset() == 0);
}

// The names before the renames, kept as deprecated aliases for a release: they still compile
// (and warn, which this file silences) and mean the same.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST_CASE("the names before the renames are aliases of the new ones", "[shards][api]") {
  static_assert(std::is_same_v<ShardWriter, WebDatasetWriter>);
  static_assert(std::is_same_v<ShardWriterOptions, WebDatasetWriterOptions>);
  static_assert(std::is_same_v<TokenDataset::Options, TokenOptions>);
  static_assert(std::is_same_v<TokenDataset::Format, TokenFormat>);
  static_assert(std::is_same_v<ImageFolderDataset::Options, ImageFolderOptions>);
  // WebDatasetShards took ShardOptions before it had options of its own.
  static_assert(std::is_convertible_v<ShardOptions, WebDatasetOptions>);
  test::TempDir tmp("api-alias");
  ShardWriterOptions options;
  options.pattern = tmp.path + "/old-%d.tar";
  ShardWriter writer(options);
  Sample s;
  s.set("cls", Tensor::scalar<std::int64_t>(4));
  writer.write("k0", s);
  const std::vector<std::string> shards = writer.finish();
  REQUIRE(shards.size() == 1);
  ShardOptions shared;
  shared.write_index = false;
  WebDatasetShards ds(shards, shared);
  REQUIRE(ds.get(0)["cls"].item<std::int64_t>() == 4);
}
#pragma GCC diagnostic pop
