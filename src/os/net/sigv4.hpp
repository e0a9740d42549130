// AWS Signature Version 4 for S3 requests, on OpenSSL's SHA-256 and HMAC: the canonical request,
// the string to sign, the signing key and the headers a signed request carries (Authorization,
// x-amz-date, x-amz-content-sha256, x-amz-security-token). Written here rather than taken from
// libcurl's CURLOPT_AWS_SIGV4 because that option neither sends nor signs
// x-amz-content-sha256, which S3 requires on every signed request, and it orders the query
// string differently from the canonical form (by raw rather than encoded names, values
// unsorted), so requests with several parameters (ListObjectsV2's continuation-token,
// prefix, list-type) were refused. Tested against AWS's published examples and against
// botocore (tests/unit/sigv4_test.cpp). Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stoker::detail::net {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // temporary credentials (STS); empty otherwise
  bool empty() const noexcept { return access_key_id.empty(); }
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct SigningInput {
  std::string method = "GET";
  // The Host header as sent: the host, and ":port" when it is not the scheme's default.
  std::string host;
  // The path exactly as it goes on the wire (S3: each key byte outside the unreserved set
  // percent-encoded once, '/' kept). S3 signs it without normalising.
  std::string path = "/";
  // Decoded query parameters, in any order (encoded and sorted here).
  std::vector<std::pair<std::string, std::string>> query;
  // Further headers to sign and send (any case; repeated names are joined with ',').
  HeaderList headers;
  // The body's SHA-256 in lower-case hex, or "UNSIGNED-PAYLOAD".
  std::string payload_sha256;
  std::string region = "us-east-1";
  std::string service = "s3";
  std::time_t time = 0;  // UTC seconds
};

struct SignedRequest {
  // What to add to the request: x-amz-date, x-amz-content-sha256, x-amz-security-token (with a
  // session token) and Authorization.
  HeaderList headers;
  // The intermediate texts, for tests and for messages when a server refuses the signature.
  std::string canonical_request;
  std::string string_to_sign;
};

SignedRequest sign_v4(const SigningInput& input, const AwsCredentials& credentials);

// The canonical query string: names and values uri_encode()d, sorted by name then value, joined
// as "a=1&b=2" ("b=" for an empty value).
std::string canonical_query(const std::vector<std::pair<std::string, std::string>>& query);

// Lower-case hex SHA-256 of bytes (e3b0c442... for none).
std::string sha256_hex(std::span<const std::byte> bytes);
std::string sha256_hex(std::string_view text);
// SHA-256 of a file's bytes [0, size) read through os/posix; throws stoker::Error naming it.
std::string sha256_file_hex(const std::string& path);

// "20130524T000000Z" of a UTC time.
std::string amz_date(std::time_t time);

}  // namespace stoker::detail::net
