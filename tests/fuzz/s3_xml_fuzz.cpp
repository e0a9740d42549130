// libFuzzer target for S3's XML answers (src/os/net/s3_xml.hpp: ListObjectsV2 pages, error
// documents, CreateMultipartUpload), parsed with expat (build with clang: -DSTOKER_BUILD_FUZZ=ON).
//   build/fuzz/tests/fuzz/s3_xml_fuzz -max_total_time=60
// Any bytes parse into a checked page or raise stoker::Error; the error parser never throws.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "os/net/s3_xml.hpp"
#include "stoker/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stoker::detail::net;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const ListPage page = parse_list_page(text);
    if (page.truncated && page.next_token.empty()) std::abort();
    for (const ListedObject& o : page.objects) {
      if (o.key.size() > 64 * 1024) std::abort();  // each text is bounded
    }
  } catch (const stoker::Error&) {
  }
  if (const auto error = parse_error_body(text)) {
    if (error->code.empty()) std::abort();
  }
  try {
    if (parse_upload_id(text).empty()) std::abort();
  } catch (const stoker::Error&) {
  }
  return 0;
}
