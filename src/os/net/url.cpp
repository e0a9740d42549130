#include "os/net/url.hpp"

#include <cctype>
#include <charconv>
#include <stdexcept>

#include <fmt/format.h>

namespace stoker::detail::net {
namespace {

bool starts_with_nocase(std::string_view text, std::string_view prefix) noexcept {
  if (text.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) != prefix[i]) return false;
  }
  return true;
}

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

[[noreturn]] void bad_url(std::string_view text, std::string_view why) {
  throw std::invalid_argument(
      fmt::format("remote: cannot parse the URL '{}': {}; write s3://bucket/key, "
                  "http(s)://host[:port]/path or file:///path",
                  text, why));
}

}  // namespace

std::string_view Url::key() const noexcept {
  std::string_view p = path;
  if (!p.empty() && p.front() == '/') p.remove_prefix(1);
  return p;
}

bool is_remote(std::string_view name) noexcept {
  return starts_with_nocase(name, "s3://") || starts_with_nocase(name, "http://") ||
         starts_with_nocase(name, "https://");
}

Url parse_url(std::string_view text) {
  Url url;
  std::string_view rest;
  if (starts_with_nocase(text, "s3://")) {
    url.scheme = Scheme::kS3;
    rest = text.substr(5);
    const std::size_t slash = rest.find('/');
    url.host = std::string(rest.substr(0, slash));
    if (url.host.empty()) bad_url(text, "no bucket");
    url.path = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
    return url;
  }
  if (starts_with_nocase(text, "file://")) {
    url.scheme = Scheme::kFile;
    rest = text.substr(7);
    const std::size_t slash = rest.find('/');
    const std::string_view host = rest.substr(0, slash);
    if (!host.empty() && host != "localhost") {
      bad_url(text, "a file:// URL names a file on this machine (file:///path)");
    }
    if (slash == std::string_view::npos) bad_url(text, "no path");
    url.path = uri_decode(rest.substr(slash));
    return url;
  }
  const bool https = starts_with_nocase(text, "https://");
  if (!https && !starts_with_nocase(text, "http://")) {
    url.scheme = Scheme::kLocal;
    url.path = std::string(text);
    return url;
  }
  url.scheme = https ? Scheme::kHttps : Scheme::kHttp;
  rest = text.substr(https ? 8 : 7);
  const std::size_t end_authority = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, end_authority);
  rest = end_authority == std::string_view::npos ? std::string_view{} : rest.substr(end_authority);
  if (const std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
    bad_url(text, "user information in the URL is not supported (use credentials files)");
  }
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) bad_url(text, "unbalanced '[' in the host");
    url.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') bad_url(text, "junk after the host");
      port_text = after.substr(1);
    }
  } else {
    const std::size_t colon = authority.rfind(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (url.host.empty()) bad_url(text, "no host");
  if (!port_text.empty()) {
    unsigned value = 0;
    const auto [ptr, ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
    if (ec != std::errc() || ptr != port_text.data() + port_text.size() || value == 0 ||
        value > 65535) {
      bad_url(text, fmt::format("bad port '{}'", port_text));
    }
    url.port = static_cast<std::uint16_t>(value);
  }
  if (const std::size_t hash = rest.find('#'); hash != std::string_view::npos) {
    rest = rest.substr(0, hash);
  }
  const std::size_t question = rest.find('?');
  url.path = std::string(rest.substr(0, question));
  if (url.path.empty()) url.path.assign(1, '/');  // (assign: GCC 12 -Wrestrict false positive)
  if (question != std::string_view::npos) url.query = std::string(rest.substr(question + 1));
  return url;
}

std::string uri_encode(std::string_view text, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0 || c == '-' || c == '.' || c == '_' || c == '~' ||
        (keep_slash && c == '/')) {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    }
  }
  return out;
}

std::string uri_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      const int hi = hex_value(text[i + 1]);
      const int lo = hex_value(text[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> parse_query(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    out.emplace_back(uri_decode(item.substr(0, eq)), eq == std::string_view::npos
                                                         ? std::string()
                                                         : uri_decode(item.substr(eq + 1)));
  }
  return out;
}

std::string append_to_name(std::string_view name, std::string_view suffix) {
  if (is_remote(name)) {
    if (const std::size_t q = name.find('?'); q != std::string_view::npos) {
      return fmt::format("{}{}{}", name.substr(0, q), suffix, name.substr(q));
    }
  }
  return fmt::format("{}{}", name, suffix);
}

std::string join_name(std::string_view name, std::string_view leaf) {
  std::string_view query;
  if (is_remote(name)) {
    if (const std::size_t q = name.find('?'); q != std::string_view::npos) {
      query = name.substr(q);
      name = name.substr(0, q);
    }
  }
  while (name.size() > 1 && name.back() == '/') name.remove_suffix(1);
  return fmt::format("{}/{}{}", name, leaf, query);
}

}  // namespace stoker::detail::net
