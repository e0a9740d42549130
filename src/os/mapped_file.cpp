#include "os/mapped_file.hpp"

#include <sys/mman.h>

#include <cerrno>

#include <fmt/format.h>

#include "data/format.hpp"
#include "os/posix.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, const char* who) {
  posix::Fd fd(posix::open_read(path.c_str()));
  if (!fd.valid()) {
    throw Error(posix::errno_message(fmt::format("{}: cannot open {}", who, path), errno));
  }
  const off_t file_size = posix::file_size(fd.get());
  if (file_size < 0) {
    throw Error(posix::errno_message(fmt::format("{}: cannot stat {}", who, path), errno));
  }
  const auto size = static_cast<std::size_t>(file_size);
  if (size == 0) throw Error(fmt::format("{}: {} is empty", who, path));
  void* data = posix::map_shared_read_only(fd.get(), size);
  if (data == MAP_FAILED) {
    throw Error(posix::errno_message(
        fmt::format("{}: cannot map {} ({})", who, path, format_bytes(size)), errno));
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->data_ = static_cast<const std::byte*>(data);
  file->size_ = size;
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) posix::unmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace stoker::detail
