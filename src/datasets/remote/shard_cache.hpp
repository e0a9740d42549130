// ShardCache: the node-wide cache of remote shards, and CacheHold, a reader's claim on one
// entry. A remote source is a cache in front of a local reader: a shard is downloaded once per
// machine into RemoteOptions::cache_dir, as parallel ranged parts, and read from there by the
// readers that read local files.
//
// On disk, for the entry <e> of a URL (cache_dir/<scheme>/<bucket or host>/<key, '/' as %2F>):
//   <e>                the complete shard, only ever made by rename() of a verified download
//   <e>.stoker-meta    written just before that rename: the cache made <e> (only entries with
//                      it are ever evicted; the cache deletes no file it did not download)
//   <e>.stoker-part    a download in progress (never read as a complete shard)
//   <e>.stoker-lock    flock(LOCK_EX) by the one process downloading <e>, and an EntryHeader
//                      (mapped by every process reading <e>): size, bytes done, state
//   .stoker-cache.lock flock(LOCK_EX) while room is made (usage summed, entries evicted)
//
// Rules, each kept where it is named:
//   INV-CACHE-1 one downloader per entry per machine: the holder of <e>.stoker-lock's LOCK_EX,
//     taken on the inode the path names (checked after locking, since evictions unlink it).
//   INV-CACHE-2 a reader holds an entry by flock(LOCK_SH) on its own descriptor of the
//     entry's inode (taken on the .part file while downloading: rename keeps the inode), and
//     an entry is evicted only by one who gets flock(LOCK_EX | LOCK_NB) on it. Locks die with
//     their process, so a killed reader holds nothing.
//   INV-CACHE-3 EntryHeader::contiguous and received[p] only grow within a generation, and
//     only after the bytes below them were written (pwrite, then a release store): a reader reads
//     [0, contiguous) and [begin of part p, that + received[p]) of the generation's .part; a new
//     downloader makes a new generation and a new .part.
//   INV-CACHE-4 room is reserved before a download starts: complete entries plus the sizes of
//     downloads in progress stay <= cache_limit (while the global lock is held).
//
// Threads: acquire() from any thread; a download's parts run on the HttpClient's thread; a
// CacheHold belongs to one thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "os/net/object_store.hpp"
#include "os/posix.hpp"
#include "stoker/remote.hpp"

namespace stoker::detail {

// RemoteStats's counters, in memory every process of a dataset shares (made before fork()).
struct RemoteCounters {
  net::TransferCounters transfers;  // body bytes, requests, retries
  std::atomic<std::uint64_t> cache_hits{0};
  std::atomic<std::uint64_t> cache_misses{0};
  std::atomic<std::uint64_t> evictions{0};
  std::atomic<std::uint64_t> wait_ns{0};
  std::atomic<std::uint64_t> download_ns{0};

  RemoteStats snapshot() const noexcept;
};

// The head of <e>.stoker-lock, mapped shared by the downloader and every reader of <e>. Readers
// that wait publish the offset they need in `want`; the downloader starts the parts holding
// those offsets first (ShardCache::pump), whichever process it is.
struct EntryHeader {
  static constexpr std::uint64_t kMagic = 0x4b434f4c4b4f5453ull;  // "STOKLOCK"
  static constexpr std::uint32_t kVersion = 2;
  static constexpr std::size_t kWantSlots = 8;
  // Parts whose progress readers can see one by one (beyond them, `contiguous` only): what is
  // left of the 4 KiB page.
  static constexpr std::size_t kTrackedParts = 496;
  enum State : std::uint32_t { kIdle = 0, kDownloading = 1, kComplete = 2, kFailed = 3 };

  std::uint64_t magic;  // written by each downloader before anything else is read
  std::uint32_t version;
  std::int32_t owner_pid;  // the downloader (messages only)
  // Written by the downloader, read by readers (acquire loads):
  std::atomic<std::uint64_t> size;        // the shard's bytes
  std::atomic<std::uint64_t> contiguous;  // INV-CACHE-3
  std::atomic<std::uint64_t> generation;  // one per download attempt (a new .part)
  std::atomic<std::uint32_t> state;
  std::atomic<std::uint32_t> seq;        // futex word, bumped on every change above
  std::atomic<std::uint32_t> waiters;    // readers asleep on seq (the downloader wakes them)
  std::atomic<std::uint32_t> want_seq;   // bumped by a reader that changed a `want` slot
  std::atomic<std::uint64_t> part_size;  // the download's parts, set before kDownloading
  // Written by readers: 1 + an offset a reader waits for, 0 when free (a hint: a killed reader
  // leaves its slot until the download ends).
  std::atomic<std::uint64_t> want[kWantSlots];
  std::atomic<std::uint64_t> received[kTrackedParts];  // INV-CACHE-3
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
              std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(EntryHeader) == 4096 && alignof(EntryHeader) == 8);

// A remote shard as its dataset knows it.
struct RemoteFile {
  std::string url;
  std::optional<std::uint64_t> size;  // from a listing or an index; empty: HEAD first
  std::string etag;
  // Checks a complete download (MDS: the index's hash) and throws stoker::Error naming what was
  // wrong; `token` names the check, so an entry checked once is not checked again.
  std::function<void(int fd, std::uint64_t size)> verify;
  std::string verify_token;
};

enum class Need : std::uint8_t {
  kNow,    // the shard a reader reads next: waits (up to timeouts.cache_room) for room
  kAhead,  // read-ahead: skipped (nullptr) when the cache has no room now
};

class ShardCache;
struct Download;

// A reader's claim on one entry (INV-CACHE-2): its descriptor, and the download's progress
// while it arrives.
class CacheHold {
 public:
  ~CacheHold();
  CacheHold(const CacheHold&) = delete;
  CacheHold& operator=(const CacheHold&) = delete;

  const std::string& url() const noexcept { return file_.url; }
  std::uint64_t size() const noexcept { return size_; }
  // Read-only, holding LOCK_SH; the same inode before and after the download completes, except
  // after a takeover (wait_for() may change it: read through fd() after each wait).
  int fd() const noexcept { return fd_.get(); }
  // The complete entry's path.
  const std::string& path() const noexcept { return path_; }
  bool complete() const noexcept;
  // Bytes [0, n) that can be read now.
  std::uint64_t available() const noexcept;
  // The end of the bytes that can be read now from `pos` on ([pos, n); n == pos when none):
  // the downloaded prefix, and the parts beyond it that are in (whole or their first bytes).
  std::uint64_t readable_from(std::uint64_t pos) const noexcept;
  // Blocks until bytes [0, end) can be read (end is clamped to size()); for end = size(), until
  // the entry is complete (verified and renamed: path() then names it). When the download
  // fails, throws its RemoteError (or stoker::Error for a full disk, a failed check); when its
  // downloader died, this reader downloads the rest itself.
  void wait_for(std::uint64_t end);
  // Blocks until bytes from `pos` on can be read: up to `end`, or to the end of the part
  // holding `pos` when that comes first (a part not yet started is not waited for). While it
  // waits, `pos` is published to the downloader, which fetches the part holding it first.
  // Throws as wait_for().
  void wait_from(std::uint64_t pos, std::uint64_t end);
  // Publishes `pos` as the offset this reader needs next (the downloader starts its part
  // first), without waiting.
  void want(std::uint64_t pos) noexcept;

 private:
  friend class ShardCache;
  CacheHold() = default;

  std::shared_ptr<ShardCache> cache_;
  RemoteFile file_;
  RemoteCounters* counters_ = nullptr;
  std::string path_;
  std::uint64_t size_ = 0;
  posix::Fd fd_;
  bool complete_ = false;
  // While the entry downloads: the lock file (its header mapped) and, when this process
  // downloads it, the download (for its error).
  posix::Fd lock_fd_;
  EntryHeader* header_ = nullptr;
  std::uint64_t generation_ = 0;
  std::shared_ptr<Download> download_;
  int want_slot_ = -1;  // the header's `want` slot this reader set (-1: none)
  std::uint64_t want_value_ = 0;
  bool counted_foreign_ = false;  // counted in ShardCache::foreign_now_
  void stop_counting_foreign() noexcept;

  // wait_for() and wait_from(): until [pos, end) can be read, and for end = size() with
  // `whole`, until the entry is complete.
  void wait_range(std::uint64_t pos, std::uint64_t end, bool whole);
  // The download's part size when its header has per-part progress, else 0.
  std::uint64_t tracked_part_size() const noexcept;
  void drop_want() noexcept;
};

class ShardCache : public std::enable_shared_from_this<ShardCache> {
 public:
  // This process's cache of `options.cache_dir` (or the default directory), with its own
  // object store for `options`; a fork()ed child gets its own on first use. Throws
  // std::invalid_argument for bad options, stoker::Error when the directory cannot be made.
  static std::shared_ptr<ShardCache> process(const RemoteOptions& options);
  // The directory RemoteOptions name (their cache_dir, or the default one).
  static std::string resolve_dir(const RemoteOptions& options);

  // Holds `file`'s entry: complete already (a hit), or being downloaded (by this process,
  // which starts it, or by another one, which this one follows). Does not wait for bytes.
  // kAhead returns nullptr when there is no room now. A kNow reader that reads from `from` on
  // publishes it (CacheHold::want) before any part starts. `counters` (may be null) gets the hit or
  // miss, the bytes and the waits. `release_others` is called once when a kNow acquire has to
  // wait for room, so the caller can let go of entries it holds but does not need now.
  // Throws RemoteError (the HEAD for an unknown size), stoker::Error (the directory, a cache
  // too small: "cache_limit ... holds ...", an entry the cache did not make).
  std::shared_ptr<CacheHold> acquire(const RemoteFile& file, Need need, RemoteCounters* counters,
                                     const std::function<void()>& release_others = {},
                                     std::uint64_t from = 0);

  const std::string& dir() const noexcept { return dir_; }
  const RemoteOptions& options() const noexcept { return options_; }
  net::ObjectStore& store() noexcept { return *store_; }
  // The entry path of a URL (the file a complete shard is kept in).
  std::string entry_path(const std::string& url) const;
  // Complete entries the cache made, and their bytes (a scan of the directory).
  std::pair<std::size_t, std::uint64_t> usage() const;
  // Waits until the downloads this process runs have ended (complete or failed), at most
  // `limit`; true when none is left. A stream reader calls it when its share of the epoch is
  // read: its readers may have read every byte of a download before the last part's transfer
  // ended, and a worker that exits then would leave the download unpublished (its .part is
  // removed and the shard downloaded again by the next reader).
  bool settle(std::chrono::milliseconds limit);

  ShardCache(RemoteOptions options, std::string dir);
  ~ShardCache();

 private:
  friend class CacheHold;
  friend struct Download;
  struct Entry;
  struct Scan;

  std::shared_ptr<CacheHold> try_complete(const RemoteFile& file, const std::string& path,
                                          RemoteCounters* counters);
  std::shared_ptr<CacheHold> start_download(const RemoteFile& file, const std::string& path,
                                            posix::Fd lock_fd, EntryHeader* header, Need need,
                                            RemoteCounters* counters,
                                            const std::function<void()>& release_others,
                                            std::uint64_t from);
  std::shared_ptr<CacheHold> follow(const RemoteFile& file, const std::string& path,
                                    posix::Fd lock_fd, EntryHeader* header,
                                    RemoteCounters* counters);
  // INV-CACHE-4: makes room for `bytes` (evicting unheld entries) and records them in
  // `header` before the global lock is let go. False when kAhead finds no room.
  bool reserve(std::uint64_t bytes, EntryHeader* header, const std::string& path, Need need,
               RemoteCounters* counters, const std::function<void()>& release_others);
  // `own_lock`: the caller's own download, not counted.
  Scan scan(bool clean_stale, const std::string& own_lock) const;
  // Starts parts while this process has fewer than parts_in_flight running: first those that
  // hold the offsets readers wait for (EntryHeader::want), and the parts after them.
  void pump();
  // The client's watch: pump() when a reader (of any process) has published a new offset for
  // one of this process's downloads since they last looked.
  void check_wants();
  void part_done(const std::shared_ptr<Download>& d, std::size_t part, std::exception_ptr error);
  void finish(const std::shared_ptr<Download>& d);
  void fail(const std::shared_ptr<Download>& d, std::exception_ptr error);

  RemoteOptions options_;
  std::string dir_;
  std::shared_ptr<net::ObjectStore> store_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<Download>> downloads_;  // this process's, in priority order
  std::size_t parts_running_ = 0;
  // Holds a reader needs now of downloads another process runs: while there are any, this
  // process's read-ahead starts at most kHeadParts parts at once, leaving the link to them.
  std::atomic<std::size_t> foreign_now_{0};
};

// Maps the EntryHeader of an open lock file (made 4 KiB long); nullptr and errno on failure.
// The mapping keeps the descriptor's open file description, so a flock taken through `lock_fd`
// lives as long as the mapping: map through a descriptor that holds no lock
// (map_entry_header_at opens one of its own).
EntryHeader* map_entry_header(int lock_fd) noexcept;
EntryHeader* map_entry_header_at(const std::string& lock_path) noexcept;
void unmap_entry_header(EntryHeader* header) noexcept;

}  // namespace stoker::detail
