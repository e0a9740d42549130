#include "datasets/remote/remote_source.hpp"

#include <exception>
#include <future>
#include <new>

#include <fmt/format.h>

#include "data/format.hpp"
#include "os/net/url.hpp"
#include "os/posix.hpp"

namespace stoker::detail {
namespace {
constexpr std::size_t kHeadsAtOnce = 16;
constexpr std::size_t kReceiveBuffer = 256 * 1024;
}  // namespace

RemoteSource::RemoteSource(RemoteOptions options) : options_(std::move(options)) {
  options_.validate();
  region_ = std::make_shared<SharedRegion>("stoker-remote-stats", sizeof(RemoteCounters),
                                           "remote shards: the download counters",
                                           "the counters need one page");
  counters_ = new (region_->data()) RemoteCounters();
}

std::shared_ptr<RemoteSource> RemoteSource::for_names(const std::vector<std::string>& names,
                                                      const RemoteOptions& options) {
  for (const std::string& n : names) {
    if (net::is_remote(n)) return std::make_shared<RemoteSource>(options);
  }
  return nullptr;
}

void RemoteSource::learn(const std::string& url, std::uint64_t size, std::string etag) {
  Known& k = known_[url];
  k.size = size;
  k.etag = std::move(etag);
}

std::optional<std::uint64_t> RemoteSource::size_of(const std::string& url) const {
  const auto it = known_.find(url);
  if (it == known_.end()) return std::nullopt;
  return it->second.size;
}

std::vector<std::pair<std::optional<net::ObjectInfo>, std::exception_ptr>> RemoteSource::head_all(
    const std::vector<std::string>& urls) {
  net::ObjectStore& store = ShardCache::process(options_)->store();
  std::vector<std::pair<std::optional<net::ObjectInfo>, std::exception_ptr>> out(urls.size());
  for (std::size_t begin = 0; begin < urls.size(); begin += kHeadsAtOnce) {
    const std::size_t end = std::min(urls.size(), begin + kHeadsAtOnce);
    // Blocking HEADs on short-lived threads: the client runs them side by side on its own.
    std::vector<std::future<net::ObjectInfo>> heads;
    for (std::size_t i = begin; i < end; ++i) {
      heads.push_back(
          std::async(std::launch::async, [&store, &url = urls[i]] { return store.stat(url); }));
    }
    for (std::size_t i = begin; i < end; ++i) {
      try {
        out[i].first = heads[i - begin].get();
      } catch (...) {
        out[i].second = std::current_exception();
      }
    }
  }
  return out;
}

void RemoteSource::stat_all(const std::vector<std::string>& urls) {
  (void)stat_and_probe(urls, {});
}

std::vector<bool> RemoteSource::exists_all(const std::vector<std::string>& urls) {
  return stat_and_probe({}, urls);
}

std::vector<bool> RemoteSource::stat_and_probe(const std::vector<std::string>& must,
                                               const std::vector<std::string>& maybe) {
  std::vector<std::string> urls;
  for (const std::string& u : must) {
    if (net::is_remote(u) && !size_of(u)) urls.push_back(u);
  }
  const std::size_t musts = urls.size();
  urls.insert(urls.end(), maybe.begin(), maybe.end());
  auto answers = head_all(urls);
  for (std::size_t i = 0; i < musts; ++i) {
    if (answers[i].second) std::rethrow_exception(answers[i].second);
    learn(urls[i], answers[i].first->size, std::move(answers[i].first->etag));
  }
  std::vector<bool> out(maybe.size());
  for (std::size_t i = 0; i < maybe.size(); ++i) {
    auto& [info, error] = answers[musts + i];
    if (info) {
      learn(maybe[i], info->size, std::move(info->etag));
      out[i] = true;
      continue;
    }
    try {
      std::rethrow_exception(error);
    } catch (const RemoteError& e) {
      if (e.status() != 404 || e.details().server_code == "NoSuchBucket") throw;
    }
  }
  return out;
}

void RemoteSource::set_verify(const std::string& url,
                              std::function<void(int, std::uint64_t)> verify, std::string token) {
  Known& k = known_[url];
  k.verify = std::move(verify);
  k.verify_token = std::move(token);
}

std::shared_ptr<CacheHold> RemoteSource::acquire(const std::string& url, Need need,
                                                 const std::function<void()>& release_others,
                                                 std::uint64_t from) const {
  RemoteFile file;
  file.url = url;
  if (const auto it = known_.find(url); it != known_.end()) {
    file.size = it->second.size;
    file.etag = it->second.etag;
    file.verify = it->second.verify;
    file.verify_token = it->second.verify_token;
  }
  return ShardCache::process(options_)->acquire(file, need, counters_, release_others, from);
}

std::shared_ptr<CacheHold> RemoteSource::acquire_complete(const std::string& url) const {
  std::shared_ptr<CacheHold> hold = acquire(url, Need::kNow);
  hold->wait_for(hold->size());
  return hold;
}

std::optional<std::string> RemoteSource::read_small(const std::string& url, std::uint64_t max_bytes,
                                                    std::shared_ptr<CacheHold> started) const {
  std::shared_ptr<CacheHold> hold;
  try {
    if (started != nullptr) {
      hold = std::move(started);
      hold->wait_for(hold->size());
    } else {
      hold = acquire_complete(url);
    }
  } catch (const RemoteError& e) {
    if (e.status() == 404 && e.details().server_code != "NoSuchBucket") return std::nullopt;
    throw;
  }
  if (hold->size() > max_bytes) {
    throw Error(fmt::format("remote: {} is {}, more than the {} such a file may be; check the URL",
                            url, format_bytes(hold->size()), format_bytes(max_bytes)));
  }
  std::string text(hold->size(), '\0');
  if (posix::pread_full(hold->fd(), text.data(), text.size(), 0) !=
      static_cast<ssize_t>(text.size())) {
    throw Error(posix::errno_message(fmt::format("remote: cannot read the cached {}", url), errno));
  }
  return text;
}

std::string RemoteSource::entry_path(const std::string& url) const {
  return ShardCache::process(options_)->entry_path(url);
}

RemoteStats RemoteSource::stats() const noexcept { return counters_->snapshot(); }

std::size_t RemoteSource::download_buffer_bytes() const noexcept {
  return options_.parts_in_flight * 2 * kReceiveBuffer;
}

}  // namespace stoker::detail
