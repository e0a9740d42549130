#include "stoker/token_dataset.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "data/format.hpp"
#include "os/mapped_file.hpp"
#include "stoker/errors.hpp"

namespace stoker {

TokenDataset::TokenDataset(std::vector<std::string> shards, TokenOptions options)
    : options_(options), stride_(options.stride.value_or(options.context)) {
  if (shards.empty()) throw std::invalid_argument("TokenDataset: no shard files given");
  if (options_.context == 0) throw std::invalid_argument("TokenDataset: context must be >= 1");
  if (stride_ == 0) throw std::invalid_argument("TokenDataset: stride must be >= 1");
  if (options_.dtype != DType::kUInt16 && options_.dtype != DType::kInt32 &&
      options_.dtype != DType::kInt64) {
    throw std::invalid_argument(fmt::format(
        "TokenDataset: dtype {} is not one of uint16, int32, int64", dtype_name(options_.dtype)));
  }
  for (const std::string& path : shards) {
    Shard shard;
    shard.path = path;
    shard.file = detail::MappedFile::open(path, "TokenDataset");
    const std::size_t size = shard.file->size();
    std::int32_t header[3] = {0, 0, 0};
    if (size >= sizeof header) std::memcpy(header, shard.file->data(), sizeof header);
    shard.file->check("TokenDataset", 0);
    shard.llmc = options_.format == Format::kLlmc ||
                 (options_.format == Format::kDetect && header[0] == kLlmcMagic);
    std::size_t offset = 0;
    if (shard.llmc) {
      if (size < kLlmcHeaderBytes || header[0] != kLlmcMagic) {
        throw Error(fmt::format(
            "TokenDataset: {} is not an llm.c shard (it should start with a 1024-byte header "
            "whose first int32 is {}); give Format::kRaw for headerless nanoGPT files",
            path, kLlmcMagic));
      }
      if (header[1] != kLlmcVersion) {
        throw Error(fmt::format(
            "TokenDataset: {} is an llm.c shard of version {}; stoker reads version {} (uint16 "
            "tokens)",
            path, header[1], kLlmcVersion));
      }
      offset = kLlmcHeaderBytes;
      shard.tokens = static_cast<std::size_t>(header[2] < 0 ? 0 : header[2]);
      const std::size_t have = (size - offset) / 2;
      if (header[2] < 0 || have != shard.tokens || (size - offset) % 2 != 0) {
        throw Error(fmt::format(
            "TokenDataset: {}: the header says {} tokens but the file holds {} bytes of them "
            "({} tokens); the shard is truncated or corrupt",
            path, header[2], size - offset, have));
      }
    } else {
      if (size % 2 != 0) {
        throw Error(fmt::format(
            "TokenDataset: {} has an odd size ({} bytes); a headerless shard is uint16 tokens",
            path, size));
      }
      shard.tokens = size / 2;
    }
    shard.data = reinterpret_cast<const std::uint16_t*>(shard.file->data() + offset);
    // A window needs context + 1 tokens: its input and, shifted by one, its targets.
    shard.windows =
        shard.tokens > options_.context ? (shard.tokens - options_.context - 1) / stride_ + 1 : 0;
    shard.first_window = windows_;
    windows_ += shard.windows;
    shards_.push_back(std::move(shard));
  }
}

std::size_t TokenDataset::num_tokens() const noexcept {
  std::size_t n = 0;
  for (const Shard& shard : shards_) n += shard.tokens;
  return n;
}

Sample TokenDataset::get(std::size_t i) const {
  if (i >= windows_) {
    throw std::out_of_range(fmt::format("TokenDataset::get: window {} of {} windows", i, windows_));
  }
  // The last shard whose first window is <= i.
  const auto it =
      std::upper_bound(shards_.begin(), shards_.end(), i,
                       [](std::size_t v, const Shard& s) { return v < s.first_window; });
  const Shard& shard = *(it - 1);
  const std::uint16_t* start = shard.data + (i - shard.first_window) * stride_;
  const auto t = static_cast<std::int64_t>(options_.context);
  const auto shrunk = [&] {
    const auto at =
        static_cast<std::size_t>(reinterpret_cast<const std::byte*>(start) - shard.file->data());
    shard.file->throw_shrunk(fmt::format("TokenDataset::get: window {} (bytes {} to {})", i, at,
                                         at + 2 * (options_.context + 1)),
                             at);
  };
  Sample s;
  if (options_.dtype == DType::kUInt16) {
    // A file cut since it was opened: an error now rather than views of zeros.
    if (!shard.file->intact()) shrunk();
    auto* first = const_cast<std::uint16_t*>(start);  // read-only memory: views must not be written
    s.set("input", Tensor::view(DType::kUInt16, {t}, first, shard.file));
    s.set("target", Tensor::view(DType::kUInt16, {t}, first + 1, shard.file));
    return s;
  }
  Tensor input = Tensor::empty(options_.dtype, {t});
  Tensor target = Tensor::empty(options_.dtype, {t});
  if (options_.dtype == DType::kInt64) {
    std::int64_t* in = input.data<std::int64_t>();
    std::int64_t* out = target.data<std::int64_t>();
    for (std::size_t k = 0; k < options_.context; ++k) {
      in[k] = start[k];
      out[k] = start[k + 1];
    }
  } else {
    std::int32_t* in = input.data<std::int32_t>();
    std::int32_t* out = target.data<std::int32_t>();
    for (std::size_t k = 0; k < options_.context; ++k) {
      in[k] = start[k];
      out[k] = start[k + 1];
    }
  }
  if (!shard.file->intact()) shrunk();
  s.set("input", std::move(input));
  s.set("target", std::move(target));
  return s;
}

}  // namespace stoker
