// Where S3 requests go and with which credentials, found as the AWS command-line tools find
// them: RemoteOptions first, then the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN, AWS_PROFILE, AWS_REGION, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3,
// AWS_ENDPOINT_URL, AWS_CA_BUNDLE, AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE), then the
// profile's sections of ~/.aws/credentials and ~/.aws/config (region, endpoint_url, ca_bundle,
// and the nested "s3 =" block's endpoint_url and addressing_style). Without credentials,
// requests go unsigned (public buckets).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "os/net/sigv4.hpp"
#include "stoker/remote.hpp"

namespace stoker::detail::net {

struct S3Settings {
  AwsCredentials credentials;      // empty: unsigned requests
  std::string credentials_source;  // "the environment", "/root/.aws/credentials [prod]", ...
  std::string profile;
  std::string region;
  // "scheme://host[:port]" without a path; empty: AWS's regional endpoint.
  std::string endpoint;
  AddressingStyle addressing = AddressingStyle::kDefault;
  std::string ca_file;
};

// Reads the environment and the two files (missing files are not an error). Throws
// std::invalid_argument for a malformed endpoint, or a profile named explicitly
// (RemoteOptions::profile or AWS_PROFILE) that neither file has.
S3Settings resolve_s3_settings(const RemoteOptions& options);

// The sections of an AWS ini file: "[default]", "[profile x]" (config) and "[x]" (credentials)
// are all keyed by the profile name ("default", "x"); keys of a nested block ("s3 =" followed by
// indented lines) are stored as "s3.<key>". Comments (# and ;) and blank lines are skipped.
using IniSections = std::map<std::string, std::map<std::string, std::string>>;
IniSections parse_aws_ini(std::string_view text);

}  // namespace stoker::detail::net
