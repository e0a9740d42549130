#include "datasets/remote/shard_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "data/format.hpp"
#include "os/net/url.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kPart = ".stoker-part";
constexpr std::string_view kLock = ".stoker-lock";
constexpr std::string_view kMeta = ".stoker-meta";
constexpr std::string_view kMetaMagic = "stoker-cache 1\n";
constexpr std::size_t kHeaderBytes = 4096;
// Parts in flight for a shard a reader waits for until its first part is in (pump): two keep
// the link busy across one part's end while the head gets half of it.
constexpr std::size_t kHeadParts = 2;
constexpr int kFollowPollMs = 100;  // a follower checks its downloader is alive this often

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// One path component from any text: bytes outside [A-Za-z0-9._-] (and a leading '.') as %XX;
// long names end in a hash of the whole, so different names stay different.
std::string component(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '_' || (c == '.' && i > 0);
    if (plain) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  if (out.empty()) out = "%";
  if (out.size() > 180) {
    out = out.substr(0, 120) + "~" + net::sha256_hex(text).substr(0, 32);
  }
  return out;
}

void bump(EntryHeader* h) noexcept {
  h->seq.fetch_add(1, std::memory_order_release);
  if (h->waiters.load(std::memory_order_acquire) > 0) {
    (void)posix::futex_wake_all(h->seq);
  }
}

// LOCK_EX on the lock file the path names now (INV-CACHE-1); an invalid Fd when another
// process holds it. `create` makes the file when missing.
posix::Fd lock_entry(const std::string& lock_path, bool wait) {
  for (int tries = 0; tries < 100; ++tries) {
    posix::Fd fd(posix::open_file(lock_path.c_str(), O_RDWR | O_CREAT, 0644));
    if (!fd.valid()) return fd;
    if (posix::lock_file(fd.get(), LOCK_EX | (wait ? 0 : LOCK_NB)) != 0) return posix::Fd();
    struct ::stat by_fd {};
    struct ::stat by_path {};
    if (posix::stat_fd(fd.get(), by_fd) && posix::stat_path(lock_path.c_str(), by_path) &&
        by_fd.st_ino == by_path.st_ino && by_fd.st_dev == by_path.st_dev) {
      return fd;
    }
    // Unlinked (an eviction) between open and lock: lock the new file instead.
  }
  return posix::Fd();
}

std::string read_small(const std::string& path) {
  std::string text;
  if (!posix::read_file(path.c_str(), text)) return {};
  return text;
}

std::string meta_value(std::string_view meta, std::string_view key) {
  const std::string needle = fmt::format("\n{} ", key);
  const std::size_t at = meta.find(needle);
  if (at == std::string_view::npos) return {};
  const std::size_t start = at + needle.size();
  const std::size_t end = meta.find('\n', start);
  return std::string(
      meta.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
}

// Writes `text` to `path` whole (through a temporary and rename()).
bool write_whole(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  posix::Fd fd(posix::create_file(temporary.c_str(), false));
  if (!fd.valid()) return false;
  if (posix::write_all(fd.get(), text.data(), text.size()) != 0) return false;
  fd.reset();
  return posix::rename_file(temporary.c_str(), path.c_str()) == 0;
}

}  // namespace

RemoteStats RemoteCounters::snapshot() const noexcept {
  RemoteStats s;
  s.bytes_fetched = transfers.bytes.load(std::memory_order_relaxed);
  s.requests = transfers.requests.load(std::memory_order_relaxed);
  s.retries = transfers.retries.load(std::memory_order_relaxed);
  s.cache_hits = cache_hits.load(std::memory_order_relaxed);
  s.cache_misses = cache_misses.load(std::memory_order_relaxed);
  s.evictions = evictions.load(std::memory_order_relaxed);
  s.wait_seconds = static_cast<double>(wait_ns.load(std::memory_order_relaxed)) * 1e-9;
  s.download_seconds = static_cast<double>(download_ns.load(std::memory_order_relaxed)) * 1e-9;
  return s;
}

EntryHeader* map_entry_header(int lock_fd) noexcept {
  if (posix::file_size(lock_fd) < static_cast<off_t>(kHeaderBytes) &&
      posix::truncate_fd(lock_fd, kHeaderBytes) != 0) {
    return nullptr;
  }
  void* p = posix::map_shared(lock_fd, kHeaderBytes);
  return p == MAP_FAILED ? nullptr : static_cast<EntryHeader*>(p);
}

EntryHeader* map_entry_header_at(const std::string& lock_path) noexcept {
  posix::Fd fd(posix::open_file(lock_path.c_str(), O_RDWR));
  return fd.valid() ? map_entry_header(fd.get()) : nullptr;
}

void unmap_entry_header(EntryHeader* header) noexcept {
  if (header != nullptr) posix::unmap(header, kHeaderBytes);
}

// ---------------------------------------------------------------------------------------------
// A download in this process.

struct Download {
  RemoteFile file;
  std::string path;  // the entry
  std::uint64_t size = 0;
  RemoteCounters* counters = nullptr;
  Need need = Need::kNow;
  posix::Fd part_fd;  // read-write
  posix::Fd lock_fd;  // LOCK_EX (INV-CACHE-1)
  EntryHeader* header = nullptr;
  std::uint64_t started_ns = 0;

  struct Part {
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
    std::uint64_t received = 0;  // the client's thread only
    std::uint64_t fetch = 0;     // its ObjectStore fetch, while running
    enum State : std::uint8_t { kWaiting, kRunning, kDone } state = kWaiting;
  };
  std::vector<Part> parts;     // state and fetch under ShardCache::mutex_
  std::size_t waiting = 0;     // parts not started yet (under the mutex)
  std::size_t first_open = 0;  // the first part not yet full (the client's thread)
  std::size_t running = 0;
  // The header's want_seq when check_wants() last looked (the client's thread).
  std::uint32_t seen_want_seq = 0;
  bool failed = false;
  bool finished = false;
  std::exception_ptr error;

  ~Download() { unmap_entry_header(header); }

  // The client's thread: bytes of part p arrived at `offset`.
  bool write(std::size_t p, std::uint64_t offset, std::span<const std::byte> bytes,
             std::string& why) {
    if (posix::pwrite_all(part_fd.get(), bytes.data(), bytes.size(), static_cast<off_t>(offset)) !=
        0) {
      why = posix::errno_message(fmt::format("cannot write {}{}", path, kPart), errno);
      return false;
    }
    parts[p].received += bytes.size();
    if (p < EntryHeader::kTrackedParts) {
      header->received[p].store(parts[p].received, std::memory_order_release);  // INV-CACHE-3
    }
    if (p == first_open) {
      while (first_open < parts.size() &&
             parts[first_open].received == parts[first_open].end - parts[first_open].begin) {
        ++first_open;
      }
      const std::uint64_t done =
          first_open < parts.size() ? parts[first_open].begin + parts[first_open].received : size;
      header->contiguous.store(done, std::memory_order_release);  // INV-CACHE-3
    }
    bump(header);
    return true;
  }
};

struct ShardCache::Scan {
  struct Complete {
    std::string path;
    std::uint64_t bytes = 0;
    std::int64_t used_ns = 0;  // last use: the entry's mtime (a hit touches it)
  };
  std::vector<Complete> complete;  // entries with a meta file
  std::uint64_t complete_bytes = 0;
  std::uint64_t downloading_bytes = 0;  // the sizes of downloads in progress
  std::size_t downloading = 0;
};

ShardCache::ShardCache(RemoteOptions options, std::string dir)
    : options_(std::move(options)),
      dir_(std::move(dir)),
      store_(std::make_shared<net::ObjectStore>(options_)) {}

ShardCache::~ShardCache() = default;

std::string ShardCache::resolve_dir(const RemoteOptions& options) {
  if (!options.cache_dir.empty()) return options.cache_dir;
  if (std::string d = env("STOKER_CACHE_DIR"); !d.empty()) return d;
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) return x + "/stoker/remote";
  if (std::string h = env("HOME"); !h.empty()) return h + "/.cache/stoker/remote";
  return "/tmp/stoker-remote-cache";
}

std::shared_ptr<ShardCache> ShardCache::process(const RemoteOptions& options) {
  options.validate();
  const std::string dir = resolve_dir(options);
  // One per (process, directory, store settings): the store's options are part of the key.
  const std::string key = fmt::format(
      "{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", dir, options.endpoint, options.region,
      static_cast<int>(options.addressing), options.profile, options.anonymous, options.ca_file,
      options.retries.attempts, options.retries.backoff.count(),
      options.retries.max_backoff.count(), options.timeouts.connect.count(),
      options.timeouts.low_speed_time.count(), options.parts_in_flight, options.part_size);
  static std::mutex mutex;
  static pid_t owner = 0;
  static auto* caches = new std::map<std::string, std::shared_ptr<ShardCache>>();
  std::lock_guard lock(mutex);
  if (owner != posix::self_pid()) {
    // A fork()ed child: the parent's caches (their downloads) are the parent's. Keep them
    // reachable, unused.
    static auto* inherited = new std::vector<std::shared_ptr<ShardCache>>();
    for (auto& [k, c] : *caches) inherited->push_back(c);
    caches->clear();
    owner = posix::self_pid();
  }
  auto& slot = (*caches)[key];
  if (slot == nullptr) {
    if (posix::make_directories(dir.c_str()) != 0) {
      throw Error(posix::errno_message(
          fmt::format("remote cache: cannot make the directory {}; set RemoteOptions::cache_dir "
                      "(or STOKER_CACHE_DIR) to a writable one",
                      dir),
          errno));
    }
    slot = std::make_shared<ShardCache>(options, dir);
    // A reader (of any process) that publishes an offset it waits for changes which parts
    // start next: the client's watch looks every few milliseconds while transfers run, also
    // before a download's first bytes come, and pumps (which a sink may not: it starts
    // transfers).
    net::ObjectStore::watch([weak = std::weak_ptr<ShardCache>(slot)] {
      if (auto cache = weak.lock()) cache->check_wants();
    });
  }
  return slot;
}

std::string ShardCache::entry_path(const std::string& url) const {
  const net::Url u = net::parse_url(url);
  const char* scheme = u.scheme == net::Scheme::kS3      ? "s3"
                       : u.scheme == net::Scheme::kHttps ? "https"
                                                         : "http";
  std::string host = u.host;
  if (u.port != 0) host += fmt::format("_{}", u.port);
  std::string name(u.scheme == net::Scheme::kS3 ? u.key() : std::string_view(u.path).substr(1));
  if (!u.query.empty()) name += "?" + u.query;
  return fmt::format("{}/{}/{}/{}", dir_, scheme, component(host), component(name));
}

// ---------------------------------------------------------------------------------------------
// Scanning and making room

ShardCache::Scan ShardCache::scan(bool clean_stale, const std::string& own_lock) const {
  Scan out;
  for (const std::string& scheme : posix::list_directory(dir_.c_str())) {
    const std::string scheme_dir = dir_ + "/" + scheme;
    for (const std::string& host : posix::list_directory(scheme_dir.c_str())) {
      const std::string host_dir = scheme_dir + "/" + host;
      for (const std::string& name : posix::list_directory(host_dir.c_str())) {
        const std::string file = host_dir + "/" + name;
        if (ends_with(name, kMeta)) {
          const std::string entry = file.substr(0, file.size() - kMeta.size());
          struct ::stat st {};
          if (!posix::stat_path(entry.c_str(), st)) continue;
          const auto bytes = static_cast<std::uint64_t>(st.st_size);
          out.complete.push_back(
              {entry, bytes,
               static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
          out.complete_bytes += bytes;
        } else if (ends_with(name, kLock) && file != own_lock) {
          posix::Fd fd(posix::open_file(file.c_str(), O_RDWR));
          if (!fd.valid()) continue;
          if (posix::lock_file(fd.get(), LOCK_SH | LOCK_NB) == 0) {
            // Nobody downloads it: a .part beside it is what a killed process left. Remove it
            // under the entry's own lock (INV-CACHE-1), never while a downloader may start.
            posix::lock_file(fd.get(), LOCK_UN);
            if (clean_stale) {
              const std::string entry = file.substr(0, file.size() - kLock.size());
              posix::Fd own = lock_entry(file, false);
              if (own.valid()) posix::remove_file((entry + std::string(kPart)).c_str());
            }
            continue;
          }
          // In progress: count the size its downloader reserved.
          if (EntryHeader* h = map_entry_header(fd.get())) {
            if (h->magic == EntryHeader::kMagic) {
              out.downloading_bytes += h->size.load(std::memory_order_acquire);
              ++out.downloading;
            }
            unmap_entry_header(h);
          }
        }
      }
    }
  }
  return out;
}

bool ShardCache::settle(std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (downloads_.empty()) return true;
    }
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

std::pair<std::size_t, std::uint64_t> ShardCache::usage() const {
  const Scan s = scan(false, {});
  return {s.complete.size(), s.complete_bytes};
}

bool ShardCache::reserve(std::uint64_t bytes, EntryHeader* header, const std::string& path,
                         Need need, RemoteCounters* counters,
                         const std::function<void()>& release_others) {
  const std::uint64_t limit = options_.cache_limit;
  if (limit == 0) {
    header->size.store(bytes, std::memory_order_release);
    return true;
  }
  const std::string global_path = dir_ + "/.stoker-cache.lock";
  const auto deadline = Clock::now() + options_.timeouts.cache_room;
  bool released_others = false;
  for (;;) {
    {
      posix::Fd global(posix::open_file(global_path.c_str(), O_RDWR | O_CREAT, 0644));
      if (!global.valid() || posix::lock_file(global.get(), LOCK_EX) != 0) {
        throw Error(posix::errno_message(
            fmt::format("remote cache: cannot lock {}; check the cache directory", global_path),
            errno));
      }
      Scan s = scan(true, path + std::string(kLock));
      std::uint64_t used = s.complete_bytes + s.downloading_bytes;
      if (used + bytes > limit) {
        // Least recently used first (a hit touches its entry).
        std::sort(s.complete.begin(), s.complete.end(),
                  [](const auto& a, const auto& b) { return a.used_ns < b.used_ns; });
        for (const Scan::Complete& c : s.complete) {
          if (used + bytes <= limit) break;
          posix::Fd fd(posix::open_read(c.path.c_str()));
          if (!fd.valid() || posix::lock_file(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
          // INV-CACHE-2: nobody holds it. The meta first: an entry without one is never counted
          // or evicted again, whatever happens next.
          posix::remove_file((c.path + std::string(kMeta)).c_str());
          posix::remove_file(c.path.c_str());
          used -= c.bytes;
          if (counters != nullptr) counters->evictions.fetch_add(1, std::memory_order_relaxed);
        }
      }
      if (used + bytes <= limit) {
        header->size.store(bytes, std::memory_order_release);  // counted by others from now
        return true;
      }
      if (need == Need::kAhead) return false;
      if (Clock::now() >= deadline) {
        throw Error(fmt::format(
            "remote cache: no room for {} ({}) in {}: cache_limit is {}, readers hold {} ({} "
            "shard{}) and downloads in progress {}; raise RemoteOptions::cache_limit to at least "
            "{}, or lower read_ahead_shards, num_workers or ShardOptions::max_open_shards (each "
            "reader holds the shards it reads)",
            path, format_bytes(bytes), dir_, format_bytes(limit), format_bytes(s.complete_bytes),
            s.complete.size(), s.complete.size() == 1 ? "" : "s", format_bytes(s.downloading_bytes),
            format_bytes(used + bytes)));
      }
    }
    if (!released_others && release_others) {
      released_others = true;
      release_others();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// ---------------------------------------------------------------------------------------------
// Acquiring

std::shared_ptr<CacheHold> ShardCache::try_complete(const RemoteFile& file, const std::string& path,
                                                    RemoteCounters* counters) {
  for (int tries = 0; tries < 10; ++tries) {
    posix::Fd fd(posix::open_read(path.c_str()));
    if (!fd.valid()) return nullptr;
    if (posix::lock_file(fd.get(), LOCK_SH) != 0) return nullptr;
    struct ::stat by_fd {};
    struct ::stat by_path {};
    if (!posix::stat_fd(fd.get(), by_fd) || !posix::stat_path(path.c_str(), by_path) ||
        by_fd.st_ino != by_path.st_ino) {
      continue;  // evicted between open and lock
    }
    const std::string meta = read_small(path + std::string(kMeta));
    if (meta.rfind(kMetaMagic, 0) != 0) {
      throw Error(fmt::format(
          "remote cache: {} exists but the cache did not make it (no {} beside it), so it is "
          "neither read nor replaced; move it away, or set RemoteOptions::cache_dir to a "
          "directory of its own",
          path, kMeta));
    }
    const auto bytes = static_cast<std::uint64_t>(by_fd.st_size);
    if (file.size && *file.size != bytes) {
      // The object changed since it was cached (or the entry is damaged): download it again
      // when nobody reads the old copy.
      if (posix::lock_file(fd.get(), LOCK_EX | LOCK_NB) == 0) {
        posix::remove_file((path + std::string(kMeta)).c_str());
        posix::remove_file(path.c_str());
        return nullptr;
      }
      throw Error(fmt::format(
          "remote cache: {} holds {} bytes but {} has {}; another process still reads the old "
          "copy, so it cannot be replaced now: wait for it to finish, or clear the cache",
          path, bytes, file.url, *file.size));
    }
    if (file.verify && meta_value(meta, "verified") != file.verify_token) {
      file.verify(fd.get(), bytes);  // throws for a mismatch
      write_whole(path + std::string(kMeta),
                  meta + fmt::format("verified {}\n", file.verify_token));
    }
    // Least recently used is by modification time (not atime, which relatime and noatime mounts
    // keep loosely): a hit is a use.
    posix::touch_file(fd.get());
    auto hold = std::shared_ptr<CacheHold>(new CacheHold());
    hold->cache_ = shared_from_this();
    hold->file_ = file;
    hold->counters_ = counters;
    hold->path_ = path;
    hold->size_ = bytes;
    hold->fd_ = std::move(fd);
    hold->complete_ = true;
    if (counters != nullptr) counters->cache_hits.fetch_add(1, std::memory_order_relaxed);
    return hold;
  }
  return nullptr;
}

std::shared_ptr<CacheHold> ShardCache::acquire(const RemoteFile& file, Need need,
                                               RemoteCounters* counters,
                                               const std::function<void()>& release_others,
                                               std::uint64_t from) {
  const std::string path = entry_path(file.url);
  {
    // This process downloads it already: follow that download.
    std::shared_ptr<Download> running;
    {
      std::lock_guard lock(mutex_);
      for (const auto& d : downloads_) {
        if (d->path == path && !d->failed && !d->finished) running = d;
      }
      if (running != nullptr && need == Need::kNow && running->need == Need::kAhead) {
        running->need = Need::kNow;  // read-ahead reached: its parts go first now
        std::stable_partition(downloads_.begin(), downloads_.end(),
                              [](const auto& x) { return x->need == Need::kNow; });
      }
    }
    if (running != nullptr) {
      posix::Fd lock_fd(posix::open_file((path + std::string(kLock)).c_str(), O_RDWR));
      EntryHeader* header = lock_fd.valid() ? map_entry_header(lock_fd.get()) : nullptr;
      if (header != nullptr) {
        if (auto hold = follow(file, path, std::move(lock_fd), header, counters)) {
          if (need == Need::kNow && !hold->complete()) {
            hold->want(from);
            pump();  // this process's download: its next parts may be others now
          }
          return hold;
        }
      }
    }
  }
  const std::string dir = path.substr(0, path.rfind('/'));
  if (posix::make_directories(dir.c_str()) != 0) {
    throw Error(posix::errno_message(fmt::format("remote cache: cannot make the directory {}", dir),
                                     errno));
  }
  for (int tries = 0; tries < 100; ++tries) {
    if (auto hold = try_complete(file, path, counters)) return hold;
    const std::string lock_path = path + std::string(kLock);
    posix::Fd lock_fd = lock_entry(lock_path, false);
    if (lock_fd.valid()) {
      // This process downloads it (INV-CACHE-1), unless it completed meanwhile.
      if (auto hold = try_complete(file, path, counters)) return hold;
      // Mapped through a descriptor of its own: a mapping keeps its open file description, and
      // so a flock on it, alive after the descriptor is closed.
      EntryHeader* header = map_entry_header_at(lock_path);
      if (header == nullptr) {
        throw Error(posix::errno_message(
            fmt::format("remote cache: cannot map {}; check the cache directory", lock_path),
            errno));
      }
      return start_download(file, path, std::move(lock_fd), header, need, counters, release_others,
                            from);
    }
    // Another process downloads it: follow its progress.
    posix::Fd follow_fd(posix::open_file(lock_path.c_str(), O_RDWR));
    if (!follow_fd.valid()) continue;
    EntryHeader* header = map_entry_header(follow_fd.get());
    if (header == nullptr) continue;
    if (auto hold = follow(file, path, std::move(follow_fd), header, counters)) {
      // Another process's download: its client's watch sees the offset (check_wants).
      if (need == Need::kNow && !hold->complete()) {
        hold->want(from);
        hold->counted_foreign_ = true;
        foreign_now_.fetch_add(1, std::memory_order_relaxed);
      }
      return hold;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  throw Error(fmt::format(
      "remote cache: could not claim {} after 100 tries (other processes kept changing it); "
      "check that nothing else writes to {}",
      path, dir_));
}

std::shared_ptr<CacheHold> ShardCache::follow(const RemoteFile& file, const std::string& path,
                                              posix::Fd lock_fd, EntryHeader* header,
                                              RemoteCounters* counters) {
  // The downloader may not have written the header yet: wait briefly for a known state.
  for (int i = 0; i < 200; ++i) {
    const std::uint32_t state = header->state.load(std::memory_order_acquire);
    if (header->magic == EntryHeader::kMagic && state == EntryHeader::kDownloading) break;
    if (posix::lock_file(lock_fd.get(), LOCK_SH | LOCK_NB) == 0) {
      // Nobody holds LOCK_EX: the download ended (done or failed) or never began.
      posix::lock_file(lock_fd.get(), LOCK_UN);
      unmap_entry_header(header);
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::uint64_t generation = header->generation.load(std::memory_order_acquire);
  posix::Fd fd(posix::open_read((path + std::string(kPart)).c_str()));
  if (!fd.valid()) fd = posix::Fd(posix::open_read(path.c_str()));  // renamed meanwhile
  if (!fd.valid() || posix::lock_file(fd.get(), LOCK_SH) != 0 ||
      header->generation.load(std::memory_order_acquire) != generation) {
    unmap_entry_header(header);
    return nullptr;
  }
  auto hold = std::shared_ptr<CacheHold>(new CacheHold());
  hold->cache_ = shared_from_this();
  hold->file_ = file;
  hold->counters_ = counters;
  hold->path_ = path;
  hold->size_ = header->size.load(std::memory_order_acquire);
  hold->fd_ = std::move(fd);
  hold->lock_fd_ = std::move(lock_fd);
  hold->header_ = header;
  hold->generation_ = generation;
  hold->complete_ = header->state.load(std::memory_order_acquire) == EntryHeader::kComplete;
  {
    std::lock_guard lock(mutex_);
    for (const auto& d : downloads_) {
      if (d->path == path) hold->download_ = d;
    }
  }
  if (counters != nullptr) counters->cache_misses.fetch_add(1, std::memory_order_relaxed);
  return hold;
}

std::shared_ptr<CacheHold> ShardCache::start_download(const RemoteFile& file,
                                                      const std::string& path, posix::Fd lock_fd,
                                                      EntryHeader* header, Need need,
                                                      RemoteCounters* counters,
                                                      const std::function<void()>& release_others,
                                                      std::uint64_t from) {
  auto d = std::make_shared<Download>();
  d->file = file;
  d->path = path;
  d->counters = counters;
  d->need = need;
  d->header = header;
  d->lock_fd = std::move(lock_fd);
  d->started_ns = now_ns();
  // A fresh generation (INV-CACHE-3); followers of an older one see it change and re-attach.
  header->magic = EntryHeader::kMagic;
  header->version = EntryHeader::kVersion;
  header->owner_pid = static_cast<std::int32_t>(posix::self_pid());
  header->state.store(EntryHeader::kIdle, std::memory_order_release);
  header->contiguous.store(0, std::memory_order_release);
  header->size.store(0, std::memory_order_release);
  header->part_size.store(options_.part_size, std::memory_order_release);
  for (auto& r : header->received) r.store(0, std::memory_order_release);
  // Offsets wanted from an older generation: its readers publish theirs again as they wait.
  for (auto& w : header->want) w.store(0, std::memory_order_release);
  d->seen_want_seq = header->want_seq.load(std::memory_order_acquire);
  header->generation.fetch_add(1, std::memory_order_acq_rel);
  bump(header);

  if (file.size) {
    d->size = *file.size;
  } else {
    const net::ObjectInfo info = store_->stat(file.url);  // HEAD (throws RemoteError)
    d->size = info.size;
    if (d->file.etag.empty()) d->file.etag = info.etag;
  }
  if (!reserve(d->size, header, path, need, counters, release_others)) return nullptr;

  const std::string part_path = path + std::string(kPart);
  posix::remove_file(part_path.c_str());  // what a killed downloader left (never read)
  d->part_fd = posix::Fd(posix::open_file(part_path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0644));
  if (!d->part_fd.valid()) {
    header->size.store(0, std::memory_order_release);
    throw Error(
        posix::errno_message(fmt::format("remote cache: cannot create {}", part_path), errno));
  }
  for (std::uint64_t begin = 0; begin < d->size; begin += options_.part_size) {
    Download::Part p;
    p.begin = begin;
    p.end = std::min(d->size, begin + options_.part_size);
    d->parts.push_back(p);
  }
  d->waiting = d->parts.size();
  // The reader's own hold, on the .part inode (INV-CACHE-2), before anything can complete.
  posix::Fd read_fd(posix::open_read(part_path.c_str()));
  posix::Fd hold_lock_fd(posix::open_file((path + std::string(kLock)).c_str(), O_RDWR));
  EntryHeader* hold_header = hold_lock_fd.valid() ? map_entry_header(hold_lock_fd.get()) : nullptr;
  if (!read_fd.valid() || posix::lock_file(read_fd.get(), LOCK_SH) != 0 || hold_header == nullptr) {
    const int err = errno;
    unmap_entry_header(hold_header);
    throw Error(posix::errno_message(fmt::format("remote cache: cannot open {}", part_path), err));
  }
  auto hold = std::shared_ptr<CacheHold>(new CacheHold());
  hold->cache_ = shared_from_this();
  hold->file_ = d->file;
  hold->counters_ = counters;
  hold->path_ = path;
  hold->size_ = d->size;
  hold->fd_ = std::move(read_fd);
  hold->lock_fd_ = std::move(hold_lock_fd);
  hold->header_ = hold_header;
  hold->generation_ = header->generation.load(std::memory_order_acquire);
  hold->download_ = d;
  if (counters != nullptr) counters->cache_misses.fetch_add(1, std::memory_order_relaxed);
  if (need == Need::kNow) hold->want(from);  // before the first pump: its part goes first
  d->seen_want_seq = header->want_seq.load(std::memory_order_acquire);

  header->state.store(EntryHeader::kDownloading, std::memory_order_release);
  bump(header);
  if (d->parts.empty()) {
    finish(d);  // an empty object
    return hold;
  }
  {
    std::lock_guard lock(mutex_);
    downloads_.push_back(d);
    std::stable_partition(downloads_.begin(), downloads_.end(),
                          [](const auto& x) { return x->need == Need::kNow; });
  }
  pump();
  return hold;
}

// ---------------------------------------------------------------------------------------------
// Parts

void ShardCache::pump() {
  struct Start {
    std::shared_ptr<Download> d;
    std::size_t part;
  };
  std::vector<Start> starts;
  {
    std::lock_guard lock(mutex_);
    for (const auto& d : downloads_) {
      if (d->failed) continue;
      const std::size_t n = d->parts.size();
      // Where its readers are: the parts holding the offsets they published (EntryHeader::want),
      // or, for a shard read now that has none, its first part.
      std::vector<std::size_t> anchors;
      const std::uint64_t part_size = d->header->part_size.load(std::memory_order_acquire);
      for (const auto& w : d->header->want) {
        const std::uint64_t v = w.load(std::memory_order_acquire);
        if (v == 0 || part_size == 0) continue;
        const auto p =
            static_cast<std::size_t>(std::min<std::uint64_t>((v - 1) / part_size, n - 1));
        if (std::find(anchors.begin(), anchors.end(), p) == anchors.end()) anchors.push_back(p);
      }
      const bool published = !anchors.empty();
      if (!published && d->need == Need::kNow) anchors.push_back(0);
      // A shard a reader waits for gets the parts its readers wait for first: until each of
      // them is in, it has at most kHeadParts parts in flight per waiting reader, from that
      // reader's part on, and nothing else starts, so the first samples arrive at a share of
      // the link, not after the whole shard (all parts at once share it equally and end
      // together). A read-ahead download is one too once a reader of another process waits.
      std::vector<std::size_t> starving;
      for (const std::size_t p : anchors) {
        if (d->parts[p].state != Download::Part::kDone) starving.push_back(p);
      }
      const bool head = (d->need == Need::kNow || published) && n > 1 && !starving.empty();
      if (d->waiting == 0) {
        if (head) break;  // all its parts run: still nothing else until its readers' are in
        continue;
      }
      std::size_t cap = head ? std::min(options_.parts_in_flight, kHeadParts * starving.size())
                             : options_.parts_in_flight;
      if (!head && d->need == Need::kAhead && foreign_now_.load(std::memory_order_relaxed) > 0) {
        cap = std::min(cap, kHeadParts);  // a reader here waits on another process's download
      }
      const auto room = [&] {
        return parts_running_ < options_.parts_in_flight && d->running < cap && d->waiting > 0;
      };
      const auto start = [&](std::size_t p) {
        d->parts[p].state = Download::Part::kRunning;
        starts.push_back({d, p});
        --d->waiting;
        ++d->running;
        ++parts_running_;
      };
      // From each reader's part on, one part each in turn; then, when no reader waits, the
      // rest in order.
      std::vector<std::size_t> cursor = head ? starving : anchors;
      // A part that runs already is its reader's turn, so each waiting reader gets its share.
      for (bool more = true; more && room();) {
        more = false;
        for (std::size_t& c : cursor) {
          while (c < n && d->parts[c].state == Download::Part::kDone) ++c;
          if (c >= n || !room()) continue;
          if (d->parts[c].state == Download::Part::kWaiting) start(c);
          ++c;
          more = true;
        }
      }
      if (head) break;
      for (std::size_t p = 0; p < n && room(); ++p) {
        if (d->parts[p].state == Download::Part::kWaiting) start(p);
      }
      if (parts_running_ >= options_.parts_in_flight) break;
    }
  }
  // Outside the lock: fetch_range() takes the client's lock, whose sinks take none of ours.
  for (const Start& s : starts) {
    const Download::Part& p = s.d->parts[s.part];
    std::shared_ptr<Download> d = s.d;
    const std::size_t index = s.part;
    std::weak_ptr<ShardCache> self = weak_from_this();
    const std::uint64_t id = store_->fetch_range(
        d->file.url, p.begin, p.end, d->file.etag,
        [d, index](std::uint64_t offset, std::span<const std::byte> bytes, std::string& why) {
          return d->write(index, offset, bytes, why);
        },
        [self, d, index](std::exception_ptr error) {
          if (auto cache = self.lock()) cache->part_done(d, index, error);
        },
        d->counters != nullptr ? &d->counters->transfers : nullptr);
    std::lock_guard lock(mutex_);
    if (d->parts[index].state == Download::Part::kRunning) d->parts[index].fetch = id;
  }
}

void ShardCache::check_wants() {
  bool changed = false;
  {
    std::lock_guard lock(mutex_);
    for (const auto& d : downloads_) {
      const std::uint32_t seq = d->header->want_seq.load(std::memory_order_acquire);
      if (seq != d->seen_want_seq) {
        d->seen_want_seq = seq;
        changed = true;
      }
    }
  }
  if (changed) pump();
}

void ShardCache::part_done(const std::shared_ptr<Download>& d, std::size_t part,
                           std::exception_ptr error) {
  std::vector<std::uint64_t> cancel;
  bool complete = false;
  bool first_failure = false;
  {
    std::lock_guard lock(mutex_);
    d->parts[part].state = Download::Part::kDone;
    d->parts[part].fetch = 0;
    --d->running;
    --parts_running_;
    if (error && !d->failed) {
      d->failed = true;
      d->error = error;
      first_failure = true;
      for (const Download::Part& p : d->parts) {
        if (p.state == Download::Part::kRunning && p.fetch != 0) cancel.push_back(p.fetch);
      }
    }
    complete = !d->failed && d->running == 0 && d->waiting == 0;
  }
  for (const std::uint64_t id : cancel) store_->cancel_range(id);
  if (first_failure) {
    {
      std::lock_guard lock(mutex_);
      for (Download::Part& p : d->parts) {
        if (p.state == Download::Part::kRunning) {
          p.state = Download::Part::kDone;
          --d->running;
          --parts_running_;
        }
      }
    }
    fail(d, error);
  } else if (complete) {
    finish(d);
  }
  pump();
}

void ShardCache::finish(const std::shared_ptr<Download>& d) {
  try {
    struct ::stat st {};
    std::uint64_t received = 0;
    for (const Download::Part& p : d->parts) received += p.received;
    if (!posix::stat_fd(d->part_fd.get(), st) ||
        static_cast<std::uint64_t>(st.st_size) != d->size || received != d->size) {
      throw Error(fmt::format(
          "remote cache: the download of {} ended with {} of {} bytes ({} on disk); it is not "
          "kept",
          d->file.url, received, d->size, static_cast<std::uint64_t>(st.st_size)));
    }
    if (d->file.verify) d->file.verify(d->part_fd.get(), d->size);
    if (posix::sync_file_data(d->part_fd.get()) != 0) {
      throw Error(posix::errno_message(
          fmt::format("remote cache: cannot sync {}{}", d->path, kPart), errno));
    }
    std::string meta =
        fmt::format("{}url {}\nsize {}\netag {}\n", kMetaMagic, d->file.url, d->size, d->file.etag);
    if (d->file.verify) meta += fmt::format("verified {}\n", d->file.verify_token);
    if (!write_whole(d->path + std::string(kMeta), meta) ||
        posix::rename_file((d->path + std::string(kPart)).c_str(), d->path.c_str()) != 0) {
      const int err = errno;
      posix::remove_file((d->path + std::string(kMeta)).c_str());
      throw Error(posix::errno_message(
          fmt::format("remote cache: cannot publish {} (the rename of its download)", d->path),
          err));
    }
  } catch (...) {
    fail(d, std::current_exception());
    return;
  }
  if (d->counters != nullptr) {
    d->counters->download_ns.fetch_add(now_ns() - d->started_ns, std::memory_order_relaxed);
  }
  {
    std::lock_guard lock(mutex_);
    d->finished = true;
    std::erase(downloads_, d);
  }
  // INV-CACHE-1 let go before kComplete is seen: whoever sees it counts no download here.
  d->part_fd.reset();
  d->lock_fd.reset();
  d->header->contiguous.store(d->size, std::memory_order_release);
  d->header->state.store(EntryHeader::kComplete, std::memory_order_release);
  bump(d->header);
}

void ShardCache::fail(const std::shared_ptr<Download>& d, std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    d->failed = true;
    if (!d->error) d->error = error;
    std::erase(downloads_, d);
  }
  // The part file is never taken for complete: it goes; readers still holding it see kFailed.
  posix::remove_file((d->path + std::string(kPart)).c_str());
  d->header->size.store(0, std::memory_order_release);
  d->part_fd.reset();
  d->lock_fd.reset();
  d->header->state.store(EntryHeader::kFailed, std::memory_order_release);
  bump(d->header);
}

// ---------------------------------------------------------------------------------------------
// Holds

CacheHold::~CacheHold() {
  stop_counting_foreign();
  drop_want();
  unmap_entry_header(header_);
}

void CacheHold::want(std::uint64_t pos) noexcept {
  if (header_ == nullptr || complete_) return;
  const std::uint64_t value = std::min(pos, size_) + 1;
  if (want_slot_ >= 0 && want_value_ == value) return;
  std::atomic<std::uint64_t>* slots = header_->want;
  if (want_slot_ >= 0) {
    std::uint64_t expected = want_value_;
    // Another reader's now when the downloader cleared it (a new generation) and it was taken.
    if (!slots[want_slot_].compare_exchange_strong(expected, value, std::memory_order_acq_rel)) {
      want_slot_ = -1;
    }
  }
  for (std::size_t i = 0; want_slot_ < 0 && i < EntryHeader::kWantSlots; ++i) {
    std::uint64_t expected = 0;
    if (slots[i].compare_exchange_strong(expected, value, std::memory_order_acq_rel)) {
      want_slot_ = static_cast<int>(i);
    }
  }
  if (want_slot_ < 0) return;  // all slots taken: the parts come in order
  want_value_ = value;
  header_->want_seq.fetch_add(1, std::memory_order_acq_rel);
}

void CacheHold::stop_counting_foreign() noexcept {
  if (!counted_foreign_) return;
  counted_foreign_ = false;
  // The read-ahead's cap goes at its next part's end (pump() is not called here: a hold can
  // end in a fork()ed child, whose copy of this cache must start nothing).
  cache_->foreign_now_.fetch_sub(1, std::memory_order_relaxed);
}

void CacheHold::drop_want() noexcept {
  if (header_ == nullptr || want_slot_ < 0) return;
  std::uint64_t expected = want_value_;
  header_->want[want_slot_].compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
  want_slot_ = -1;
}

bool CacheHold::complete() const noexcept {
  return complete_ || (header_ != nullptr &&
                       header_->state.load(std::memory_order_acquire) == EntryHeader::kComplete &&
                       header_->generation.load(std::memory_order_acquire) == generation_);
}

std::uint64_t CacheHold::available() const noexcept { return readable_from(0); }

std::uint64_t CacheHold::tracked_part_size() const noexcept {
  // A version-1 downloader (an older stoker on this machine) publishes the prefix only.
  return header_ != nullptr && header_->version >= 2
             ? header_->part_size.load(std::memory_order_acquire)
             : 0;
}

std::uint64_t CacheHold::readable_from(std::uint64_t pos) const noexcept {
  if (complete()) return size_;
  if (header_ == nullptr || pos >= size_) return std::min(pos, size_);
  if (header_->generation.load(std::memory_order_acquire) != generation_) return pos;
  std::uint64_t at =
      std::max(pos, std::min(size_, header_->contiguous.load(std::memory_order_acquire)));
  const std::uint64_t part_size = tracked_part_size();
  while (part_size != 0 && at < size_) {
    const std::uint64_t p = at / part_size;
    if (p >= EntryHeader::kTrackedParts) break;
    const std::uint64_t begin = p * part_size;
    const std::uint64_t got = begin + header_->received[p].load(std::memory_order_acquire);
    if (got <= at) break;
    at = std::min(got, size_);
    if (got < std::min(size_, begin + part_size)) break;  // the part is still arriving
  }
  // INV-CACHE-3: what was read belongs to this generation only if it is still the current one.
  if (header_->generation.load(std::memory_order_acquire) != generation_) return pos;
  return at;
}

void CacheHold::wait_for(std::uint64_t end) { wait_range(0, end, true); }

void CacheHold::wait_from(std::uint64_t pos, std::uint64_t end) {
  const std::uint64_t part_size = tracked_part_size();
  if (part_size != 0) end = std::min(end, (pos / part_size + 1) * part_size);
  wait_range(pos, std::max(end, pos + 1), false);
}

void CacheHold::wait_range(std::uint64_t pos, std::uint64_t end, bool whole) {
  end = std::min(end, size_);
  if (complete_ || end == 0 || pos >= end) return;
  const std::uint64_t started = now_ns();
  bool wanted = false;
  for (;;) {
    const std::uint32_t seq = header_->seq.load(std::memory_order_acquire);
    const std::uint32_t state = header_->state.load(std::memory_order_acquire);
    const bool same_generation = header_->generation.load(std::memory_order_acquire) == generation_;
    if (same_generation && state == EntryHeader::kComplete) {
      complete_ = true;
      stop_counting_foreign();
      break;
    }
    // The last bytes count only once the entry is published (verified, renamed): a reader of
    // the whole shard gets a complete file.
    if (same_generation && (!whole || end < size_) && readable_from(pos) >= end) break;
    bool lost = !same_generation || state == EntryHeader::kFailed;
    if (!lost) {
      if (!wanted) {
        // The downloader starts the part holding `pos` next: at once when it runs here, at its
        // client's next watch (within a few ms) when another process runs it.
        wanted = true;
        want(pos);
        if (download_ != nullptr) cache_->pump();
        continue;
      }
      header_->waiters.fetch_add(1, std::memory_order_acq_rel);
      (void)posix::futex_wait(header_->seq, seq, kFollowPollMs);
      header_->waiters.fetch_sub(1, std::memory_order_acq_rel);
      if (download_ == nullptr && header_->seq.load(std::memory_order_acquire) == seq &&
          posix::lock_file(lock_fd_.get(), LOCK_SH | LOCK_NB) == 0) {
        // Another process's download, and nobody holds its lock any more: it died (or ended
        // between the loads above; the next pass sees which).
        posix::lock_file(lock_fd_.get(), LOCK_UN);
        const std::uint32_t now_state = header_->state.load(std::memory_order_acquire);
        lost = now_state != EntryHeader::kComplete;
      }
    }
    if (!lost) continue;
    if (download_ != nullptr && download_->error) {
      if (counters_ != nullptr)
        counters_->wait_ns.fetch_add(now_ns() - started, std::memory_order_relaxed);
      std::rethrow_exception(download_->error);
    }
    // The downloader went away (another process, killed or failed): claim the entry again; this
    // process may become its downloader. The bytes already read stay valid (the same shard).
    drop_want();
    stop_counting_foreign();
    std::shared_ptr<CacheHold> again = cache_->acquire(file_, Need::kNow, nullptr, {}, pos);
    if (again->download_ != nullptr && again->download_->error) {
      std::rethrow_exception(again->download_->error);
    }
    unmap_entry_header(header_);
    header_ = std::exchange(again->header_, nullptr);
    lock_fd_ = std::move(again->lock_fd_);
    fd_ = std::move(again->fd_);
    generation_ = again->generation_;
    download_ = again->download_;
    complete_ = again->complete_;
    size_ = again->size_;
    want_slot_ = std::exchange(again->want_slot_, -1);
    want_value_ = again->want_value_;
    counted_foreign_ = std::exchange(again->counted_foreign_, false);
    if (complete_) break;
    end = std::min(end, size_);
  }
  if (counters_ != nullptr)
    counters_->wait_ns.fetch_add(now_ns() - started, std::memory_order_relaxed);
}

}  // namespace stoker::detail
