// MappedFile: a whole file mapped read-only and shared, unmapped when the last holder goes.
// What NpyDataset and TokenDataset serve their samples from (views keep it alive).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

namespace stoker::detail {

class MappedFile {
 public:
  // Throws stoker::Error naming `who`, the path and the reason when the file cannot be opened,
  // is empty, or cannot be mapped.
  static std::shared_ptr<const MappedFile> open(const std::string& path, const char* who);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }

 private:
  MappedFile() = default;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace stoker::detail
