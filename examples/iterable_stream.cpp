// An iterable dataset: a stream with next() (nullopt at its end) instead of size() and get(i),
// for data read front to back (a log, a socket, a compressed archive). Every worker runs its own
// copy of the stream, so the dataset shards it with iterable_shard(): item k belongs to shard
// k % count. start_epoch() rewinds the stream at each epoch. Batches come from the workers in
// turn (batch k from worker k % 2) until every stream has ended.
#include <cstdio>
#include <optional>
#include <vector>

#include <stoker/stoker.hpp>

#include "cli.hpp"

namespace {

struct Records {
  std::size_t n = 1000;
  std::size_t position = 0;

  void start_epoch(std::uint64_t /*epoch*/) { position = 0; }  // in each worker, per epoch
  std::optional<stoker::Sample> next() {
    const stoker::IterableShard shard = stoker::iterable_shard();  // worker id of num_workers
    while (position < n && !shard.owns(position)) ++position;      // skip the other shards' items
    if (position >= n) return std::nullopt;
    const stoker::WorkerInfo* info = stoker::worker_info();
    stoker::Sample s;
    s.set("record", stoker::Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(position++)));
    s.set("worker", stoker::Tensor::scalar<std::int64_t>(
                        info == nullptr ? -1 : static_cast<std::int64_t>(info->id)));
    return s;
  }
};

}  // namespace

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: iterable_stream\n  an iterable dataset sharded across two workers.\n  "
                   "It takes no arguments.");
  cli.done();
  stoker::LoaderOptions opt;
  opt.batch_size = 64;
  opt.num_workers = 2;  // shuffle and samplers do not apply: a stream has no indices
  stoker::DataLoader loader(Records{}, opt);
  bool ok = true;
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    std::vector<int> seen(1000, 0);
    std::size_t per_worker[2] = {0, 0};
    std::size_t batches = 0;
    for (const stoker::Batch& batch : loader) {
      const std::int64_t* record = batch["record"].data<std::int64_t>();
      const std::int64_t* worker = batch["worker"].data<std::int64_t>();
      for (std::size_t r = 0; r < batch.size(); ++r) {
        ++seen[static_cast<std::size_t>(record[r])];
        ok = ok && worker[r] >= 0 && worker[r] < 2 && record[r] % 2 == worker[r];
        ++per_worker[worker[r] == 1 ? 1 : 0];
      }
      ++batches;
    }
    std::size_t once = 0;
    for (const int count : seen) once += count == 1 ? 1 : 0;
    std::printf(
        "epoch %llu: %zu batches; worker 0 produced %zu records, worker 1 %zu; %zu of "
        "1000 records seen exactly once\n",
        static_cast<unsigned long long>(epoch), batches, per_worker[0], per_worker[1], once);
    ok = ok && once == 1000 && per_worker[0] == 500 && per_worker[1] == 500;
  }
  return ok ? 0 : 1;
}
