// TokenDataset over llm.c and nanoGPT shards written by the test: window counts and contents,
// strides, shard boundaries, dtypes, bad files, and a shuffled loader over several shards.
#include <cstdlib>
#include <fstream>
#include <set>

#include <catch2/catch.hpp>

#include "support/datasets.hpp"
#include "support/files.hpp"

using namespace stoker;

namespace {

using stoker::test::TempDir;

// Token k of shard `id` is (id * 1000 + k) % 65536.
std::vector<std::uint16_t> tokens(std::size_t id, std::size_t n) {
  std::vector<std::uint16_t> t(n);
  for (std::size_t k = 0; k < n; ++k) t[k] = static_cast<std::uint16_t>((id * 1000 + k) % 65536);
  return t;
}

std::string write_llmc(const TempDir& dir, std::size_t id, std::size_t n,
                       std::int32_t magic = kLlmcMagic, std::int32_t version = kLlmcVersion,
                       std::int32_t claimed = -1) {
  const std::string path = dir.path + "/shard_" + std::to_string(id) + ".bin";
  std::int32_t header[256] = {};
  header[0] = magic;
  header[1] = version;
  header[2] = claimed >= 0 ? claimed : static_cast<std::int32_t>(n);
  const std::vector<std::uint16_t> t = tokens(id, n);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  out.write(reinterpret_cast<const char*>(t.data()), static_cast<std::streamsize>(t.size() * 2));
  return path;
}

std::string write_raw(const TempDir& dir, std::size_t id, std::size_t n, bool odd = false) {
  const std::string path = dir.path + "/raw_" + std::to_string(id) + ".bin";
  const std::vector<std::uint16_t> t = tokens(id, n);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(t.data()), static_cast<std::streamsize>(t.size() * 2));
  if (odd) out.put('x');
  return path;
}

}  // namespace

TEST_CASE("TokenDataset: windows of context tokens and their next-token targets", "[tokens]") {
  TempDir dir;
  const std::string a = write_llmc(dir, 1, 100);
  const std::string b = write_raw(dir, 2, 50);
  TokenOptions opt;
  opt.context = 8;
  const TokenDataset ds({a, b}, opt);
  // (100 - 8 - 1) / 8 + 1 = 12 windows in the llm.c shard; (50 - 9) / 8 + 1 = 6 in the raw one.
  REQUIRE(ds.shards()[0].llmc);
  REQUIRE_FALSE(ds.shards()[1].llmc);
  REQUIRE(ds.size() == 18);
  REQUIRE(ds.num_tokens() == 150);
  const Sample first = ds.get(0);
  REQUIRE(first["input"].dtype() == DType::kInt64);
  REQUIRE(first["input"].shape() == Shape({8}));
  REQUIRE(first["input"].data<std::int64_t>()[0] == 1000);
  REQUIRE(first["target"].data<std::int64_t>()[7] == 1008);
  const Sample last_of_a = ds.get(11);  // starts at token 88: 88..95, targets 89..96
  REQUIRE(last_of_a["input"].data<std::int64_t>()[0] == 1088);
  REQUIRE(last_of_a["target"].data<std::int64_t>()[7] == 1096);
  const Sample in_b = ds.get(12);  // the raw shard's first window
  REQUIRE(in_b["input"].data<std::int64_t>()[0] == 2000);
  REQUIRE(ds.get(17)["target"].data<std::int64_t>()[7] == 2000 + 40 + 8);
  REQUIRE_THROWS_AS(ds.get(18), std::out_of_range);
}

TEST_CASE("TokenDataset: stride, uint16 views and int32", "[tokens]") {
  TempDir dir;
  const std::string a = write_llmc(dir, 3, 20);
  TokenOptions opt;
  opt.context = 4;
  opt.stride = 1;
  opt.dtype = DType::kUInt16;
  const TokenDataset every({a}, opt);
  REQUIRE(every.size() == 16);  // starts 0..15: each needs 5 tokens
  const Sample s = every.get(15);
  REQUIRE(s["input"].is_view());
  REQUIRE(s["input"].data<std::uint16_t>()[0] == 3015);
  REQUIRE(s["target"].data<std::uint16_t>()[3] == 3019);
  opt.dtype = DType::kInt32;
  opt.stride = 3;
  const TokenDataset int32({a}, opt);
  REQUIRE(int32.size() == 6);  // starts 0, 3, ..., 15
  REQUIRE(int32.get(5)["input"].data<std::int32_t>()[0] == 3015);
  opt.context = 20;  // a shard shorter than a window has none
  REQUIRE(TokenDataset({a}, opt).size() == 0);
}

TEST_CASE("TokenDataset: bad shards are clear errors", "[tokens]") {
  TempDir dir;
  TokenOptions llmc;
  llmc.format = TokenDataset::Format::kLlmc;
  REQUIRE_THROWS_WITH(TokenDataset({write_raw(dir, 4, 600)}, llmc),
                      Catch::Contains("is not an llm.c shard") && Catch::Contains("20240520"));
  REQUIRE_THROWS_WITH(TokenDataset({write_llmc(dir, 5, 10, kLlmcMagic, 2)}),
                      Catch::Contains("version 2") && Catch::Contains("reads version 1"));
  REQUIRE_THROWS_WITH(TokenDataset({write_llmc(dir, 6, 10, kLlmcMagic, 1, 11)}),
                      Catch::Contains("says 11 tokens") && Catch::Contains("truncated or corrupt"));
  REQUIRE_THROWS_WITH(TokenDataset({write_raw(dir, 7, 10, true)}), Catch::Contains("odd size"));
  REQUIRE_THROWS_WITH(TokenDataset({dir.path + "/missing.bin"}), Catch::Contains("cannot open"));
  TokenOptions bad;
  bad.context = 0;
  REQUIRE_THROWS_AS(TokenDataset({write_raw(dir, 8, 10)}, bad), std::invalid_argument);
}

TEST_CASE("TokenDataset: a shuffled loader visits every window once", "[tokens]") {
  TempDir dir;
  std::vector<std::string> shards;
  for (std::size_t id = 0; id < 3; ++id) shards.push_back(write_llmc(dir, id, 1000 + 37 * id));
  TokenOptions topt;
  topt.context = 64;
  const TokenDataset ds(shards, topt);
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  opt.shuffle = true;
  DataLoader loader(ds, opt);
  std::set<std::size_t> seen;
  for (const Batch& batch : loader) {
    REQUIRE(batch["input"].shape() == Shape({static_cast<std::int64_t>(batch.size()), 64}));
    for (std::size_t r = 0; r < batch.size(); ++r) {
      const std::int64_t* in = batch["input"].data<std::int64_t>() + r * 64;
      const std::int64_t* tg = batch["target"].data<std::int64_t>() + r * 64;
      for (std::size_t k = 0; k + 1 < 64; ++k) REQUIRE(tg[k] == in[k + 1]);
      REQUIRE(seen.insert(batch.indices()[r]).second);
    }
  }
  REQUIRE(seen.size() == ds.size());
}
