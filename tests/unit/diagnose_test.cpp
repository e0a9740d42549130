// diagnose() on synthetic LoaderStats and SystemInfo: each verdict, its text and suggested
// settings, and which verdict wins when several symptoms show at once.
#include <algorithm>

#include <catch2/catch.hpp>

#include "stoker/fmt.hpp"

#include "stoker/diagnose.hpp"

using namespace stoker;

namespace {

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

// An epoch of 10 s: 100 batches of 64 samples, `wait` of it spent waiting, on 8 cores with
// `workers` workers each `busy` busy and the machine `cpu_busy` busy.
LoaderStats epoch(double wait, std::size_t workers, double busy, double cpu_busy) {
  LoaderStats s;
  s.batches = 100;
  s.samples = 6400;
  s.bytes = 6400 * 150528;
  s.epoch_seconds = 10;
  s.wait_seconds = wait * 10;
  s.logical_cpus = 8;
  s.ring_slots = 2 * workers;
  s.ring_occupancy = 0.1;
  for (std::size_t i = 0; i < workers; ++i) {
    WorkerStats w;
    w.worker_id = i;
    w.busy_fraction = busy;
    w.get_seconds = busy * 10 * 0.8;
    w.collate_seconds = busy * 10 * 0.15;
    w.write_seconds = busy * 10 * 0.05;
    w.pss_bytes = 200 << 20;
    s.workers.push_back(w);
  }
  s.cpu_busy_fraction = cpu_busy;
  s.iowait_fraction = 0.01;
  s.main_pss_bytes = 300 << 20;
  return s;
}

// A machine with memory to spare.
SystemInfo roomy() {
  SystemInfo s;
  s.mem_total.value = 64 * kGiB;
  s.mem_available.value = 48 * kGiB;
  s.logical_cpus.value = 8;
  s.physical_cores.value = 4;
  return s;
}

// A machine whose memory cgroup is 91% full: 7.28 GiB of 8 GiB.
SystemInfo cgroup_nearly_full() {
  SystemInfo s = roomy();
  s.cgroup_limit.value = 8 * kGiB;
  s.cgroup_usage.value = static_cast<std::uint64_t>(0.91 * 8 * static_cast<double>(kGiB));
  return s;
}

}  // namespace

TEST_CASE("diagnose: data-bound names the waiting, the busy workers and the idle core",
          "[diagnose]") {
  const Diagnosis d = diagnose(epoch(0.41, 6, 0.98, 7.0 / 8.0), roomy());
  CHECK(d.verdict == Verdict::kDataBound);
  CHECK(d.summary ==
        "data-bound: the consumer waited 41% of the time; workers are 98% busy and 1 of 8 cores "
        "is idle → num_workers=7");
  CHECK(d.suggested_num_workers == std::optional<std::size_t>(7));
  CHECK(d.advice.find("num_workers=7") != std::string::npos);
  CHECK(fmt::format("{}", d.verdict) == "data-bound");
}

TEST_CASE("diagnose: data-bound with num_workers=0 suggests workers", "[diagnose]") {
  const Diagnosis d = diagnose(epoch(0.6, 0, 0, 0.2), roomy());
  CHECK(d.verdict == Verdict::kDataBound);
  CHECK(d.summary ==
        "data-bound: the consumer waited 60% of the time loading in its own thread "
        "(num_workers=0) and 6 of 8 cores are idle → num_workers=6");
  CHECK(d.suggested_num_workers == std::optional<std::size_t>(6));
}

TEST_CASE("diagnose: data-bound with idle workers points at the hand-off, not the count",
          "[diagnose]") {
  const Diagnosis d = diagnose(epoch(0.3, 4, 0.4, 0.3), roomy());
  CHECK(d.verdict == Verdict::kDataBound);
  CHECK(d.summary.find("workers are only 40% busy") != std::string::npos);
  CHECK(d.advice.find("prefetch_factor") != std::string::npos);
  CHECK_FALSE(d.suggested_num_workers.has_value());
}

TEST_CASE("diagnose: every core busy is cpu-saturated, with fewer workers", "[diagnose]") {
  const Diagnosis d = diagnose(epoch(0.41, 12, 0.7, 0.97), roomy());
  CHECK(d.verdict == Verdict::kCpuSaturated);
  CHECK(d.summary ==
        "cpu-saturated: the consumer waited 41% of the time and the CPUs are 97% busy (8 cores) "
        "→ num_workers=8");
  CHECK(d.suggested_num_workers == std::optional<std::size_t>(8));
  CHECK(d.advice.find("More workers cannot help") != std::string::npos);
  // As many workers as cores: nothing to take away, only the work per sample to cut.
  const Diagnosis at_cores = diagnose(epoch(0.41, 8, 0.99, 0.97), roomy());
  CHECK(at_cores.verdict == Verdict::kCpuSaturated);
  CHECK_FALSE(at_cores.suggested_num_workers.has_value());
  CHECK(at_cores.advice.rfind("More workers cannot help", 0) == 0);
}

TEST_CASE("diagnose: without /proc/stat figures the workers' busy time estimates the CPUs",
          "[diagnose]") {
  LoaderStats s = epoch(0.5, 3, 1.0, 0);
  s.cpu_busy_fraction.reset();
  s.iowait_fraction.reset();
  s.logical_cpus = 2;
  const Diagnosis d = diagnose(s, roomy());
  CHECK(d.verdict == Verdict::kCpuSaturated);
  CHECK(d.summary.find("the CPUs are about 100% busy (2 cores) → num_workers=2") !=
        std::string::npos);
}

TEST_CASE("diagnose: high iowait while waiting is storage-bound", "[diagnose]") {
  LoaderStats s = epoch(0.41, 4, 0.9, 0.5);
  s.iowait_fraction = 0.35;
  SystemInfo sys = roomy();
  sys.rotational.value = true;
  const Diagnosis d = diagnose(s, sys);
  CHECK(d.verdict == Verdict::kStorageBound);
  CHECK(d.summary == "storage-bound: iowait 35% while the consumer waited 41% of the time");
  CHECK(d.advice.find("rotational disk") != std::string::npos);
}

TEST_CASE("diagnose: memory near the cgroup limit is memory pressure", "[diagnose]") {
  const Diagnosis d = diagnose(epoch(0.01, 4, 0.5, 0.5), cgroup_nearly_full());
  CHECK(d.verdict == Verdict::kMemoryPressure);
  CHECK(d.summary ==
        "memory: 91% of the cgroup limit (7.3 GiB of 8.0 GiB) → num_workers=3 or batch_size=32");
  CHECK(d.suggested_num_workers == std::optional<std::size_t>(3));
  CHECK(d.suggested_batch_size == std::optional<std::size_t>(32));
}

TEST_CASE("diagnose: without a cgroup limit, the machine's MemAvailable counts", "[diagnose]") {
  SystemInfo sys = roomy();
  sys.mem_available.value = 2 * kGiB;  // 62 of 64 GiB used
  const Diagnosis d = diagnose(epoch(0.41, 1, 0.9, 0.5), sys);
  CHECK(d.verdict == Verdict::kMemoryPressure);
  CHECK(d.summary == "memory: 97% of the machine's memory (62.0 GiB of 64.0 GiB) → batch_size=32");
}

TEST_CASE("diagnose: memory pressure beats data-bound, cpu-saturated and storage-bound",
          "[diagnose][precedence]") {
  LoaderStats s = epoch(0.41, 8, 0.99, 0.97);
  s.iowait_fraction = 0.35;
  CHECK(diagnose(s, roomy()).verdict == Verdict::kStorageBound);
  CHECK(diagnose(s, cgroup_nearly_full()).verdict == Verdict::kMemoryPressure);
  CHECK(diagnose(epoch(0.41, 6, 0.98, 0.875), cgroup_nearly_full()).verdict ==
        Verdict::kMemoryPressure);
}

TEST_CASE("diagnose: storage-bound beats cpu-saturated", "[diagnose][precedence]") {
  LoaderStats s = epoch(0.41, 8, 0.99, 0.97);
  s.iowait_fraction = 0.25;
  CHECK(diagnose(s, roomy()).verdict == Verdict::kStorageBound);
}

TEST_CASE("diagnose: a consumer that hardly waits is compute-bound", "[diagnose]") {
  const Diagnosis d = diagnose(epoch(0.0004, 2, 0.9, 0.5), roomy());
  CHECK(d.verdict == Verdict::kComputeBound);
  CHECK(d.summary ==
        "compute-bound: input is not the bottleneck (the consumer waited 0% of the time, 40.0 us "
        "per batch)");
  CHECK_FALSE(d.suggested_num_workers.has_value());
}

TEST_CASE("diagnose: compute-bound with idle workers suggests fewer", "[diagnose]") {
  const Diagnosis d = diagnose(epoch(0.01, 8, 0.2, 0.4), roomy());
  CHECK(d.verdict == Verdict::kComputeBound);
  CHECK(d.suggested_num_workers == std::optional<std::size_t>(2));
  CHECK(d.summary.find("workers are only 20% busy → num_workers=2 would do") != std::string::npos);
}

TEST_CASE("diagnose: compute-bound beats high iowait and busy CPUs", "[diagnose][precedence]") {
  LoaderStats s = epoch(0.01, 8, 0.99, 0.99);
  s.iowait_fraction = 0.5;
  CHECK(diagnose(s, roomy()).verdict == Verdict::kComputeBound);
}

TEST_CASE("diagnose: an idle GPU while the consumer waits is gpu-starved", "[diagnose]") {
  LoaderStats s = epoch(0.41, 6, 0.98, 7.0 / 8.0);
  s.gpu = GpuStats{0, 0.45, 20 * kGiB, 80 * kGiB};
  const Diagnosis d = diagnose(s, roomy());
  CHECK(d.verdict == Verdict::kGpuStarved);
  CHECK(d.summary ==
        "gpu-starved: GPU 0 busy 45% while the consumer waits for data; the consumer waited 41% "
        "of the time; workers are 98% busy and 1 of 8 cores is idle → num_workers=7");
  CHECK(d.suggested_num_workers == std::optional<std::size_t>(7));
}

TEST_CASE("diagnose: a busy GPU leaves the verdict to the data path", "[diagnose][precedence]") {
  LoaderStats s = epoch(0.41, 6, 0.98, 7.0 / 8.0);
  s.gpu = GpuStats{0, 0.95, 20 * kGiB, 80 * kGiB};
  CHECK(diagnose(s, roomy()).verdict == Verdict::kDataBound);
  s.gpu->utilization = 0.3;
  s.iowait_fraction = 0.4;
  const Diagnosis d = diagnose(s, roomy());
  CHECK(d.verdict == Verdict::kStorageBound);
  CHECK(std::find(d.findings.begin(), d.findings.end(),
                  "GPU 0: busy 30%, memory 20.0 GiB of 80.0 GiB") != d.findings.end());
}

TEST_CASE("diagnose: no batch yet is unknown", "[diagnose]") {
  const Diagnosis d = diagnose(LoaderStats{}, roomy());
  CHECK(d.verdict == Verdict::kUnknown);
  CHECK(d.summary.rfind("unknown:", 0) == 0);
  CHECK(diagnose(LoaderStats{}, cgroup_nearly_full()).verdict == Verdict::kMemoryPressure);
}

TEST_CASE("diagnose: thresholds move the verdict", "[diagnose]") {
  const LoaderStats s = epoch(0.08, 2, 0.9, 0.5);
  CHECK(diagnose(s, roomy()).verdict == Verdict::kDataBound);
  DiagnoseThresholds lenient;
  lenient.wait_fraction = 0.1;
  CHECK(diagnose(s, roomy(), lenient).verdict == Verdict::kComputeBound);
}

TEST_CASE("diagnose: the report lists the figures it read", "[diagnose]") {
  const Diagnosis d = diagnose(epoch(0.41, 6, 0.98, 7.0 / 8.0), roomy());
  const std::string text = fmt::format("{}", d);
  CHECK(text.rfind(d.summary, 0) == 0);
  CHECK(text.find("\n  advice: ") != std::string::npos);
  CHECK(text.find("\n  - throughput: 640 samples/s") != std::string::npos);
  CHECK(text.find("\n  - consumer waited 41% of the time (41.0 ms per batch)") !=
        std::string::npos);
  CHECK(text.find("\n  - workers: 6, 98% busy on average (get 80%, collate 15%, write 5%)") !=
        std::string::npos);
  CHECK(text.find("\n  - CPUs: 88% busy, 1% in iowait (8 cores usable)") != std::string::npos);
  CHECK(text.find("\n  - loader processes: 1.5 GiB PSS") != std::string::npos);
}

TEST_CASE("diagnose: every verdict has a name", "[diagnose]") {
  CHECK(to_string(Verdict::kUnknown) == "unknown");
  CHECK(to_string(Verdict::kMemoryPressure) == "memory-pressure");
  CHECK(to_string(Verdict::kComputeBound) == "compute-bound");
  CHECK(to_string(Verdict::kNetworkBound) == "network-bound");
  CHECK(to_string(Verdict::kStorageBound) == "storage-bound");
  CHECK(to_string(Verdict::kCpuSaturated) == "cpu-saturated");
  CHECK(to_string(Verdict::kGpuStarved) == "gpu-starved");
  CHECK(to_string(Verdict::kDataBound) == "data-bound");
}

TEST_CASE("diagnose(stats) probes this machine itself", "[diagnose]") {
  const Diagnosis d = diagnose(epoch(0.41, 1, 0.98, 0.3));
  CHECK_FALSE(d.summary.empty());
  CHECK(d.verdict != Verdict::kUnknown);
}

namespace {

// The bubbles of a shallow prefetch: 2 workers 70% busy, each blocked on full slots 25% of the
// 10 s epoch, while the consumer waited 30% of it (2 cores, 80% busy).
LoaderStats bubbles(bool adaptive, std::size_t depth, std::size_t limit, bool at_limit) {
  LoaderStats s = epoch(0.30, 2, 0.7, 0.8);
  s.logical_cpus = 2;
  for (WorkerStats& w : s.workers) w.blocked_seconds = 2.5;
  s.prefetch_adaptive = adaptive;
  s.prefetch_depth = depth;
  s.prefetch_depth_limit = limit;
  s.prefetch_at_limit = at_limit;
  return s;
}

SystemInfo two_cores() {
  SystemInfo s = roomy();
  s.logical_cpus.value = 2;
  s.physical_cores.value = 2;
  return s;
}

}  // namespace

TEST_CASE("diagnose: workers blocked on full slots at a fixed prefetch_factor: raise it",
          "[diagnose]") {
  const Diagnosis d = diagnose(bubbles(false, 2, 2, false), two_cores());
  CHECK(d.verdict == Verdict::kDataBound);
  CHECK_THAT(d.summary, Catch::StartsWith("data-bound: workers blocked on full slots 25% of the "
                                          "time while the consumer waited 30%"));
  CHECK_THAT(d.advice, Catch::Contains("prefetch_factor=2") &&
                           Catch::Contains("raise prefetch_factor") &&
                           Catch::Contains("kAdaptivePrefetch"));
  CHECK_THAT(to_string(d), Catch::Contains("prefetch depth: 2 batches per worker (prefetch_factor, "
                                           "fixed); workers blocked on full slots 25% of the "
                                           "time"));
}

TEST_CASE("diagnose: the adaptive depth at its memory limit says so", "[diagnose]") {
  const Diagnosis d = diagnose(bubbles(true, 3, 3, true), two_cores());
  CHECK(d.verdict == Verdict::kDataBound);
  CHECK_THAT(d.advice, Catch::Contains("adaptive prefetch depth reached its memory limit (3 "
                                       "batches per worker)") &&
                           Catch::Contains("memory_limit"));
  CHECK_THAT(to_string(d), Catch::Contains("adaptive, at most 3 within the memory limit"));
}

TEST_CASE("diagnose: an adaptive depth below its limit is still rising", "[diagnose]") {
  const Diagnosis d = diagnose(bubbles(true, 4, 8, false), two_cores());
  CHECK_THAT(d.advice, Catch::Contains("is 4 of at most 8 and still rising"));
}

TEST_CASE("diagnose: workers hardly blocked keep the other data-bound advice", "[diagnose]") {
  LoaderStats s = bubbles(false, 2, 2, false);
  for (WorkerStats& w : s.workers) w.blocked_seconds = 0.1;  // 1%: below the threshold
  const Diagnosis d = diagnose(s, two_cores());
  CHECK_THAT(d.summary, !Catch::Contains("blocked on full slots"));
}

namespace {

// Remote shards: an epoch whose workers (each 40% busy, so cores to spare) spent `waited` s of
// their get() time blocked on downloads.
LoaderStats remote_epoch(double waited) {
  LoaderStats s = epoch(0.6, 4, 0.4, 0.3);
  s.remote = true;
  s.remote_bytes_fetched = 800u << 20;
  s.remote_requests = 120;
  s.remote_retries = 3;
  s.remote_cache_misses = 12;
  s.remote_wait_seconds = waited;
  s.remote_download_seconds = 8;
  return s;
}

}  // namespace

TEST_CASE("diagnose: readers waiting on downloads is network-bound, and names read-ahead",
          "[diagnose][remote]") {
  // 4 workers x 3.2 s of get(); 6 s of it waiting on the network.
  const Diagnosis d = diagnose(remote_epoch(6), roomy());
  CHECK(d.verdict == Verdict::kNetworkBound);
  CHECK(d.summary ==
        "network-bound: the consumer waited 60% of the time, and the readers spent 47% of their "
        "loading time waiting for remote shards (800.0 MiB fetched, 100.0 MiB/s per download)");
  CHECK(d.advice.find("more workers would not help") != std::string::npos);
  CHECK(d.advice.find("raise RemoteOptions::read_ahead_shards") != std::string::npos);
  CHECK(d.advice.find("parts_in_flight") != std::string::npos);
  CHECK(d.advice.find("why 3 requests had to be retried") != std::string::npos);
  CHECK_FALSE(d.suggested_num_workers.has_value());
  const std::string text = to_string(d);
  CHECK(text.find("remote shards: 800.0 MiB fetched in 120 requests (3 retries), 0 shards from "
                  "the cache, 12 downloaded; readers waited 6.00 s for downloads") !=
        std::string::npos);
}

TEST_CASE("diagnose: a little waiting on downloads leaves the verdict to the rest",
          "[diagnose][remote][precedence]") {
  // 1 s of 12.8 s: below network_fraction (25%): data-bound, with more workers.
  const Diagnosis d = diagnose(remote_epoch(1), roomy());
  CHECK(d.verdict == Verdict::kDataBound);
  // Compute-bound wins: the consumer hardly waits, whatever the workers wait for.
  LoaderStats quiet = remote_epoch(10);
  quiet.wait_seconds = 0.1;
  CHECK(diagnose(quiet, roomy()).verdict == Verdict::kComputeBound);
  // num_workers = 0: the consumer's own wait is the loading time.
  LoaderStats inline_epoch = remote_epoch(4);
  inline_epoch.workers.clear();
  CHECK(diagnose(inline_epoch, roomy()).verdict == Verdict::kNetworkBound);
}
