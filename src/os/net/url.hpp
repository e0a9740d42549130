// Names of remote files: parsing s3://, http(s):// and file:// URLs, the percent-encoding S3's
// signatures and paths use (RFC 3986 unreserved characters kept), and joining a name to the
// one beside it ("<shard>.idx", "<dir>/index.json"). Pure functions, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stoker::detail::net {

enum class Scheme : std::uint8_t { kLocal, kFile, kHttp, kHttps, kS3 };

struct Url {
  Scheme scheme = Scheme::kLocal;
  // kHttp / kHttps: host (without brackets for IPv6), port (0: the scheme's), path starting with
  // '/' as written (already percent-encoded), query without '?'. kS3: host = the bucket, path =
  // '/' + key (not encoded). kLocal / kFile: path = the local path.
  std::string host;
  std::uint16_t port = 0;
  std::string path;
  std::string query;

  bool remote() const noexcept {
    return scheme == Scheme::kHttp || scheme == Scheme::kHttps || scheme == Scheme::kS3;
  }
  // The S3 key: path without its leading '/'.
  std::string_view key() const noexcept;
};

// Throws std::invalid_argument naming `text` for an s3:// URL without a bucket, an http URL
// without a host, a bad port, or a file:// URL naming another host.
Url parse_url(std::string_view text);

// True for "s3://", "http://", "https://" (case-insensitive scheme).
bool is_remote(std::string_view name) noexcept;

// RFC 3986 percent-encoding as SigV4 wants it: A-Z a-z 0-9 - . _ ~ kept, every other byte as
// %XX (upper-case); '/' kept when keep_slash.
std::string uri_encode(std::string_view text, bool keep_slash);
// %XX sequences decoded ('+' is kept); invalid sequences are kept as they are.
std::string uri_decode(std::string_view text);

// A query string split at '&' and '=' and decoded: "a=1&b" -> {("a","1"), ("b","")}.
std::vector<std::pair<std::string, std::string>> parse_query(std::string_view query);

// The name of the file `suffix` appended to `name` ("s3://b/x.tar" + ".idx"); for URLs with a
// query, the suffix goes before the '?'.
std::string append_to_name(std::string_view name, std::string_view suffix);
// `leaf` in the directory `name` names: "s3://b/ds" + "index.json" -> "s3://b/ds/index.json".
std::string join_name(std::string_view name, std::string_view leaf);

}  // namespace stoker::detail::net
