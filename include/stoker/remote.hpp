// Shards in object storage and behind HTTP servers: the options of a remote source
// (RemoteOptions, part of ShardOptions), the error a remote read raises (RemoteError), the
// counters a dataset keeps of its downloads (RemoteStats), and upload_file(). A shard named by a
// URL is downloaded once per machine into a local cache and read from there by the same readers
// as a local file (remote_shards.hpp: list_shards(), fetch_to_cache(); docs/remote.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoker/errors.hpp"

namespace stoker {

// How an S3 request names its bucket: in the host (virtual-hosted,
// https://bucket.s3.region.amazonaws.com/key) or in the path (https://endpoint/bucket/key).
enum class AddressingStyle : std::uint8_t {
  kDefault,  // virtual-hosted on AWS's own endpoints; path-style for a custom endpoint (MinIO,
             // Ceph, a loopback server) and for bucket names that are not DNS labels
  kPath,
  kVirtual,  // the bucket must be a DNS label
};

struct RetryOptions {
  // Tries per request (each part of a download is a request): 5xx, 429, S3's SlowDown and
  // InternalError, connection resets, stalls past the low-speed timeout and bodies cut short
  // are tried again; 4xx errors are not. At least 1.
  std::size_t attempts = 6;
  // Before try k + 1 the client sleeps a random time in [0, min(max_backoff, backoff x 2^k)]
  // ("full jitter"), or what a Retry-After header asks when that is longer (at most
  // max_backoff).
  std::chrono::milliseconds backoff{100};
  std::chrono::milliseconds max_backoff{5000};
};

struct TimeoutOptions {
  std::chrono::milliseconds connect{10000};
  // A transfer that moves fewer than low_speed_bytes per second for low_speed_time is
  // abandoned and tried again from the byte it reached (a server that stalls mid-body).
  std::chrono::milliseconds low_speed_time{15000};
  std::uint64_t low_speed_bytes = 1024;
  // How long a reader waits for room in the cache (for other readers to release shards)
  // before it fails with a message saying what holds the cache and what limit would do.
  std::chrono::milliseconds cache_room{60000};
};

struct RemoteOptions {
  // The node-wide cache of downloaded shards. Empty: $STOKER_CACHE_DIR, else
  // $XDG_CACHE_HOME/stoker/remote, else $HOME/.cache/stoker/remote. Every process of every
  // rank on the machine that names the same directory shares one copy of each shard.
  std::string cache_dir;
  // Bytes the cache may hold (complete shards plus downloads in progress); shards no reader
  // holds are evicted, least recently used first, to make room. 0: no limit but the disk's.
  std::uint64_t cache_limit = 0;
  // A download is split into ranged GETs of part_size bytes, up to parts_in_flight of them at
  // once per process (over all the shards it downloads). The defaults are from a sweep of
  // bench/remote at 20 and 100 ms round trips (docs/remote.md, "Part size and parts in
  // flight"); they keep 128 MiB in flight per process.
  std::uint64_t part_size = std::uint64_t{16} << 20;
  std::size_t parts_in_flight = 8;
  // Streaming: how far ahead of the shard being read the next shards of the same stream are
  // fetched, in shards, and at most this many bytes (0: no byte bound). Bounded as well by
  // what cache_limit leaves. 0 shards: fetch each shard when it is reached.
  std::size_t read_ahead_shards = 2;
  std::uint64_t read_ahead_bytes = 0;
  RetryOptions retries;
  TimeoutOptions timeouts;
  // S3: the endpoint ("http://127.0.0.1:9000"); empty: RemoteOptions's caller's environment
  // (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url), else AWS's regional
  // endpoint. Region empty: AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else
  // us-east-1.
  std::string endpoint;
  std::string region;
  AddressingStyle addressing = AddressingStyle::kDefault;
  // The profile of ~/.aws/credentials and ~/.aws/config; empty: $AWS_PROFILE, else "default".
  std::string profile;
  // Send S3 requests unsigned (public buckets). Without it, requests are unsigned only when no
  // credentials are found.
  bool anonymous = false;
  // PEM file of certificate authorities for https; empty: $AWS_CA_BUNDLE, else the system's.
  std::string ca_file;

  // Throws std::invalid_argument naming the option: part_size < 64 KiB, parts_in_flight,
  // retries.attempts or a timeout of 0.
  void validate() const;
};

// A remote file could not be read or written. what() is "<operation> <url>: <what was wrong>
// (HTTP <status>, <attempts> attempts); <what to do>"; the fields say the same for code.
class RemoteError : public Error {
 public:
  struct Details {
    std::string url;
    long status = 0;           // the last HTTP status; 0 when no response came
    std::size_t attempts = 0;  // requests made for it, the last one included
    std::string cause;         // the last failure: the server's code and message, or curl's
    std::string server_code;   // S3's error code ("NoSuchKey", "SlowDown"); empty otherwise
    bool retryable = false;    // the last failure was of a kind that is tried again
  };
  RemoteError(std::string message, Details details)
      : Error(std::move(message)), details_(std::move(details)) {}
  const Details& details() const noexcept { return details_; }
  const std::string& url() const noexcept { return details_.url; }
  long status() const noexcept { return details_.status; }
  std::size_t attempts() const noexcept { return details_.attempts; }
  const std::string& cause() const noexcept { return details_.cause; }

 private:
  Details details_;
};

// A dataset's downloads over every process that reads it (main and workers), since it was
// built. What LoaderStats copies and diagnose() reads.
struct RemoteStats {
  std::uint64_t bytes_fetched = 0;  // body bytes received
  std::uint64_t requests = 0;       // HTTP requests sent (retries included)
  std::uint64_t retries = 0;        // of which were tries again
  std::uint64_t cache_hits = 0;     // shards found complete in the cache
  std::uint64_t cache_misses = 0;   // shards this dataset downloaded or waited for
  std::uint64_t evictions = 0;      // shards it evicted to make room
  // Time the readers spent blocked on bytes not yet downloaded (summed over processes), and
  // the downloads' own busy time (a download's start to its end, summed).
  double wait_seconds = 0;
  double download_seconds = 0;
};

// True for the names a remote source reads: s3://, http://, https://.
bool is_remote_url(std::string_view name) noexcept;

// Writes the file at `local_path` to `url`: an S3 object (one PUT, or a multipart upload of
// part_size parts above 2 x part_size), an http(s) PUT, or a file:// / local copy. Either
// process; blocks. Throws RemoteError (std::invalid_argument for a URL without a key).
void upload_file(const std::string& local_path, const std::string& url,
                 const RemoteOptions& options = {});

}  // namespace stoker
