// SigV4 (src/os/net/sigv4.hpp): AWS's published S3 examples, the canonical forms (query order,
// header whitespace, repeated headers), and botocore as an oracle: the same random requests
// signed by Debian's python3-botocore under /usr/bin/python3 (tests/remote/sigv4_oracle.py)
// must carry the same Authorization header.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "os/net/sigv4.hpp"
#include "os/net/url.hpp"

using namespace stoker::detail::net;

namespace {

const AwsCredentials kExample{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                              ""};
constexpr std::time_t k20130524 = 1369353600;  // 2013-05-24T00:00:00Z
constexpr const char* kEmpty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::string header(const SignedRequest& s, const std::string& name) {
  for (const auto& [n, v] : s.headers) {
    if (n == name) return v;
  }
  return {};
}

SigningInput example(std::string method, std::string path) {
  SigningInput in;
  in.method = std::move(method);
  in.host = "examplebucket.s3.amazonaws.com";
  in.path = std::move(path);
  in.payload_sha256 = kEmpty;
  in.region = "us-east-1";
  in.time = k20130524;
  return in;
}

std::string signature_of(const SignedRequest& s) {
  const std::string auth = header(s, "Authorization");
  return auth.substr(auth.rfind('=') + 1);
}

}  // namespace

TEST_CASE("SigV4 reproduces AWS's published S3 examples", "[remote][sigv4]") {
  SECTION("GET Object with a Range header") {
    SigningInput in = example("GET", "/test.txt");
    in.headers = {{"Range", "bytes=0-9"}};
    const SignedRequest s = sign_v4(in, kExample);
    CHECK(s.canonical_request ==
          "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
          "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
          "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
          "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(s.string_to_sign ==
          "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
          "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
    CHECK(header(s, "Authorization") ==
          "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
          "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
          "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    CHECK(header(s, "x-amz-date") == "20130524T000000Z");
    CHECK(header(s, "x-amz-content-sha256") == kEmpty);
  }
  SECTION("PUT Object with a payload, a Date and a storage class") {
    const std::string body = "Welcome to Amazon S3.";
    SigningInput in = example("PUT", "/" + uri_encode("test$file.text", true));
    CHECK(in.path == "/test%24file.text");
    in.payload_sha256 = sha256_hex(body);
    CHECK(in.payload_sha256 == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
    in.headers = {{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                  {"x-amz-storage-class", "REDUCED_REDUNDANCY"}};
    CHECK(signature_of(sign_v4(in, kExample)) ==
          "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
  }
  SECTION("GET Bucket lifecycle (a sub-resource without a value)") {
    SigningInput in = example("GET", "/");
    in.query = {{"lifecycle", ""}};
    const SignedRequest s = sign_v4(in, kExample);
    CHECK(s.canonical_request.find("\n/\nlifecycle=\n") != std::string::npos);
    CHECK(signature_of(s) == "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
  }
  SECTION("GET Bucket (list objects) with two parameters given out of order") {
    SigningInput in = example("GET", "/");
    in.query = {{"prefix", "J"}, {"max-keys", "2"}};
    const SignedRequest s = sign_v4(in, kExample);
    CHECK(s.canonical_request.find("\n/\nmax-keys=2&prefix=J\n") != std::string::npos);
    CHECK(signature_of(s) == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
  }
}

TEST_CASE("SigV4 canonical forms: encoded and sorted query, trimmed and joined headers",
          "[remote][sigv4]") {
  // Sorted by the encoded name, then the value; '/' '=' ' ' '+' are encoded, '~' is not.
  CHECK(
      canonical_query({{"b", "2"}, {"a", "x/y z+~"}, {"a", "1"}, {"continuation-token", "t=="}}) ==
      "a=1&a=x%2Fy%20z%2B~&b=2&continuation-token=t%3D%3D");
  // '_' sorts after upper-case letters in the encoded form.
  CHECK(canonical_query({{"a_b", ""}, {"aB", ""}}) == "aB=&a_b=");

  SigningInput in = example("GET", "/k");
  in.headers = {{"X-Amz-Meta-A", "  two   spaces\tand tab  "},
                {"x-amz-meta-a", "second"},
                {"Content-Type", "text/plain"}};
  const SignedRequest s = sign_v4(in, kExample);
  CHECK(s.canonical_request.find("content-type:text/plain\n") != std::string::npos);
  CHECK(s.canonical_request.find("x-amz-meta-a:two spaces and tab,second\n") != std::string::npos);
  CHECK(s.canonical_request.find(
            "\ncontent-type;host;x-amz-content-sha256;x-amz-date;x-amz-meta-a\n") !=
        std::string::npos);

  AwsCredentials temporary = kExample;
  temporary.session_token = "token/with+chars";
  const SignedRequest t = sign_v4(example("GET", "/k"), temporary);
  CHECK(header(t, "x-amz-security-token") == "token/with+chars");
  CHECK(t.canonical_request.find("x-amz-security-token:token/with+chars\n") != std::string::npos);
  CHECK(header(t, "Authorization").find("x-amz-date;x-amz-security-token,Signature=") !=
        std::string::npos);

  CHECK(uri_encode("a b/c~d_e.f-g%h\xc3\xa9", true) == "a%20b/c~d_e.f-g%25h%C3%A9");
  CHECK(uri_encode("a/b", false) == "a%2Fb");
  CHECK(amz_date(k20130524 + 3661) == "20130524T010101Z");
}

TEST_CASE("SigV4 matches botocore on random requests", "[remote][sigv4][botocore]") {
  const std::string oracle = STOKER_TEST_REMOTE_DIR "/sigv4_oracle.py";
  std::mt19937_64 rng(20240611);
  // Characters, some of them several UTF-8 bytes long (JSON carries them whole).
  auto chars = [](std::string_view ascii, std::vector<std::string> more = {}) {
    std::vector<std::string> out;
    for (const char c : ascii) out.emplace_back(1, c);
    for (std::string& m : more) out.push_back(std::move(m));
    return out;
  };
  auto pick = [&](const std::vector<std::string>& alphabet, std::size_t min, std::size_t max) {
    std::string out;
    const std::size_t n = std::uniform_int_distribution<std::size_t>(min, max)(rng);
    for (std::size_t i = 0; i < n; ++i) {
      out += alphabet[std::uniform_int_distribution<std::size_t>(0, alphabet.size() - 1)(rng)];
    }
    return out;
  };
  const auto key_chars = chars("abcXYZ019-_.~/ !$&'()*+,;=:@%", {"\xc3\xa9", "\xe6\x97\xa5"});
  const auto value_chars = chars("abcXYZ019-_.~/ +=&?%*", {"\xe2\x82\xac"});
  const auto name_chars = chars("abcdefghijklmnopqrstuvwxyz0123456789-");
  const auto upper_chars = chars("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789");
  const auto secret_chars = chars("abcXYZ019+/");
  const auto token_chars = chars("abcXYZ019+/=");
  const auto body_chars = chars("\x01\x7f abc");
  const auto header_chars = chars("abcXYZ019-_.~/ \t:;,=\"");
  const std::vector<std::string> methods = {"GET", "PUT", "HEAD", "POST", "DELETE"};

  std::vector<SigningInput> inputs;
  std::vector<AwsCredentials> credentials;
  std::vector<std::string> bodies;
  std::string requests;
  constexpr std::size_t kRequests = 200;
  for (std::size_t i = 0; i < kRequests; ++i) {
    SigningInput in;
    in.method = methods[rng() % methods.size()];
    in.host = pick(name_chars, 3, 20) + ".s3.amazonaws.com";
    if (rng() % 3 == 0) in.host = fmt::format("127.0.0.1:{}", 1024 + rng() % 60000);
    in.path = "/" + uri_encode(pick(key_chars, 0, 40), true);
    const std::size_t params = rng() % 5;
    for (std::size_t p = 0; p < params; ++p) {
      in.query.emplace_back(pick(value_chars, 1, 12),
                            rng() % 4 == 0 ? "" : pick(value_chars, 0, 16));
    }
    const std::size_t headers = rng() % 4;
    for (std::size_t h = 0; h < headers; ++h) {
      in.headers.emplace_back(fmt::format("x-amz-meta-h{}", h), pick(header_chars, 1, 24));
    }
    if (rng() % 2 == 0)
      in.headers.emplace_back("Range", fmt::format("bytes={}-{}", rng() % 100, 100 + rng() % 1000));
    std::string body = pick(body_chars, 0, rng() % 3 == 0 ? 200 : 0);
    body.push_back(static_cast<char>(0xff));  // any byte: the body travels as hex
    in.payload_sha256 = sha256_hex(body);
    in.region = std::vector<std::string>{"us-east-1", "eu-west-3", "ap-southeast-2"}[rng() % 3];
    in.time = static_cast<std::time_t>(1369353600 + rng() % 600000000);
    AwsCredentials c{pick(upper_chars, 16, 20), pick(secret_chars, 40, 40),
                     rng() % 3 == 0 ? pick(token_chars, 20, 60) : ""};
    nlohmann::json j;
    j["method"] = in.method;
    j["scheme"] = rng() % 2 == 0 ? "https" : "http";
    j["host"] = in.host;
    j["path"] = in.path;
    j["query"] = nlohmann::json::array();
    for (const auto& [n, v] : in.query) j["query"].push_back({n, v});
    j["headers"] = nlohmann::json::array();
    for (const auto& [n, v] : in.headers) j["headers"].push_back({n, v});
    std::string hex;
    for (const char b : body) hex += fmt::format("{:02x}", static_cast<unsigned char>(b));
    j["body_hex"] = hex;
    j["region"] = in.region;
    j["time"] = in.time;
    j["access_key"] = c.access_key_id;
    j["secret_key"] = c.secret_access_key;
    j["token"] = c.session_token;
    requests += j.dump() + "\n";
    inputs.push_back(std::move(in));
    credentials.push_back(std::move(c));
  }
  // Requests go through a file, answers through popen's pipe.
  char path[] = "/tmp/stoker-sigv4-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, requests.data(), requests.size()) == static_cast<ssize_t>(requests.size()));
  ::close(fd);
  const std::string command = fmt::format("/usr/bin/python3 {} < {}", oracle, path);
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string answers;
  char buffer[4096];
  while (const std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe))
    answers.append(buffer, n);
  const int status = ::pclose(pipe);
  ::unlink(path);
  INFO("botocore oracle: " << command << " (needs Debian's python3-botocore)");
  REQUIRE(status == 0);

  std::size_t line_start = 0;
  std::size_t compared = 0;
  for (std::size_t i = 0; i < kRequests; ++i) {
    const std::size_t eol = answers.find('\n', line_start);
    REQUIRE(eol != std::string::npos);
    const nlohmann::json a = nlohmann::json::parse(answers.substr(line_start, eol - line_start));
    line_start = eol + 1;
    const SignedRequest mine = sign_v4(inputs[i], credentials[i]);
    // botocore writes ", " between the Authorization header's parts; S3 accepts either.
    std::string theirs = a["authorization"].get<std::string>();
    for (std::size_t p; (p = theirs.find(", ")) != std::string::npos;) theirs.erase(p + 1, 1);
    INFO("request " << i << "\nours:\n"
                    << mine.canonical_request << "\nbotocore's:\n"
                    << a["canonical_request"].get<std::string>());
    CHECK(header(mine, "Authorization") == theirs);
    ++compared;
  }
  CHECK(compared == kRequests);
}
