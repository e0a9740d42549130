// loader.stats() beyond the basic counters: per-worker stage times, ring occupancy, memory,
// CPU, the recent window, collect_stats = false, the health log line and the Chrome trace.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "loader/stats_collector.hpp"
#include "os/nvml.hpp"
#include "support/captured_log.hpp"
#include "support/clean_state.hpp"
#include "support/datasets.hpp"

using namespace stoker;
using stoker::test::IndexDataset;

namespace {

// Burns `us` microseconds of CPU (sleeping would not count as busy for the CPU figures, but
// the stage times are wall time either way).
void spin_for(std::chrono::microseconds us) {
  const auto until = std::chrono::steady_clock::now() + us;
  while (std::chrono::steady_clock::now() < until) {
  }
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Points STOKER_NVML at `path` for one test, with the process's cached lookup forgotten before
// and after, so tests run in one process see their own library whatever ran before.
class NvmlFromEnv {
 public:
  explicit NvmlFromEnv(const char* path) {
    ::setenv("STOKER_NVML", path, 1);
    detail::reset_gpu_query();
  }
  ~NvmlFromEnv() {
    ::unsetenv("STOKER_NVML");
    detail::reset_gpu_query();
  }
  NvmlFromEnv(const NvmlFromEnv&) = delete;
  NvmlFromEnv& operator=(const NvmlFromEnv&) = delete;
};

}  // namespace

TEST_CASE("stats report each worker's batches, stage times, busy share and memory", "[stats]") {
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  opt.persistent_workers = true;  // so the workers are still there to be measured
  opt.prefetch_factor = 2;        // a fixed depth: ring_slots is 2 workers x 2
  DataLoader loader(IndexDataset{40, [](std::size_t) { spin_for(std::chrono::microseconds(500)); }},
                    opt);
  const auto started = std::chrono::steady_clock::now();
  for (const Batch& batch : loader) REQUIRE(batch.size() == 4);
  LoaderStats s = loader.stats();
  // The epoch's wall time is at most the test's: a lower bound for each busy share that holds
  // however loaded the machine is (a preempted epoch is longer, and its share smaller).
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  REQUIRE(s.epoch_seconds > 0);
  REQUIRE(s.epoch_seconds <= wall);
  REQUIRE(s.workers.size() == 2);
  const std::vector<pid_t> pids = loader.worker_pids();
  REQUIRE(pids.size() == 2);
  std::uint64_t batches = 0;
  std::uint64_t samples = 0;
  for (std::size_t i = 0; i < 2; ++i) {
    const WorkerStats& w = s.workers[i];
    CAPTURE(i, w.batches, w.get_seconds, w.collate_seconds, w.write_seconds, w.busy_fraction);
    REQUIRE(w.worker_id == i);
    REQUIRE(w.pid == pids[i]);
    batches += w.batches;
    samples += w.samples;
    // Each sample spins 0.5 ms inside get(). Only lower bounds are checked: on a loaded
    // machine a preemption can land in any stage, so no stage has a reliable upper bound.
    REQUIRE(w.get_seconds >= 0.9 * 0.0005 * static_cast<double>(w.samples));
    REQUIRE(w.collate_seconds > 0);
    // (get + collate + write) over the epoch: with the get() bound above and the epoch no
    // longer than the test's wall time, at least the spins over that wall time.
    REQUIRE(w.busy_fraction ==
            Approx(std::min(
                1.0, (w.get_seconds + w.collate_seconds + w.write_seconds) / s.epoch_seconds)));
    REQUIRE(w.busy_fraction <= 1.0);
    REQUIRE(w.rss_bytes > 0);
    REQUIRE(w.pss_bytes > 0);
  }
  REQUIRE(batches == 10);
  REQUIRE(samples == 40);
  REQUIRE(s.ring_slots == 4);
  REQUIRE(s.ring_bytes > 0);
  REQUIRE(s.main_rss_bytes > 0);
  REQUIRE(s.main_pss_bytes > 0);
  REQUIRE(s.tree_pss_bytes() > s.main_pss_bytes);
  REQUIRE(s.logical_cpus >= 1);
  REQUIRE(s.cpu_busy_fraction.has_value());
  REQUIRE(*s.cpu_busy_fraction >= 0.0);
  REQUIRE(*s.cpu_busy_fraction <= 1.0);
  REQUIRE(s.iowait_fraction.has_value());
  // Data-bound: the consumer does nothing, so batches are rarely waiting when it asks.
  REQUIRE(s.ring_occupancy < 0.5);

  // The batches the workers loaded ahead for epoch 1 count in epoch 1's figures.
  for (const Batch& batch : loader) REQUIRE(batch.size() == 4);
  s = loader.stats();
  REQUIRE(s.epoch == 1);
  REQUIRE(s.workers[0].batches + s.workers[1].batches == 10);
  REQUIRE(s.workers[0].samples + s.workers[1].samples == 40);
}

TEST_CASE("time spent in get() and in a user collate goes to the right stage", "[stats]") {
  // get() spins 1 ms per sample (4 ms per batch), the collate 1 ms per batch. Lower bounds on
  // both catch time counted in the wrong stage (swapped, the get() bound fails) without an
  // upper bound that a preempted worker could cross.
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 1;
  opt.persistent_workers = true;
  opt.collate = [](std::span<const Sample> samples, BatchBuilder& out) {
    spin_for(std::chrono::microseconds(1000));
    collate_stack(samples, out);
  };
  DataLoader loader(
      IndexDataset{24, [](std::size_t) { spin_for(std::chrono::microseconds(1000)); }}, opt);
  for (const Batch& batch : loader) REQUIRE(batch.size() == 4);
  const LoaderStats s = loader.stats();
  REQUIRE(s.workers.size() == 1);
  const WorkerStats& w = s.workers[0];
  CAPTURE(w.batches, w.get_seconds, w.collate_seconds, w.write_seconds);
  REQUIRE(w.batches == 6);
  REQUIRE(w.get_seconds >= 0.9 * 0.004 * 6);
  REQUIRE(w.collate_seconds >= 0.9 * 0.001 * 6);
}

TEST_CASE("stage times of tiny samples are estimated from one batch in several", "[stats]") {
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.num_workers = 1;
  opt.persistent_workers = true;
  DataLoader loader(IndexDataset{8 * 200, {}}, opt);
  for (const Batch& batch : loader) REQUIRE(batch.size() == 8);
  const LoaderStats s = loader.stats();
  REQUIRE(s.workers.size() == 1);
  const WorkerStats& w = s.workers[0];
  REQUIRE(w.batches == 200);
  REQUIRE(w.samples == 1600);
  CAPTURE(w.get_seconds, w.collate_seconds, w.write_seconds);
  REQUIRE(w.get_seconds > 0);
  REQUIRE(w.collate_seconds > 0);
  const double busy = w.get_seconds + w.collate_seconds + w.write_seconds;
  REQUIRE(busy > 0);
  REQUIRE(w.busy_fraction == Approx(busy / s.epoch_seconds).epsilon(0.01));
}

TEST_CASE("ring occupancy is high when the consumer is the slow side", "[stats]") {
  LoaderOptions opt;
  opt.batch_size = 2;
  opt.num_workers = 2;
  DataLoader loader(IndexDataset{40, {}}, opt);
  // 20 ms of "training" a batch, 400 ms in all: the wait for batch 0 (the forks: tens of ms
  // under a sanitizer on a loaded machine) stays a small part of the epoch.
  for (const Batch& batch : loader) {
    REQUIRE(batch.size() == 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const LoaderStats s = loader.stats();
  CAPTURE(s.ring_occupancy, s.wait_fraction());
  REQUIRE(s.ring_occupancy > 0.5);
  REQUIRE(s.wait_fraction() < 0.5);
  // Non-persistent workers are gone after the epoch: their figures stay, their pid is 0.
  REQUIRE(s.workers.size() == 2);
  REQUIRE(s.workers[0].pid == 0);
  REQUIRE(s.workers[0].batches + s.workers[1].batches == 20);
}

TEST_CASE("the recent window measures the last seconds' throughput", "[stats]") {
  LoaderOptions opt;
  opt.batch_size = 1;
  opt.num_workers = 1;
  DataLoader loader(IndexDataset{60, {}}, opt);
  for (const Batch& batch : loader) {
    REQUIRE(batch.size() == 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // ~100 samples/s
  }
  const LoaderStats s = loader.stats();
  CAPTURE(s.recent_samples_per_second, s.samples_per_second());
  REQUIRE(s.recent_samples_per_second > 30);
  REQUIRE(s.recent_samples_per_second < 150);
  REQUIRE(s.recent_bytes_per_second ==
          Approx(s.recent_samples_per_second * (8 + 16)).epsilon(0.01));
}

TEST_CASE("collect_stats = false keeps only the basic counters", "[stats]") {
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  opt.collect_stats = false;
  DataLoader loader(IndexDataset{40, {}}, opt);
  for (const Batch& batch : loader) REQUIRE(batch.size() == 4);
  const LoaderStats s = loader.stats();
  REQUIRE(s.batches == 10);
  REQUIRE(s.samples == 40);
  REQUIRE(s.ring_occupancy == 0);
  REQUIRE(s.recent_samples_per_second == 0);
  REQUIRE(s.workers.size() == 2);
  REQUIRE(s.workers[0].batches == 0);
  REQUIRE(!s.cpu_busy_fraction.has_value());
}

TEST_CASE("in-process loading (num_workers = 0) lists no workers", "[stats]") {
  LoaderOptions opt;
  opt.batch_size = 4;
  DataLoader loader(IndexDataset{40, {}}, opt);
  for (const Batch& batch : loader) REQUIRE(batch.size() == 4);
  const LoaderStats s = loader.stats();
  REQUIRE(s.workers.empty());
  REQUIRE(s.batches == 10);
  REQUIRE(s.ring_slots == 2);
  REQUIRE(s.main_pss_bytes > 0);
}

TEST_CASE("/proc/stat's cpu line is parsed into busy, idle and iowait ticks", "[stats]") {
  const auto t = detail::parse_cpu_times("cpu  100 5 50 800 40 3 2 0 7 0\ncpu0 1 2 3 4 5\n");
  REQUIRE(t.has_value());
  REQUIRE(t->total == 100 + 5 + 50 + 800 + 40 + 3 + 2 + 0);  // guest time is inside user
  REQUIRE(t->idle == 800);
  REQUIRE(t->iowait == 40);
  REQUIRE(!detail::parse_cpu_times("intr 1 2 3").has_value());
  REQUIRE(!detail::parse_cpu_times("cpu  1 2").has_value());
}

TEST_CASE("a health line is logged at info level every log_interval", "[stats]") {
  std::string out;
  {
    const test::CapturedLog log(spdlog::level::info);
    LoaderOptions opt;
    opt.batch_size = 2;
    opt.num_workers = 1;
    opt.log_interval = std::chrono::milliseconds(20);
    DataLoader loader(IndexDataset{30, {}}, opt);
    for (const Batch& batch : loader) {
      REQUIRE(batch.size() == 2);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    out = log.text();
  }
  CAPTURE(out);
  REQUIRE(test::count_of(out, "samples/s") >= 2);
  REQUIRE(test::count_of(out, "consumer waited") >= 2);
  REQUIRE(test::count_of(out, "workers") >= 2);
}

TEST_CASE("no health line below info level, or with log_interval = 0", "[stats]") {
  const test::CapturedLog log(spdlog::level::info);
  {
    LoaderOptions opt;
    opt.batch_size = 2;
    opt.num_workers = 1;
    opt.log_interval = std::chrono::milliseconds(0);
    DataLoader loader(IndexDataset{20, {}}, opt);
    for (const Batch& batch : loader) {
      REQUIRE(batch.size() == 2);
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
  }
  detail::logger().set_level(spdlog::level::warn);
  {
    LoaderOptions opt;
    opt.batch_size = 2;
    opt.num_workers = 1;
    opt.log_interval = std::chrono::milliseconds(1);
    DataLoader loader(IndexDataset{20, {}}, opt);
    for (const Batch& batch : loader) {
      REQUIRE(batch.size() == 2);
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
  }
  REQUIRE(log.text().find("samples/s") == std::string::npos);
}

TEST_CASE("a negative log_interval is refused", "[stats]") {
  LoaderOptions opt;
  opt.log_interval = std::chrono::milliseconds(-1);
  REQUIRE_THROWS_WITH(DataLoader(IndexDataset{4, {}}, opt),
                      Catch::Contains("log_interval") && Catch::Contains(">= 0"));
}

TEST_CASE("trace_path writes a Chrome trace with a span per batch per worker", "[stats]") {
  const std::string path = "/tmp/stoker-trace-test-" + std::to_string(::getpid()) + ".json";
  std::vector<pid_t> pids;
  std::size_t ring_slots = 0;
  {
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = 2;
    opt.persistent_workers = true;
    opt.trace_path = path;
    DataLoader loader(IndexDataset{40, {}}, opt);
    for (const Batch& batch : loader) REQUIRE(batch.size() == 4);
    pids = loader.worker_pids();
    ring_slots = loader.stats().ring_slots;
  }
  const std::string trace = read_all(path);
  std::remove(path.c_str());
  REQUIRE(trace.rfind("[\n{\"name\":\"process_name\"", 0) == 0);
  REQUIRE(trace.size() > 3);
  REQUIRE(trace.substr(trace.size() - 3) == "\n]\n");
  // Persistent workers go on to load some of epoch 1 ahead, at most a batch a ring slot (the
  // more, the longer the loader takes to stop: a loaded machine): those are spans of epoch 1.
  // The fresh iterator's batch 0 is loaded in two parts, one by each worker: a span each (or
  // whole by worker 0 when this process forks slowly: after_first_fork).
  const std::size_t epoch0_spans = test::count_of(trace, "\"args\":{\"epoch\":0,\"worker\"");
  REQUIRE(epoch0_spans >= 10);
  REQUIRE(epoch0_spans <= 10 + 1);
  CAPTURE(ring_slots);
  REQUIRE(ring_slots >= 4);
  REQUIRE(test::count_of(trace, "\"cat\":\"load\"") <= 10 + 1 + ring_slots);
  REQUIRE(test::count_of(trace, "\"name\":\"next() wait\"") == 10);
  for (int k = 0; k < 10; ++k) {  // each wait names the batch it returned
    REQUIRE(trace.find("\"batch\":" + std::to_string(k) + "}") != std::string::npos);
  }
  REQUIRE(test::count_of(trace, "\"name\":\"ready batches\"") >= 10);
  REQUIRE(pids.size() == 2);
  for (const pid_t pid : pids) {
    REQUIRE(trace.find("\"pid\":" + std::to_string(pid) + ",\"tid\"") != std::string::npos);
    REQUIRE(trace.find("(pid " + std::to_string(pid) + ")") != std::string::npos);
  }
  // Balanced braces and brackets: every event object is closed.
  REQUIRE(test::count_of(trace, "{") == test::count_of(trace, "}"));
  REQUIRE(test::count_of(trace, "[") == test::count_of(trace, "]"));
}

TEST_CASE("STOKER_TRACE names the trace file when the option is empty", "[stats]") {
  const std::string path = "/tmp/stoker-trace-env-" + std::to_string(::getpid()) + ".json";
  ::setenv("STOKER_TRACE", path.c_str(), 1);
  {
    LoaderOptions opt;
    opt.batch_size = 5;
    DataLoader loader(IndexDataset{20, {}}, opt);
    for (const Batch& batch : loader) REQUIRE(batch.size() == 5);
  }
  ::unsetenv("STOKER_TRACE");
  const std::string trace = read_all(path);
  std::remove(path.c_str());
  REQUIRE(test::count_of(trace, "\"cat\":\"load\"") == 4);  // in-process loads are traced too
}

TEST_CASE("an unwritable trace path is a warning, not an error", "[stats]") {
  const test::CapturedLog log;
  {
    LoaderOptions opt;
    opt.batch_size = 5;
    opt.trace_path = "/nonexistent-dir/trace.json";
    DataLoader loader(IndexDataset{10, {}}, opt);
    for (const Batch& batch : loader) REQUIRE(batch.size() == 5);
  }
  REQUIRE(log.text().find("cannot write the trace to /nonexistent-dir/trace.json") !=
          std::string::npos);
}

TEST_CASE("stats carry the GPU's figures when the management library is found", "[stats]") {
  // The library is looked up once per process: forget an earlier test's lookup.
  const NvmlFromEnv nvml(STOKER_FAKE_NVML);
  LoaderOptions opt;
  opt.batch_size = 5;
  opt.num_workers = 1;
  DataLoader loader(IndexDataset{20, {}}, opt);
  for (const Batch& batch : loader) REQUIRE(batch.size() == 5);
  const LoaderStats s = loader.stats();
  REQUIRE(s.gpu.has_value());
  REQUIRE(s.gpu->device == 0);
  REQUIRE(s.gpu->utilization == Approx(0.45));
  REQUIRE(s.gpu->memory_used == 20ULL << 30);
  REQUIRE(s.gpu->memory_total == 80ULL << 30);
}

TEST_CASE("stats have no GPU figures without the management library", "[stats]") {
  const NvmlFromEnv nvml("/nonexistent/libnvidia-ml.so.1");
  LoaderOptions opt;
  opt.batch_size = 5;
  DataLoader loader(IndexDataset{10, {}}, opt);
  for (const Batch& batch : loader) REQUIRE(batch.size() == 5);
  REQUIRE(!loader.stats().gpu.has_value());
}

TEST_CASE("loaders tracing to one path share the file, which stays valid JSON", "[stats]") {
  const std::string path = "/tmp/stoker-trace-two-" + std::to_string(::getpid()) + ".json";
  for (int round = 0; round < 2; ++round) {
    LoaderOptions opt;
    opt.batch_size = 5;
    opt.trace_path = path;
    DataLoader loader(IndexDataset{20, {}}, opt);
    for (const Batch& batch : loader) REQUIRE(batch.size() == 5);
  }
  const std::string trace = read_all(path);
  std::remove(path.c_str());
  REQUIRE(test::count_of(trace, "\"cat\":\"load\"") == 8);  // 4 batches from each loader
  REQUIRE(test::count_of(trace, "[") == 1);
  REQUIRE(test::count_of(trace, "]") == 1);
  REQUIRE(trace.substr(trace.size() - 3) == "\n]\n");
  REQUIRE(test::count_of(trace, "{") == test::count_of(trace, "}"));
  REQUIRE(trace.find(",\n,") == std::string::npos);
}

TEST_CASE("under a launcher each rank traces to its own file", "[stats]") {
  REQUIRE(detail::trace_path_for("/tmp/t.json", std::nullopt) == "/tmp/t.json");
  REQUIRE(detail::trace_path_for("/tmp/t.json", 3) == "/tmp/t.rank3.json");
  REQUIRE(detail::trace_path_for("/tmp/dir.d/trace", 1) == "/tmp/dir.d/trace.rank1");
  ::setenv("STOKER_TRACE", "/tmp/env.json", 1);
  REQUIRE(detail::trace_path_for("", 0) == "/tmp/env.rank0.json");
  REQUIRE(detail::trace_path_for("/tmp/option.json", std::nullopt) == "/tmp/option.json");
  ::unsetenv("STOKER_TRACE");
  REQUIRE(detail::trace_path_for("", std::nullopt).empty());
}
