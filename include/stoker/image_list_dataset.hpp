// ImageListDataset: a map-style dataset over a list of images that are not laid out as class
// folders: each entry is a file path or the encoded bytes themselves (JPEG, PNG or WebP) with
// its label, decoded and transformed by a vision::Pipeline. Sample: "image" (the pipeline's
// tensor) and "label" int64. Copies share the list (bytes are not copied per loader).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoker/sample.hpp"
#include "stoker/vision/pipeline.hpp"

namespace stoker {

class ImageListDataset {
 public:
  struct Entry {
    std::string path;                 // the file to read; or, with bytes, a name for errors
    std::vector<std::uint8_t> bytes;  // the encoded image; empty: read `path`
    std::int64_t label = 0;
  };
  static Entry file(std::string path, std::int64_t label) {
    return Entry{std::move(path), {}, label};
  }
  static Entry encoded(std::vector<std::uint8_t> bytes, std::int64_t label, std::string name = {}) {
    return Entry{std::move(name), std::move(bytes), label};
  }

  // Throws std::invalid_argument for an entry with neither a path nor bytes. The pipeline
  // defaults to ImageFolderDataset's (Resize(256) -> CenterCrop(224), uint8 CHW, exact).
  explicit ImageListDataset(std::vector<Entry> entries);
  ImageListDataset(std::vector<Entry> entries, vision::Pipeline pipeline);
  // (path, label) pairs.
  explicit ImageListDataset(const std::vector<std::pair<std::string, std::int64_t>>& files);
  ImageListDataset(const std::vector<std::pair<std::string, std::int64_t>>& files,
                   vision::Pipeline pipeline);

  std::size_t size() const noexcept { return entries_->size(); }
  // Inside get() of a loader (either process). Throws stoker::Error naming the file (or the
  // entry's name and index) when it cannot be read or decoded; std::out_of_range past size().
  Sample get(std::size_t i) const;

  const std::vector<Entry>& entries() const noexcept { return *entries_; }
  const vision::Pipeline& pipeline() const noexcept { return pipeline_; }

 private:
  std::shared_ptr<const std::vector<Entry>> entries_;
  vision::Pipeline pipeline_;
};

}  // namespace stoker
