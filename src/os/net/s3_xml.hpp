// The XML bodies of S3's answers that stoker reads, parsed with expat: ListObjectsV2 pages (keys,
// sizes, ETags, the continuation token), error documents (<Error><Code>, <Message>) and
// CreateMultipartUpload's UploadId. They are network bytes: every parser here takes any input
// without crashing (tests/fuzz/s3_xml_fuzz.cpp), bounds its depth and text, and reports a
// malformed document as a stoker::Error naming what was wrong.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stoker::detail::net {

struct ListedObject {
  std::string key;
  std::uint64_t size = 0;
  std::string etag;  // without its quotes
};

struct ListPage {
  std::vector<ListedObject> objects;
  bool truncated = false;
  std::string next_token;  // NextContinuationToken, when truncated
};

// A <ListBucketResult>. Throws stoker::Error for malformed XML, another root element, a
// <Contents> without a <Key>, a <Size> that is not a number, or a truncated page without a
// continuation token.
ListPage parse_list_page(std::string_view xml);

struct S3ErrorBody {
  std::string code;     // "NoSuchKey", "SlowDown", "ExpiredToken", ...
  std::string message;  // the server's sentence
};
// An <Error> document; nullopt for anything else (an HTML page, nothing, malformed XML).
std::optional<S3ErrorBody> parse_error_body(std::string_view xml) noexcept;

// The UploadId of an <InitiateMultipartUploadResult>; throws stoker::Error when there is none.
std::string parse_upload_id(std::string_view xml);

}  // namespace stoker::detail::net
