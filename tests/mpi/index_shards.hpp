// The mpirun tests' corpus: WebDataset tar shards <dir>/part<j>-0.tar of sizes[j] samples
// each, sample i (counted over all shards) holding one field "index" with the text of i.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stoker/webdataset.hpp"

namespace stoker::test {

inline std::vector<std::string> write_index_shards(const std::string& dir,
                                                   const std::vector<std::size_t>& sizes) {
  std::vector<std::string> shards;
  std::size_t next = 0;
  for (std::size_t j = 0; j < sizes.size(); ++j) {
    WebDatasetWriterOptions wo;
    wo.pattern = dir + "/part" + std::to_string(j) + "-%d.tar";
    WebDatasetWriter writer(wo);
    for (std::size_t k = 0; k < sizes[j]; ++k, ++next) {
      const std::string index = std::to_string(next);
      const std::pair<std::string, std::span<const std::byte>> fields[] = {
          {"index", std::as_bytes(std::span<const char>(index.data(), index.size()))}};
      writer.write("s" + std::to_string(next), fields);
    }
    shards.push_back(writer.close().at(0));
  }
  return shards;
}

}  // namespace stoker::test
