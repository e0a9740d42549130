// TokenDataset: language-model training windows over token shards in llm.c's format (a header
// of 256 int32 starting with magic 20240520 and version 1, the token count third, then uint16
// tokens), memory-mapped. Sample i is "input", a window of 64 tokens, and "target", the same
// window one token later: the next-token labels. Windows never cross a shard boundary.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <stoker/stoker.hpp>

#include "cli.hpp"

namespace {

// Token k of shard s is (s * 1000 + 7 * k) % 50257, below GPT-2's vocabulary size.
std::string write_shard(const std::string& dir, std::size_t s, std::size_t tokens) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = stoker::kLlmcMagic;    // 20240520
  header[1] = stoker::kLlmcVersion;  // 1
  header[2] = static_cast<std::int32_t>(tokens);
  std::vector<std::uint16_t> data(tokens);
  for (std::size_t k = 0; k < tokens; ++k) {
    data[k] = static_cast<std::uint16_t>((s * 1000 + 7 * k) % 50257);
  }
  const std::string path = dir + "/shard_" + std::to_string(s) + ".bin";
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 256 * sizeof(std::int32_t));
  out.write(reinterpret_cast<const char*>(data.data()),
            static_cast<std::streamsize>(tokens * sizeof(std::uint16_t)));
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  example::Cli cli(
      argc, argv,
      "usage: token_shards\n  TokenDataset over two llm.c token shards.\n  It takes no arguments.");
  cli.done();
  char dir_template[] = "/tmp/stoker-tokens-example-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::vector<std::string> shards = {write_shard(dir, 0, 200000),
                                           write_shard(dir, 1, 130000)};
  int status = 1;
  try {
    stoker::TokenOptions topt;
    topt.context = 64;  // T; stride defaults to T (no overlap), dtype to int64
    const stoker::TokenDataset dataset(shards, topt);
    for (const stoker::TokenDataset::Shard& s : dataset.shards()) {
      std::printf("%s: %s shard, %zu tokens, %zu windows\n", s.path.c_str(),
                  s.llmc ? "llm.c" : "raw", s.tokens, s.windows);
    }
    stoker::LoaderOptions opt;
    opt.batch_size = 32;
    opt.num_workers = 2;
    opt.shuffle = true;
    stoker::DataLoader loader(dataset, opt);
    std::size_t windows = 0;
    std::size_t mismatches = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const stoker::Batch& batch : loader) {
      const std::int64_t* input = batch["input"].data<std::int64_t>();  // [32, 64]
      const std::int64_t* target = batch["target"].data<std::int64_t>();
      for (std::size_t r = 0; r < batch.size(); ++r) {
        for (std::size_t k = 0; k + 1 < 64; ++k) {
          mismatches += target[r * 64 + k] == input[r * 64 + k + 1] ? 0 : 1;
        }
      }
      windows += batch.size();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%zu of %zu windows in %zu batches; target[k] != input[k + 1] %zu times\n", windows,
                dataset.size(), loader.size(), mismatches);
    std::printf("%.1f M tokens/s (input tokens delivered, 2 workers, int64)\n",
                static_cast<double>(windows * 64) / seconds / 1e6);
    status = windows == dataset.size() && mismatches == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "token_shards: %s\n", e.what());
  }
  std::filesystem::remove_all(dir);
  return status;
}
