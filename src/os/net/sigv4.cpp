#include "os/net/sigv4.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <map>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "os/net/url.hpp"
#include "os/posix.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail::net {
namespace {

using Digest = std::array<unsigned char, SHA256_DIGEST_LENGTH>;

std::string to_hex(std::span<const unsigned char> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const unsigned char b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

Digest hmac(std::span<const unsigned char> key, std::string_view message) {
  Digest out{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(),
           &length) == nullptr ||
      length != out.size()) {
    throw Error("SigV4: OpenSSL's HMAC-SHA256 failed; check the OpenSSL installation");
  }
  return out;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_space(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Trimall: leading and trailing whitespace removed, runs of it inside made one space.
std::string trim_all(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  bool pending_space = false;
  for (const char c : value) {
    if (is_space(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::span<const std::byte> bytes) {
  Digest digest{};
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), digest.data());
  return to_hex(digest);
}

std::string sha256_hex(std::string_view text) {
  return sha256_hex(std::as_bytes(std::span(text.data(), text.size())));
}

std::string sha256_file_hex(const std::string& path) {
  posix::Fd fd(posix::open_read(path.c_str()));
  if (!fd.valid()) {
    throw Error(posix::errno_message(fmt::format("SigV4: cannot open {} to hash it", path), errno));
  }
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr || EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx);
    throw Error("SigV4: OpenSSL's SHA-256 could not be set up; check the OpenSSL installation");
  }
  std::vector<unsigned char> buffer(std::size_t{1} << 20);
  for (;;) {
    const ssize_t n = posix::read_full(fd.get(), buffer.data(), buffer.size());
    if (n < 0) {
      const int err = errno;
      EVP_MD_CTX_free(ctx);
      throw Error(posix::errno_message(fmt::format("SigV4: cannot read {} to hash it", path), err));
    }
    if (n == 0) break;
    EVP_DigestUpdate(ctx, buffer.data(), static_cast<std::size_t>(n));
    if (static_cast<std::size_t>(n) < buffer.size()) break;
  }
  Digest digest{};
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx, digest.data(), &length);
  EVP_MD_CTX_free(ctx);
  return to_hex(digest);
}

std::string amz_date(std::time_t time) {
  std::tm utc{};
  gmtime_r(&time, &utc);
  return fmt::format("{:04}{:02}{:02}T{:02}{:02}{:02}Z", utc.tm_year + 1900, utc.tm_mon + 1,
                     utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec);
}

std::string canonical_query(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [name, value] : query) {
    encoded.emplace_back(uri_encode(name, false), uri_encode(value, false));
  }
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out.push_back('&');
    out += name;
    out.push_back('=');
    out += value;
  }
  return out;
}

SignedRequest sign_v4(const SigningInput& input, const AwsCredentials& credentials) {
  if (input.payload_sha256.empty()) {
    throw std::invalid_argument("SigV4: the payload hash is empty; pass its SHA-256 hex");
  }
  SignedRequest out;
  const std::string date = amz_date(input.time);
  const std::string day = date.substr(0, 8);
  out.headers.emplace_back("x-amz-date", date);
  out.headers.emplace_back("x-amz-content-sha256", input.payload_sha256);
  if (!credentials.session_token.empty()) {
    out.headers.emplace_back("x-amz-security-token", credentials.session_token);
  }

  // name -> values in order of appearance; std::map sorts the names.
  std::map<std::string, std::vector<std::string>> canonical;
  canonical["host"].push_back(trim_all(input.host));
  for (const auto& [name, value] : input.headers) {
    const std::string key = lower(trim_all(name));
    if (key == "host") continue;  // the Host header is input.host
    canonical[key].push_back(trim_all(value));
  }
  for (const auto& [name, value] : out.headers) canonical[name].push_back(value);

  std::string header_block;
  std::string signed_names;
  for (const auto& [name, values] : canonical) {
    header_block += name;
    header_block.push_back(':');
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (i > 0) header_block.push_back(',');
      header_block += values[i];
    }
    header_block.push_back('\n');
    if (!signed_names.empty()) signed_names.push_back(';');
    signed_names += name;
  }

  out.canonical_request =
      fmt::format("{}\n{}\n{}\n{}\n{}\n{}", input.method, input.path, canonical_query(input.query),
                  header_block, signed_names, input.payload_sha256);
  const std::string scope = fmt::format("{}/{}/{}/aws4_request", day, input.region, input.service);
  out.string_to_sign =
      fmt::format("AWS4-HMAC-SHA256\n{}\n{}\n{}", date, scope, sha256_hex(out.canonical_request));

  const std::string secret = "AWS4" + credentials.secret_access_key;
  const Digest k_date =
      hmac(std::span(reinterpret_cast<const unsigned char*>(secret.data()), secret.size()), day);
  const Digest k_region = hmac(k_date, input.region);
  const Digest k_service = hmac(k_region, input.service);
  const Digest k_signing = hmac(k_service, "aws4_request");
  const Digest signature = hmac(k_signing, out.string_to_sign);

  out.headers.emplace_back(
      "Authorization",
      fmt::format("AWS4-HMAC-SHA256 Credential={}/{},SignedHeaders={},Signature={}",
                  credentials.access_key_id, scope, signed_names, to_hex(signature)));
  return out;
}

}  // namespace stoker::detail::net
