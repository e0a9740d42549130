#include "os/net/s3_xml.hpp"

#include <expat.h>

#include <charconv>
#include <functional>

#include <fmt/format.h>

#include "stoker/errors.hpp"

namespace stoker::detail::net {
namespace {

constexpr std::size_t kMaxDepth = 16;
constexpr std::size_t kMaxText = 64 * 1024;  // of one element's text (keys are <= 1 KiB)

// Walks a document: `on_end(path, text)` at each element's end, path from the root ("root",
// "Contents", "Key"); namespaces are dropped from names. Returns an empty string when the
// document parsed, else what was wrong.
class Walker {
 public:
  using OnEnd = std::function<void(const std::vector<std::string>& path, const std::string& text)>;

  explicit Walker(OnEnd on_end) : on_end_(std::move(on_end)) {}

  std::string parse(std::string_view xml) {
    XML_Parser parser = XML_ParserCreate("UTF-8");
    if (parser == nullptr) return "expat could not allocate a parser";
    XML_SetUserData(parser, this);
    XML_SetElementHandler(parser, &Walker::start, &Walker::end);
    XML_SetCharacterDataHandler(parser, &Walker::text);
    std::string error;
    if (XML_Parse(parser, xml.data(), static_cast<int>(std::min<std::size_t>(xml.size(), 1 << 30)),
                  XML_TRUE) == XML_STATUS_ERROR) {
      error = fmt::format("{} at line {}, column {}", XML_ErrorString(XML_GetErrorCode(parser)),
                          XML_GetCurrentLineNumber(parser), XML_GetCurrentColumnNumber(parser));
    } else if (!error_.empty()) {
      error = error_;
    }
    XML_ParserFree(parser);
    return error;
  }

 private:
  static std::string local_name(const char* name) {
    std::string_view n(name);
    if (const std::size_t colon = n.rfind(':'); colon != std::string_view::npos) {
      n = n.substr(colon + 1);
    }
    return std::string(n);
  }
  static void start(void* user, const XML_Char* name, const XML_Char**) {
    auto* self = static_cast<Walker*>(user);
    if (self->path_.size() >= kMaxDepth) {
      if (self->error_.empty()) self->error_ = fmt::format("nested deeper than {}", kMaxDepth);
      ++self->ignored_;
      return;
    }
    self->path_.push_back(local_name(name));
    self->texts_.emplace_back();
  }
  static void end(void* user, const XML_Char*) {
    auto* self = static_cast<Walker*>(user);
    if (self->ignored_ > 0) {
      --self->ignored_;
      return;
    }
    self->on_end_(self->path_, self->texts_.back());
    self->path_.pop_back();
    self->texts_.pop_back();
  }
  static void text(void* user, const XML_Char* s, int length) {
    auto* self = static_cast<Walker*>(user);
    if (self->ignored_ > 0 || self->texts_.empty() || length <= 0) return;
    std::string& t = self->texts_.back();
    t.append(s, std::min<std::size_t>(static_cast<std::size_t>(length),
                                      kMaxText - std::min(kMaxText, t.size())));
  }

  OnEnd on_end_;
  std::vector<std::string> path_;
  std::vector<std::string> texts_;
  std::size_t ignored_ = 0;
  std::string error_;
};

std::string strip_quotes(std::string s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') return s.substr(1, s.size() - 2);
  // &quot; is decoded by expat already.
  return s;
}

[[noreturn]] void malformed(std::string_view what, std::string_view why) {
  throw Error(
      fmt::format("S3: the {} is malformed: {}; the server is not speaking S3's API, or "
                  "a proxy changed its answer",
                  what, why));
}

}  // namespace

ListPage parse_list_page(std::string_view xml) {
  ListPage page;
  bool root_seen = false;
  std::string root_name;
  std::string problem;
  ListedObject current;
  bool have_key = false;
  Walker walker([&](const std::vector<std::string>& path, const std::string& text) {
    if (path.size() == 1) {
      root_seen = true;
      root_name = path[0];
      return;
    }
    if (path[0] != "ListBucketResult") return;
    if (path.size() == 2) {
      if (path[1] == "IsTruncated") page.truncated = text == "true";
      if (path[1] == "NextContinuationToken") page.next_token = text;
      if (path[1] == "Contents") {
        if (!have_key && problem.empty()) problem = "a <Contents> has no <Key>";
        if (have_key) page.objects.push_back(std::move(current));
        current = ListedObject{};
        have_key = false;
      }
      return;
    }
    if (path.size() == 3 && path[1] == "Contents") {
      if (path[2] == "Key") {
        current.key = text;
        have_key = true;
      } else if (path[2] == "Size") {
        const auto [ptr, ec] =
            std::from_chars(text.data(), text.data() + text.size(), current.size);
        if ((ec != std::errc() || ptr != text.data() + text.size()) && problem.empty()) {
          problem = fmt::format("the <Size> '{}' is not a number", text.substr(0, 40));
        }
      } else if (path[2] == "ETag") {
        current.etag = strip_quotes(text);
      }
    }
  });
  if (const std::string error = walker.parse(xml); !error.empty()) {
    malformed("ListObjectsV2 answer", error);
  }
  if (!root_seen || root_name != "ListBucketResult") {
    malformed("ListObjectsV2 answer",
              root_seen ? fmt::format("its root is <{}>, not <ListBucketResult>", root_name)
                        : std::string("it has no root element"));
  }
  if (!problem.empty()) malformed("ListObjectsV2 answer", problem);
  if (page.truncated && page.next_token.empty()) {
    malformed("ListObjectsV2 answer", "IsTruncated is true without a NextContinuationToken");
  }
  return page;
}

std::optional<S3ErrorBody> parse_error_body(std::string_view xml) noexcept {
  try {
    S3ErrorBody body;
    bool is_error = false;
    Walker walker([&](const std::vector<std::string>& path, const std::string& text) {
      if (path.size() == 1) is_error = path[0] == "Error";
      if (path.size() == 2 && path[0] == "Error") {
        if (path[1] == "Code") body.code = text;
        if (path[1] == "Message") body.message = text;
      }
    });
    if (xml.find('<') == std::string_view::npos) return std::nullopt;
    if (!walker.parse(xml).empty() || !is_error || body.code.empty()) return std::nullopt;
    return body;
  } catch (...) {
    return std::nullopt;
  }
}

std::string parse_upload_id(std::string_view xml) {
  std::string id;
  Walker walker([&](const std::vector<std::string>& path, const std::string& text) {
    if (path.size() == 2 && path[0] == "InitiateMultipartUploadResult" && path[1] == "UploadId") {
      id = text;
    }
  });
  if (const std::string error = walker.parse(xml); !error.empty()) {
    malformed("CreateMultipartUpload answer", error);
  }
  if (id.empty()) malformed("CreateMultipartUpload answer", "it has no <UploadId>");
  return id;
}

}  // namespace stoker::detail::net
