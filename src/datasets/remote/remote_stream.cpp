#include "datasets/remote/remote_stream.hpp"

#include <algorithm>
#include <cerrno>
#include <string>

#include <fmt/format.h>

#include "os/posix.hpp"
#include "stoker/errors.hpp"

namespace stoker::detail {
namespace {

// How much a read waits for at least (within the part it reads from): small reads of a tar
// header do not wait for one part after another's first bytes. A read that reaches the shard's
// end waits for the whole shard.
constexpr std::uint64_t kWaitChunk = 256 * 1024;

class RemoteStreamSource final : public StreamSource {
 public:
  RemoteStreamSource(std::shared_ptr<CacheHold> hold, std::uint64_t offset, std::string_view who)
      : hold_(std::move(hold)), pos_(std::min(offset, hold_->size())), who_(who) {}

  std::size_t read(std::span<std::byte> dst) override {
    const std::uint64_t size = hold_->size();
    if (pos_ >= size || dst.empty()) return 0;
    if (hold_->readable_from(pos_) <= pos_) {
      hold_->wait_from(pos_, pos_ + std::max<std::uint64_t>(dst.size(), kWaitChunk));
    }
    std::uint64_t ready = hold_->readable_from(pos_);
    if (ready == size && !hold_->complete()) {
      // The shard's last bytes once it is complete (verified, renamed): a reader that finishes
      // a shard leaves it published in the cache, and its bytes counted.
      hold_->wait_for(size);
      ready = size;
    }
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(dst.size(), ready - pos_));
    const ssize_t got = posix::pread_full(hold_->fd(), dst.data(), n, static_cast<off_t>(pos_));
    if (got < 0) {
      throw Error(posix::errno_message(
          fmt::format("{}: cannot read the cached copy of {} at byte {}", who_, hold_->url(), pos_),
          errno));
    }
    if (static_cast<std::size_t>(got) != n) {
      throw Error(fmt::format(
          "{}: the cached copy of {} ended at byte {}, before the {} bytes downloaded; something "
          "else changed the cache directory",
          who_, hold_->url(), pos_ + static_cast<std::uint64_t>(got), ready));
    }
    pos_ += n;
    return n;
  }

  std::uint64_t skip(std::uint64_t n) override {
    const std::uint64_t step = std::min(n, hold_->size() - pos_);
    pos_ += step;
    return step;
  }

 private:
  std::shared_ptr<CacheHold> hold_;
  std::uint64_t pos_;
  std::string who_;
};

}  // namespace

std::unique_ptr<StreamSource> remote_stream(std::shared_ptr<CacheHold> hold, std::uint64_t offset,
                                            std::string_view who) {
  return std::make_unique<RemoteStreamSource>(std::move(hold), offset, who);
}

}  // namespace stoker::detail
