// TokenDataset: fixed-length windows over language-model token shards, memory-mapped. Sample i
// is a window of `context` tokens, "input", and the same window shifted by one, "target" (the
// next-token labels). Shards are llm.c's (a 256 x int32 header with magic 20240520 and version
// 1, then uint16 tokens) or nanoGPT's (headerless uint16 .bin files); windows never cross a
// shard boundary. With shuffle on, the loader visits windows in random order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stoker/sample.hpp"
#include "stoker/tensor.hpp"

namespace stoker {
namespace detail {
class MappedFile;
}

enum class TokenFormat : std::uint8_t {
  kDetect,  // llm.c when the file starts with the magic 20240520, headerless otherwise
  kLlmc,
  kRaw,  // nanoGPT: uint16 tokens and nothing else
};

struct TokenOptions {
  std::size_t context = 1024;         // tokens per window (T)
  std::optional<std::size_t> stride;  // between window starts; default: context (no overlap)
  // Of "input" and "target". kUInt16 serves the shard's tokens as they are (views, no
  // conversion); kInt32 and kInt64 (what embedding layers usually take) convert.
  DType dtype = DType::kInt64;
  TokenFormat format = TokenFormat::kDetect;
};

class TokenDataset {
 public:
  using Format = TokenFormat;
  using Options [[deprecated("TokenOptions is now stoker::TokenOptions")]] = TokenOptions;

  // Throws stoker::Error for a file that cannot be opened or mapped, and for a bad llm.c
  // header, a token count that disagrees with the file's size, or an odd-sized raw file
  // (naming the file); std::invalid_argument for bad options or no shards.
  explicit TokenDataset(std::vector<std::string> shards) : TokenDataset(std::move(shards), {}) {}
  TokenDataset(std::vector<std::string> shards, TokenOptions options);

  std::size_t size() const noexcept { return windows_; }
  // Either process. Throws std::out_of_range for i >= size(); stoker::ShardError naming the
  // shard and the window's offset when the shard has shrunk since it was opened.
  Sample get(std::size_t i) const;
  std::size_t num_tokens() const noexcept;

  struct Shard {
    std::string path;
    bool llmc = false;
    std::size_t tokens = 0;
    std::size_t windows = 0;
    std::size_t first_window = 0;  // global index of this shard's first window
    const std::uint16_t* data = nullptr;
    std::shared_ptr<const detail::MappedFile> file;
  };
  const std::vector<Shard>& shards() const noexcept { return shards_; }

 private:
  TokenOptions options_;
  std::size_t stride_;
  std::vector<Shard> shards_;
  std::size_t windows_ = 0;
};

// The llm.c shard header's magic number and version for uint16 (GPT-2) tokens.
inline constexpr std::int32_t kLlmcMagic = 20240520;
inline constexpr std::int32_t kLlmcVersion = 1;
inline constexpr std::size_t kLlmcHeaderBytes = 256 * sizeof(std::int32_t);

}  // namespace stoker
