// ImageListDataset, and the file reading and sample building it shares with
// ImageFolderDataset.
#include "stoker/image_list_dataset.hpp"

#include <cerrno>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "datasets/image_sample.hpp"
#include "os/posix.hpp"
#include "stoker/errors.hpp"
#include "stoker/image_folder_dataset.hpp"

namespace stoker {
namespace detail {

std::span<const std::uint8_t> read_image_file(const std::string& path, std::string_view who) {
  // Per thread, reused: reading an image costs no allocation once the buffer has grown.
  thread_local std::vector<std::uint8_t> buffer;
  posix::Fd fd(posix::open_read(path.c_str()));
  if (!fd.valid()) {
    throw Error(posix::errno_message(fmt::format("{}: cannot open {}", who, path), errno));
  }
  std::size_t used = 0;
  for (;;) {
    if (buffer.size() < used + 65536) buffer.resize(used + 65536);
    const ssize_t n = posix::read_some(fd.get(), buffer.data() + used, buffer.size() - used);
    if (n < 0) {
      throw Error(posix::errno_message(fmt::format("{}: cannot read {}", who, path), errno));
    }
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  return {buffer.data(), used};
}

Sample image_sample(const vision::Pipeline& pipeline, std::span<const std::uint8_t> bytes,
                    std::string_view source, std::int64_t label) {
  Sample sample;
  sample.set("image", pipeline(bytes, source));
  sample.set("label", Tensor::scalar<std::int64_t>(label));
  return sample;
}

}  // namespace detail

ImageListDataset::ImageListDataset(std::vector<Entry> entries)
    : ImageListDataset(std::move(entries), ImageFolderDataset::default_pipeline()) {}

ImageListDataset::ImageListDataset(std::vector<Entry> entries, vision::Pipeline pipeline)
    : pipeline_(std::move(pipeline)) {
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].path.empty() && entries[i].bytes.empty()) {
      throw std::invalid_argument(fmt::format(
          "ImageListDataset: entry {} has neither a path nor bytes; give the file to read or the "
          "encoded image",
          i));
    }
  }
  entries_ = std::make_shared<const std::vector<Entry>>(std::move(entries));
}

namespace {

std::vector<ImageListDataset::Entry> as_entries(
    const std::vector<std::pair<std::string, std::int64_t>>& files) {
  std::vector<ImageListDataset::Entry> entries;
  entries.reserve(files.size());
  for (const auto& [path, label] : files) entries.push_back(ImageListDataset::file(path, label));
  return entries;
}

}  // namespace

ImageListDataset::ImageListDataset(const std::vector<std::pair<std::string, std::int64_t>>& files)
    : ImageListDataset(as_entries(files)) {}

ImageListDataset::ImageListDataset(const std::vector<std::pair<std::string, std::int64_t>>& files,
                                   vision::Pipeline pipeline)
    : ImageListDataset(as_entries(files), std::move(pipeline)) {}

Sample ImageListDataset::get(std::size_t i) const {
  const std::vector<Entry>& entries = *entries_;
  if (i >= entries.size()) {
    throw std::out_of_range(
        fmt::format("ImageListDataset::get: index {} of {} images", i, entries.size()));
  }
  const Entry& e = entries[i];
  if (e.bytes.empty()) {
    return detail::image_sample(pipeline_, detail::read_image_file(e.path, "ImageListDataset"),
                                e.path, e.label);
  }
  const std::string source = e.path.empty() ? fmt::format("ImageListDataset entry {}", i)
                                            : fmt::format("{} (entry {})", e.path, i);
  return detail::image_sample(pipeline_, e.bytes, source, e.label);
}

}  // namespace stoker
