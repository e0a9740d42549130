// What ImageFolderDataset and ImageListDataset share (private to libstoker): reading an image
// file into this thread's reused buffer, and the (image, label) sample.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "stoker/sample.hpp"
#include "stoker/vision/pipeline.hpp"

namespace stoker::detail {

// The whole file, in a buffer this thread reuses (valid until its next call). Throws
// stoker::Error naming `who` and the path when it cannot be opened or read.
std::span<const std::uint8_t> read_image_file(const std::string& path, std::string_view who);

// {"image": pipeline(bytes), "label": label}. Throws what the pipeline throws.
Sample image_sample(const vision::Pipeline& pipeline, std::span<const std::uint8_t> bytes,
                    std::string_view source, std::int64_t label);

}  // namespace stoker::detail
