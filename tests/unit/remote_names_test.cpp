// The pure parts of remote access: URL parsing (src/os/net/url.hpp), the AWS ini files and the
// order in which settings are found (aws_config.hpp), S3's XML answers (s3_xml.hpp), the
// sorting of failures and the backoff (object_store.hpp), and RemoteOptions::validate().
#include <sys/stat.h>

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>

#include "os/net/aws_config.hpp"
#include "os/net/http_client.hpp"
#include "os/net/object_store.hpp"
#include "os/net/s3_xml.hpp"
#include "os/net/url.hpp"
#include "stoker/errors.hpp"
#include "stoker/remote.hpp"
#include "support/env.hpp"
#include "support/error_message.hpp"
#include "support/files.hpp"

using namespace stoker;
using namespace stoker::detail::net;
using stoker::test::Env;

namespace {

// Every variable resolve_s3_settings reads, cleared; HOME pointed at an empty directory.
Env clean_aws_env(const std::string& home) {
  Env env;
  for (const char* name :
       {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
        "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
        "AWS_CA_BUNDLE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"}) {
    env.unset(name);
  }
  env.set("HOME", home);
  return env;
}

}  // namespace

TEST_CASE("URLs: s3, http(s), file and plain paths", "[remote][url]") {
  const Url s3 = parse_url("s3://my-bucket/train/shard-000.tar");
  CHECK(s3.scheme == Scheme::kS3);
  CHECK(s3.host == "my-bucket");
  CHECK(s3.key() == "train/shard-000.tar");
  CHECK(parse_url("S3://b").key().empty());

  const Url h = parse_url("https://[::1]:8443/a%20b/c.tar?x=1#frag");
  CHECK(h.scheme == Scheme::kHttps);
  CHECK(h.host == "::1");
  CHECK(h.port == 8443);
  CHECK(h.path == "/a%20b/c.tar");
  CHECK(h.query == "x=1");
  CHECK(parse_url("http://host").path == "/");

  CHECK(parse_url("file:///data/a%20b.tar").path == "/data/a b.tar");
  CHECK(parse_url("file://localhost/x").path == "/x");
  CHECK(parse_url("data/train.tar").scheme == Scheme::kLocal);
  CHECK(parse_url("pipe:cat x").scheme == Scheme::kLocal);

  CHECK(is_remote("s3://b/k"));
  CHECK(is_remote("HTTP://h/x"));
  CHECK_FALSE(is_remote("file:///x"));
  CHECK_FALSE(is_remote("/s3://x"));

  CHECK(test::message_of<std::invalid_argument>([] { parse_url("s3:///key"); }) ==
        "remote: cannot parse the URL 's3:///key': no bucket; write s3://bucket/key, "
        "http(s)://host[:port]/path or file:///path");
  CHECK(test::message_of<std::invalid_argument>([] {
          parse_url("http://h:99999/x");
        }).find("bad port '99999'") != std::string::npos);
  CHECK(test::message_of<std::invalid_argument>([] {
          parse_url("file://elsewhere/x");
        }).find("names a file on this machine") != std::string::npos);

  CHECK(append_to_name("s3://b/x.tar", ".idx") == "s3://b/x.tar.idx");
  CHECK(append_to_name("https://h/x.tar?sig=1", ".idx") == "https://h/x.tar.idx?sig=1");
  CHECK(join_name("s3://b/ds/", "index.json") == "s3://b/ds/index.json");
  CHECK(join_name("/local/ds", "index.json") == "/local/ds/index.json");
  CHECK(parse_query("a=1&b&c=%2F") ==
        std::vector<std::pair<std::string, std::string>>{{"a", "1"}, {"b", ""}, {"c", "/"}});
}

TEST_CASE("AWS ini files: profiles, comments and the nested s3 block", "[remote][config]") {
  const IniSections ini = parse_aws_ini(
      "# comment\n[default]\nregion = eu-west-1\n\n[profile dev]\n; other comment\n"
      "aws_access_key_id=AKID\n  aws_secret_access_key = SECRET  \ns3 =\n"
      "  endpoint_url = http://127.0.0.1:9000\n  addressing_style = path\nregion=us-west-2\n");
  CHECK(ini.at("default").at("region") == "eu-west-1");
  CHECK(ini.at("dev").at("aws_access_key_id") == "AKID");
  CHECK(ini.at("dev").at("aws_secret_access_key") == "SECRET");
  CHECK(ini.at("dev").at("s3.endpoint_url") == "http://127.0.0.1:9000");
  CHECK(ini.at("dev").at("s3.addressing_style") == "path");
  CHECK(ini.at("dev").at("region") == "us-west-2");
}

TEST_CASE("S3 settings are found as the AWS tools find them", "[remote][config]") {
  test::TempDir home("aws-home");
  Env env = clean_aws_env(home.path);
  ::mkdir((home.path + "/.aws").c_str(), 0700);
  test::write_file(home.path + "/.aws/credentials",
                   "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = FILESECRET\n"
                   "[prod]\naws_access_key_id = PRODKEY\naws_secret_access_key = PRODSECRET\n"
                   "aws_session_token = PRODTOKEN\n");
  test::write_file(home.path + "/.aws/config",
                   "[default]\nregion = eu-central-1\n[profile prod]\nregion = ap-south-1\n"
                   "s3 =\n  endpoint_url = http://127.0.0.1:4568\n  addressing_style = virtual\n");

  SECTION("the default profile of the files") {
    const S3Settings s = resolve_s3_settings({});
    CHECK(s.credentials.access_key_id == "FILEKEY");
    CHECK(s.credentials_source == home.path + "/.aws/credentials [default]");
    CHECK(s.region == "eu-central-1");
    CHECK(s.endpoint.empty());
  }
  SECTION("the environment's keys come before the files'; AWS_REGION before the profile's") {
    env.set("AWS_ACCESS_KEY_ID", "ENVKEY").set("AWS_SECRET_ACCESS_KEY", "ENVSECRET");
    env.set("AWS_SESSION_TOKEN", "ENVTOKEN").set("AWS_REGION", "sa-east-1");
    env.set("AWS_ENDPOINT_URL", "http://localhost:1234/");
    const S3Settings s = resolve_s3_settings({});
    CHECK(s.credentials.access_key_id == "ENVKEY");
    CHECK(s.credentials.session_token == "ENVTOKEN");
    CHECK(s.region == "sa-east-1");
    CHECK(s.endpoint == "http://localhost:1234");
    env.set("AWS_ENDPOINT_URL_S3", "https://s3.example:9000");
    CHECK(resolve_s3_settings({}).endpoint == "https://s3.example:9000");
  }
  SECTION("AWS_PROFILE picks the profile, its token and its nested s3 settings") {
    env.set("AWS_PROFILE", "prod");
    const S3Settings s = resolve_s3_settings({});
    CHECK(s.profile == "prod");
    CHECK(s.credentials.access_key_id == "PRODKEY");
    CHECK(s.credentials.session_token == "PRODTOKEN");
    CHECK(s.region == "ap-south-1");
    CHECK(s.endpoint == "http://127.0.0.1:4568");
    CHECK(s.addressing == AddressingStyle::kVirtual);
  }
  SECTION("RemoteOptions override everything; anonymous drops the credentials") {
    RemoteOptions o;
    o.region = "us-west-1";
    o.endpoint = "http://127.0.0.1:1";
    o.addressing = AddressingStyle::kPath;
    o.anonymous = true;
    const S3Settings s = resolve_s3_settings(o);
    CHECK(s.credentials.empty());
    CHECK(s.credentials_source == "none (RemoteOptions::anonymous)");
    CHECK(s.region == "us-west-1");
    CHECK(s.addressing == AddressingStyle::kPath);
  }
  SECTION("no credentials anywhere: unsigned, region us-east-1") {
    env.set("AWS_SHARED_CREDENTIALS_FILE", home.path + "/none")
        .set("AWS_CONFIG_FILE", home.path + "/none");
    const S3Settings s = resolve_s3_settings({});
    CHECK(s.credentials.empty());
    CHECK(s.credentials_source == "none found (unsigned requests)");
    CHECK(s.region == "us-east-1");
  }
  SECTION("an unknown profile and a bad endpoint are named") {
    env.set("AWS_PROFILE", "nosuch");
    CHECK(test::message_of<std::invalid_argument>([] {
            resolve_s3_settings({});
          }).find("RemoteOptions::profile: the profile 'nosuch' is in neither") == 0);
    env.unset("AWS_PROFILE");
    RemoteOptions o;
    o.endpoint = "http://host:1/bucket";
    CHECK(test::message_of<std::invalid_argument>([&] { resolve_s3_settings(o); }) ==
          "RemoteOptions::endpoint: 'http://host:1/bucket' (from RemoteOptions::endpoint) has a "
          "path; an endpoint is scheme://host[:port] and the bucket goes in the s3:// URL");
  }
}

TEST_CASE("S3 requests: path-style and virtual-hosted addressing, signed or not",
          "[remote][config]") {
  test::TempDir home("aws-home");
  Env env = clean_aws_env(home.path);
  env.set("AWS_ACCESS_KEY_ID", "K")
      .set("AWS_SECRET_ACCESS_KEY", "S")
      .set("AWS_REGION", "eu-west-3");
  RemoteOptions o;
  {
    ObjectStore aws(o);
    const HttpRequest r = aws.make_request("s3://my-bucket/a b/c.tar", "GET");
    CHECK(r.url == "https://my-bucket.s3.eu-west-3.amazonaws.com/a%20b/c.tar");
    bool signed_request = false;
    for (const auto& [n, v] : r.headers) {
      if (n == "Authorization")
        signed_request = v.find("/eu-west-3/s3/aws4_request") != std::string::npos;
    }
    CHECK(signed_request);
    // Not a DNS label: path-style even on AWS.
    CHECK(aws.make_request("s3://My.Bucket/k", "GET").url ==
          "https://s3.eu-west-3.amazonaws.com/My.Bucket/k");
  }
  o.endpoint = "http://127.0.0.1:4568";
  {
    ObjectStore custom(o);
    CHECK(custom.make_request("s3://b-1/k", "GET", {{"list-type", "2"}, {"prefix", "a/"}}).url ==
          "http://127.0.0.1:4568/b-1/k?list-type=2&prefix=a%2F");
    CHECK(custom.make_request("s3://b-1", "GET").url == "http://127.0.0.1:4568/b-1");
  }
  o.endpoint = "http://s3.localhost:4568";
  o.addressing = AddressingStyle::kVirtual;
  o.anonymous = true;
  {
    ObjectStore vhost(o);
    const HttpRequest r = vhost.make_request("s3://b-1/k", "GET");
    CHECK(r.url == "http://b-1.s3.localhost:4568/k");
    CHECK(r.headers.empty());  // anonymous: nothing signed
  }
}

TEST_CASE("S3 XML: list pages, error documents, upload ids", "[remote][xml]") {
  const ListPage page = parse_list_page(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"
      "<Prefix>train/</Prefix><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>"
      "<NextContinuationToken>tok/en==</NextContinuationToken>"
      "<Contents><Key>train/a&amp;b.tar</Key><Size>1024</Size><ETag>&quot;abc&quot;</ETag></"
      "Contents>"
      "<Contents><Key>train/c.tar</Key><Size>0</Size></Contents></ListBucketResult>");
  REQUIRE(page.objects.size() == 2);
  CHECK(page.objects[0].key == "train/a&b.tar");
  CHECK(page.objects[0].size == 1024);
  CHECK(page.objects[0].etag == "abc");
  CHECK(page.truncated);
  CHECK(page.next_token == "tok/en==");

  CHECK(test::message_of<Error>([] {
          parse_list_page("<Other/>");
        }).find("its root is <Other>, not <ListBucketResult>") != std::string::npos);
  CHECK(test::message_of<Error>([] {
          parse_list_page("<ListBucketResult><Contents>");
        }).find("S3: the ListObjectsV2 answer is malformed: ") == 0);
  CHECK(test::message_of<Error>([] {
          parse_list_page(
              "<ListBucketResult><Contents><ETag>x</ETag></Contents></ListBucketResult>");
        }).find("a <Contents> has no <Key>") != std::string::npos);
  CHECK(test::message_of<Error>([] {
          parse_list_page(
              "<ListBucketResult><Contents><Key>k</Key><Size>12x</Size></Contents></"
              "ListBucketResult>");
        }).find("the <Size> '12x' is not a number") != std::string::npos);
  CHECK(test::message_of<Error>([] {
          parse_list_page("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>");
        }).find("IsTruncated is true without a NextContinuationToken") != std::string::npos);

  const auto error = parse_error_body(
      "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>The specified key does not "
      "exist.</Message><Key>x</Key></Error>");
  REQUIRE(error);
  CHECK(error->code == "NoSuchKey");
  CHECK(error->message == "The specified key does not exist.");
  CHECK_FALSE(parse_error_body("<html><title>503</title></html>"));
  CHECK_FALSE(parse_error_body(""));
  CHECK_FALSE(parse_error_body("<Error><Code>"));
  CHECK(parse_upload_id("<InitiateMultipartUploadResult><UploadId>u-1</UploadId>"
                        "</InitiateMultipartUploadResult>") == "u-1");
}

TEST_CASE("Failures are sorted by what to do next, and the backoff is jittered and bounded",
          "[remote][retry]") {
  HttpResponse r;
  r.status = 503;
  r.error_body =
      "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
  Failure f = classify(r);
  CHECK(f.kind == Failure::Kind::kRetry);
  CHECK(f.cause == "HTTP 503 SlowDown: Please reduce your request rate.");
  r.status = 400;
  r.error_body =
      "<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>";
  CHECK(classify(r).kind == Failure::Kind::kExpiredCredentials);
  r.error_body = "<Error><Code>RequestTimeout</Code><Message>m</Message></Error>";
  CHECK(classify(r).kind == Failure::Kind::kRetry);
  r.status = 404;
  r.error_body = "<html><head><title>404 Not Found</title></head></html>";
  f = classify(r);
  CHECK(f.kind == Failure::Kind::kFatal);
  CHECK(f.cause == "HTTP 404: 404 Not Found");
  r.status = 502;
  r.error_body.clear();
  CHECK(classify(r).cause == "HTTP 502 Bad Gateway");
  r.status = 429;
  r.headers = {{"retry-after", "3"}};
  f = classify(r);
  CHECK(f.kind == Failure::Kind::kRetry);
  CHECK(f.retry_after == std::chrono::seconds(3));
  HttpResponse reset;
  reset.curl_code = 56;  // CURLE_RECV_ERROR
  reset.curl_message = "Recv failure: Connection reset by peer";
  CHECK(classify(reset).kind == Failure::Kind::kRetry);
  CHECK(classify(reset).cause ==
        "the connection was reset while receiving (curl: Recv failure: Connection reset by peer)");

  RetryOptions retry;
  retry.backoff = std::chrono::milliseconds(100);
  retry.max_backoff = std::chrono::milliseconds(1000);
  std::chrono::milliseconds largest{0};
  bool varied = false;
  for (int i = 0; i < 200; ++i) {
    const auto d1 = backoff_delay(retry, 1, {});
    const auto d5 = backoff_delay(retry, 5, {});
    CHECK(d1.count() <= 100);
    CHECK(d5.count() <= 1000);
    largest = std::max(largest, d5);
    varied = varied || d1 != backoff_delay(retry, 1, {});
  }
  CHECK(largest.count() > 500);  // 5th try: up to min(1000, 1600) ms
  CHECK(varied);                 // jitter
  CHECK(backoff_delay(retry, 1, std::chrono::seconds(30)) == std::chrono::milliseconds(1000));
}

TEST_CASE("RemoteOptions::validate names the option", "[remote][options]") {
  RemoteOptions o;
  o.part_size = 1000;
  CHECK(test::message_of<std::invalid_argument>([&] {
          o.validate();
        }).find("RemoteOptions::part_size: 1000 bytes is below the smallest part, 64 KiB") == 0);
  o = {};
  o.parts_in_flight = 0;
  CHECK(test::message_of<std::invalid_argument>([&] {
          o.validate();
        }).find("RemoteOptions::parts_in_flight") == 0);
  o = {};
  o.retries.attempts = 0;
  CHECK(test::message_of<std::invalid_argument>([&] {
          o.validate();
        }).find("RemoteOptions::retries.attempts") == 0);
  o = {};
  o.timeouts.low_speed_time = std::chrono::milliseconds(0);
  CHECK(test::message_of<std::invalid_argument>([&] {
          o.validate();
        }).find("RemoteOptions::timeouts") == 0);
}
