#include "os/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>

#include <fmt/format.h>

#include "data/format.hpp"
#include "os/posix.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, const char* who) {
  posix::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    throw Error(posix::errno_message(fmt::format("{}: cannot open {}", who, path), errno));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    throw Error(posix::errno_message(fmt::format("{}: cannot stat {}", who, path), errno));
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size == 0) throw Error(fmt::format("{}: {} is empty", who, path));
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
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
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace stoker::detail
