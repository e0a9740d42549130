#include "os/net/aws_config.hpp"

#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "os/net/url.hpp"
#include "os/posix.hpp"

namespace stoker::detail::net {
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::string home_file(const char* variable, std::string_view relative) {
  if (std::string path = env(variable); !path.empty()) return path;
  const std::string home = env("HOME");
  if (home.empty()) return {};
  return fmt::format("{}/{}", home, relative);
}

IniSections read_ini(const std::string& path) {
  std::string text;
  if (path.empty() || !posix::read_file(path.c_str(), text)) return {};
  return parse_aws_ini(text);
}

const std::string* find(const IniSections& ini, const std::string& profile, const char* key) {
  const auto section = ini.find(profile);
  if (section == ini.end()) return nullptr;
  const auto value = section->second.find(key);
  if (value == section->second.end() || value->second.empty()) return nullptr;
  return &value->second;
}

// "http://host:port" of an endpoint setting; a path after it is refused (a bucket goes in the
// URL, not the endpoint).
std::string normalise_endpoint(const std::string& endpoint, std::string_view where) {
  if (endpoint.empty()) return {};
  Url url;
  try {
    url = parse_url(endpoint);
  } catch (const std::invalid_argument&) {
    url.scheme = Scheme::kLocal;
  }
  if (url.scheme != Scheme::kHttp && url.scheme != Scheme::kHttps) {
    throw std::invalid_argument(fmt::format(
        "RemoteOptions::endpoint: '{}' (from {}) is not an http:// or https:// URL; write it as "
        "http://host:port",
        endpoint, where));
  }
  if (url.path != "/" || !url.query.empty()) {
    throw std::invalid_argument(fmt::format(
        "RemoteOptions::endpoint: '{}' (from {}) has a path; an endpoint is scheme://host[:port] "
        "and the bucket goes in the s3:// URL",
        endpoint, where));
  }
  const bool v6 = url.host.find(':') != std::string::npos;
  std::string out = fmt::format("{}://{}{}{}", url.scheme == Scheme::kHttps ? "https" : "http",
                                v6 ? "[" : "", url.host, v6 ? "]" : "");
  if (url.port != 0) out += fmt::format(":{}", url.port);
  return out;
}

}  // namespace

IniSections parse_aws_ini(std::string_view text) {
  IniSections out;
  std::string section;
  std::string nested;  // "s3" while inside "s3 =" followed by indented lines
  bool in_section = false;
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    std::string_view raw = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    const bool indented = !raw.empty() && (raw.front() == ' ' || raw.front() == '\t');
    const std::string_view line = trim(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      const std::size_t close = line.find(']');
      std::string_view name = trim(
          line.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
      if (name.substr(0, 8) == "profile ") name = trim(name.substr(8));
      section = std::string(name);
      out[section];
      nested.clear();
      in_section = true;
      continue;
    }
    if (!in_section) continue;
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string key(trim(line.substr(0, eq)));
    const std::string value(trim(line.substr(eq + 1)));
    if (indented && !nested.empty()) {
      out[section][nested + "." + key] = value;
      continue;
    }
    nested.clear();
    if (value.empty()) {
      nested = key;  // a nested block follows
      continue;
    }
    out[section][key] = value;
  }
  return out;
}

S3Settings resolve_s3_settings(const RemoteOptions& options) {
  S3Settings s;
  const std::string credentials_path = home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  const std::string config_path = home_file("AWS_CONFIG_FILE", ".aws/config");
  const IniSections credentials = read_ini(credentials_path);
  const IniSections config = read_ini(config_path);

  const std::string env_profile = env("AWS_PROFILE");
  const bool explicit_profile = !options.profile.empty() || !env_profile.empty();
  s.profile = !options.profile.empty() ? options.profile
              : !env_profile.empty()   ? env_profile
                                       : std::string("default");
  if (explicit_profile && credentials.count(s.profile) == 0 && config.count(s.profile) == 0) {
    throw std::invalid_argument(fmt::format(
        "RemoteOptions::profile: the profile '{}' is in neither {} nor {}; add a [{}] section "
        "or name another profile",
        s.profile, credentials_path.empty() ? "~/.aws/credentials" : credentials_path,
        config_path.empty() ? "~/.aws/config" : config_path, s.profile));
  }

  // Credentials: the environment's, unless a profile was named in RemoteOptions; then the
  // profile's in the credentials file, then in the config file.
  if (options.profile.empty() && !env("AWS_ACCESS_KEY_ID").empty() &&
      !env("AWS_SECRET_ACCESS_KEY").empty()) {
    s.credentials.access_key_id = env("AWS_ACCESS_KEY_ID");
    s.credentials.secret_access_key = env("AWS_SECRET_ACCESS_KEY");
    s.credentials.session_token = env("AWS_SESSION_TOKEN");
    s.credentials_source = "the environment (AWS_ACCESS_KEY_ID)";
  } else {
    for (const auto& [ini, path] :
         {std::pair{&credentials, &credentials_path}, std::pair{&config, &config_path}}) {
      const std::string* id = find(*ini, s.profile, "aws_access_key_id");
      const std::string* secret = find(*ini, s.profile, "aws_secret_access_key");
      if (id == nullptr || secret == nullptr) continue;
      s.credentials.access_key_id = *id;
      s.credentials.secret_access_key = *secret;
      if (const std::string* token = find(*ini, s.profile, "aws_session_token")) {
        s.credentials.session_token = *token;
      }
      s.credentials_source = fmt::format("{} [{}]", *path, s.profile);
      break;
    }
  }
  if (options.anonymous) {
    s.credentials = {};
    s.credentials_source = "none (RemoteOptions::anonymous)";
  } else if (s.credentials.empty()) {
    s.credentials_source = "none found (unsigned requests)";
  }

  if (!options.region.empty()) {
    s.region = options.region;
  } else if (std::string r = env("AWS_REGION"); !r.empty()) {
    s.region = r;
  } else if (std::string d = env("AWS_DEFAULT_REGION"); !d.empty()) {
    s.region = d;
  } else if (const std::string* c = find(config, s.profile, "region")) {
    s.region = *c;
  } else {
    s.region = "us-east-1";
  }

  if (!options.endpoint.empty()) {
    s.endpoint = normalise_endpoint(options.endpoint, "RemoteOptions::endpoint");
  } else if (std::string e = env("AWS_ENDPOINT_URL_S3"); !e.empty()) {
    s.endpoint = normalise_endpoint(e, "AWS_ENDPOINT_URL_S3");
  } else if (std::string g = env("AWS_ENDPOINT_URL"); !g.empty()) {
    s.endpoint = normalise_endpoint(g, "AWS_ENDPOINT_URL");
  } else if (const std::string* n = find(config, s.profile, "s3.endpoint_url")) {
    s.endpoint = normalise_endpoint(*n, config_path);
  } else if (const std::string* p = find(config, s.profile, "endpoint_url")) {
    s.endpoint = normalise_endpoint(*p, config_path);
  }

  s.addressing = options.addressing;
  if (s.addressing == AddressingStyle::kDefault) {
    if (const std::string* style = find(config, s.profile, "s3.addressing_style")) {
      if (*style == "path") s.addressing = AddressingStyle::kPath;
      if (*style == "virtual") s.addressing = AddressingStyle::kVirtual;
    }
  }

  if (!options.ca_file.empty()) {
    s.ca_file = options.ca_file;
  } else if (std::string b = env("AWS_CA_BUNDLE"); !b.empty()) {
    s.ca_file = b;
  } else if (const std::string* c = find(config, s.profile, "ca_bundle")) {
    s.ca_file = *c;
  }
  return s;
}

}  // namespace stoker::detail::net
