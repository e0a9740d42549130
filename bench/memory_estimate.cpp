// memory_estimate: the loader's memory estimate against the measured peak, run after run. Each
// run is a fresh process (forked from this one, which stays out of the measurement): it builds
// a loader, takes loader.memory_estimate() just before its first epoch, runs the epochs with a
// consumer that holds each batch for 1 ms, and exits. Meanwhile this process reads the run's
// whole process tree (main process, workers, the size probe) about every 0.5 ms with the
// library's tree memory reader (os/proc.hpp, kProportional): each process's Pss_Anon (pages
// still shared copy-on-write are split between the processes that map them, so the sum counts
// each once) plus each shared-memory object (the ring's memfd) once, by its allocated blocks.
// The peak of that sum is compared with the estimate's total. Workloads:
//
//   image   uint8[3,224,224] + int64 label, batch 64 (stoker-bench's synthetic image)
//   tiny    float32[64] + int64 label, batch 256 (stoker-bench's tiny), 40 batches an epoch
//   folder  ImageFolderDataset (Resize 256, CenterCrop 224, uint8 CHW) over generated JPEGs of
//           256-500 px a side (or --image-folder DIR), batch 64
//
// and prints, per workload and num_workers, the distribution of measured / estimate over the
// runs (min, median, worst), then one JSON line per run.
//
//   build/release/bench/memory_estimate [--runs 20] [--workers 0,1,2,4] [--epochs 3]
//       [--workloads image,tiny,folder] [--persistent 1] [--image-folder DIR]
//       [--prefetch 2] [--estimate-after-first-batch] [--detail]
//
// --prefetch sets LoaderOptions::prefetch_factor (2 unless given; 0 is the adaptive default,
// whose estimate counts the deepest depth it may reach, 8 slots a worker, while a run fills
// only as many as its depth went to: the ratio then says how deep, not how exact).
// --estimate-after-first-batch takes the estimate after the first epoch's first batch instead,
// as the loader's own check does when nothing measured the samples before (the first batch
// measures them, not a probe); the main process is then counted as it was just before the
// first begin() (what begin() adds there, the plans and the ring, is the estimate's
// loader_bytes, and the estimate's main_bytes by then holds the main process's share of them).
// --detail adds, per configuration, the worst run's breakdown at its peak beside the
// estimate's parts.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "../tools/bench_workloads.hpp"
#include "os/posix.hpp"
#include "os/proc.hpp"
#include "stoker/stoker.hpp"
#if STOKER_BENCH_IMAGES
#include "support/images.hpp"
#endif

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

struct Config {
  std::string workload;
  int workers = 0;
  bool persistent = true;
  std::size_t prefetch = 2;  // LoaderOptions::prefetch_factor; 0: adaptive
  int epochs = 3;
  std::string image_folder;
  std::size_t tiny_samples = 256 * 40;
  // Where the estimate is taken: before the first epoch (the size probe measures the samples)
  // or after the first epoch's first batch (the check that waits for it measured them).
  bool after_first_batch = false;
};

// The run's own process, as its smaps_rollup says.
struct Usage {
  std::uint64_t pss = 0;
  std::uint64_t anon = 0;
  std::uint64_t file = 0;
  std::uint64_t shmem = 0;
};

// What a run's process sends before its first epoch, and again after its last.
struct Reported {
  stoker::MemoryEstimate estimate;
  Usage main_at_estimate;            // the run's process when it took the estimate (or began)
  std::uint64_t estimate_total = 0;  // the estimate's total, the main process as above
  std::uint64_t samples = 0;         // delivered (in the second record)
};

Usage own_usage() {
  Usage u;
  if (const std::optional<stoker::detail::ProcessMemory> m =
          stoker::detail::read_process_memory(0)) {
    u.pss = m->pss_bytes;
    u.anon = m->anonymous_pss_bytes.value_or(0);
    u.file = m->file_pss_bytes.value_or(0);
    u.shmem = m->unreclaimable_pss_bytes - std::min(u.anon, m->unreclaimable_pss_bytes);
  }
  return u;
}

template <class D>
void run_loader(D dataset, std::size_t batch_size, const Config& c, int out) {
  stoker::LoaderOptions opt;
  opt.batch_size = batch_size;
  opt.num_workers = c.workers;
  opt.persistent_workers = c.persistent && c.workers > 0;
  opt.prefetch_factor = c.prefetch;
  stoker::DataLoader loader(std::move(dataset), opt);
  Reported r;
  // With num_workers = 0 the loader's own check runs before the first epoch either way (the
  // probe measures in-process loading), so the estimate is taken there.
  const bool after_first_batch = c.after_first_batch && c.workers > 0;
  const Usage before_begin = own_usage();
  if (!after_first_batch) {
    r.estimate = loader.memory_estimate();
    r.main_at_estimate = own_usage();
    r.estimate_total = r.estimate.total_bytes;
    if (stoker::detail::posix::write_all(out, &r, sizeof r) != 0) ::_exit(1);
  }
  for (int epoch = 0; epoch < c.epochs; ++epoch) {
    bool first = epoch == 0 && after_first_batch;
    for (const stoker::Batch& batch : loader) {
      if (std::exchange(first, false)) {
        r.estimate = loader.memory_estimate();
        r.main_at_estimate = before_begin;
        r.estimate_total =
            r.estimate.loader_bytes + r.main_at_estimate.anon + r.main_at_estimate.shmem;
        if (stoker::detail::posix::write_all(out, &r, sizeof r) != 0) ::_exit(1);
      }
      r.samples += batch.size();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the "training step"
    }
  }
  if (stoker::detail::posix::write_all(out, &r, sizeof r) != 0) ::_exit(1);
}

// In the run's process (this program again, with --run).
[[noreturn]] void run_child(const Config& c, int out) {
  try {
    if (c.workload == "image") {
      run_loader(stoker::bench::ImageDataset{}, 64, c, out);
    } else if (c.workload == "tiny") {
      run_loader(stoker::bench::TinyDataset{c.tiny_samples}, 256, c, out);
    } else {
      run_loader(stoker::ImageFolderDataset(c.image_folder), 64, c, out);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memory_estimate: run failed: %s\n", e.what());
    ::_exit(1);
  }
  ::_exit(0);
}

struct RunResult {
  bool ok = false;
  Reported reported;
  stoker::detail::TreeMemory peak;  // at the peak of anonymous + shared memory
  std::uint64_t peak_pss = 0;       // the peak with the file-backed pages' PSS included
};

RunResult measure(const Config& c) {
  RunResult result;
  int ends[2];
  if (::pipe(ends) != 0) return result;
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return result;
  if (pid == 0) {
    // A fresh program, not a fork of this one: a forked run would share this process's pages
    // copy-on-write, and its PSS would count them half.
    ::close(ends[0]);
    const std::vector<std::string> args = {"memory_estimate",
                                           "--run",
                                           c.workload,
                                           std::to_string(c.workers),
                                           c.persistent ? "1" : "0",
                                           std::to_string(c.prefetch),
                                           std::to_string(c.epochs),
                                           std::to_string(c.tiny_samples),
                                           c.image_folder.empty() ? "-" : c.image_folder,
                                           c.after_first_batch ? "1" : "0",
                                           std::to_string(ends[1])};
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  ::close(ends[1]);
  const int in = ends[0];
  // Sampling starts once the program runs: until its exec, the child is a copy of this one.
  char started = 0;
  if (stoker::detail::posix::read_full(in, &started, 1) != 1) {
    ::close(in);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return result;
  }
  std::size_t records = 0;
  // A pass during which a process was forked or reaped could count a page shared by two
  // processes one and a half times: the reader reads such a pass again (nullopt when the tree
  // kept changing).
  stoker::detail::TreeMemoryReader reader(stoker::detail::AnonymousCount::kProportional);
  for (;;) {
    if (const std::optional<stoker::detail::TreeMemory> now = reader.read(pid)) {
      if (now->total_bytes() > result.peak.total_bytes()) result.peak = *now;
      result.peak_pss = std::max(result.peak_pss, now->total_bytes() + now->file_pss_bytes);
    }
    pollfd p{in, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) {
      Reported r;
      const ssize_t n = stoker::detail::posix::read_full(in, &r, sizeof r);
      if (n != static_cast<ssize_t>(sizeof r)) break;  // the run process exited
      result.reported = r;
      if (++records == 2) break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  ::close(in);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.ok = records == 2 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return result;
}

// Writes `count` JPEGs of 256-500 px a side in 10 classes under `root` (as
// bench/compare/gen_data.py does, from a fixed seed).
bool generate_images(const fs::path& root, int count) {
#if STOKER_BENCH_IMAGES
  stoker::Generator rng(20240520);
  for (int i = 0; i < count; ++i) {
    const fs::path dir = root / fmt::format("class_{}", i % 10);
    fs::create_directories(dir);
    const int w = 256 + static_cast<int>(rng.below(245));
    const int h = 256 + static_cast<int>(rng.below(245));
    const std::vector<std::uint8_t> jpeg =
        stoker::test::encode_jpeg(stoker::test::photo_pixels(w, h, rng.next()), w, h);
    std::ofstream(dir / fmt::format("img_{:05d}.jpg", i), std::ios::binary)
        .write(reinterpret_cast<const char*>(jpeg.data()),
               static_cast<std::streamsize>(jpeg.size()));
  }
  return true;
#else
  (void)root;
  (void)count;
  return false;
#endif
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: memory_estimate [--runs R] [--workers 0,1,2,4] [--epochs E]\n"
               "         [--workloads image,tiny,folder] [--persistent 0|1]\n"
               "         [--image-folder DIR] [--prefetch N] [--estimate-after-first-batch]\n"
               "         [--detail]\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 11 && std::strcmp(argv[1], "--run") == 0) {  // one run, started by measure()
    Config c;
    c.workload = argv[2];
    c.workers = std::atoi(argv[3]);
    c.persistent = std::atoi(argv[4]) != 0;
    c.prefetch = static_cast<std::size_t>(std::atoll(argv[5]));
    c.epochs = std::atoi(argv[6]);
    c.tiny_samples = static_cast<std::size_t>(std::atoll(argv[7]));
    c.image_folder = std::strcmp(argv[8], "-") == 0 ? "" : argv[8];
    c.after_first_batch = std::atoi(argv[9]) != 0;
    const int out = std::atoi(argv[10]);
    const char started = 'S';
    if (stoker::detail::posix::write_all(out, &started, 1) != 0) return 1;
    run_child(c, out);
  }
  int runs = 20;
  std::vector<int> worker_counts = {0, 1, 2, 4};
  std::vector<std::string> workloads = {"image", "tiny", "folder"};
  Config base;
  bool detail = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const bool has_value = i + 1 < argc;
    if (flag == "--help" || flag == "-h") {
      usage(stdout);
      return 0;
    } else if (flag == "--runs" && has_value) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (flag == "--workers" && has_value) {
      worker_counts.clear();
      for (const std::string& w : split(argv[++i])) worker_counts.push_back(std::atoi(w.c_str()));
    } else if (flag == "--epochs" && has_value) {
      base.epochs = std::max(1, std::atoi(argv[++i]));
    } else if (flag == "--workloads" && has_value) {
      workloads = split(argv[++i]);
    } else if (flag == "--persistent" && has_value) {
      base.persistent = std::atoi(argv[++i]) != 0;
    } else if (flag == "--image-folder" && has_value) {
      base.image_folder = argv[++i];
    } else if (flag == "--prefetch" && has_value) {
      base.prefetch = static_cast<std::size_t>(std::atoll(argv[++i]));
    } else if (flag == "--estimate-after-first-batch") {
      base.after_first_batch = true;
    } else if (flag == "--tiny-samples" && has_value) {
      base.tiny_samples = static_cast<std::size_t>(std::max(256, std::atoi(argv[++i])));
    } else if (flag == "--detail") {
      detail = true;
    } else {
      usage(stderr);
      return 2;
    }
  }
  fs::path generated;
  if (std::find(workloads.begin(), workloads.end(), "folder") != workloads.end() &&
      base.image_folder.empty()) {
    char templ[] = "/tmp/stoker-memory-estimate-XXXXXX";
    if (::mkdtemp(templ) != nullptr && generate_images(templ, 320)) {
      generated = templ;
      base.image_folder = generated.string();
    } else {
      std::fprintf(stderr,
                   "memory_estimate: built without the image codecs: the folder workload needs "
                   "--image-folder DIR\n");
      workloads.erase(std::remove(workloads.begin(), workloads.end(), "folder"), workloads.end());
    }
  }

  std::printf(
      "memory_estimate: %d runs a configuration, %d epochs, persistent_workers=%d, "
      "prefetch_factor=%s, estimate taken %s\n\n",
      runs, base.epochs, base.persistent ? 1 : 0,
      base.prefetch == 0 ? "adaptive" : std::to_string(base.prefetch).c_str(),
      base.after_first_batch ? "after the first batch" : "before the first epoch");
  std::printf(
      "| workload | num_workers | estimate (MiB) | measured peak tree PSS (MiB): min / median / "
      "max | measured / estimate: min / median / worst | runs over the estimate |\n"
      "|---|---|---|---|---|---|\n");
  std::vector<std::string> json;
  std::vector<std::string> details;
  bool all_ok = true;
  for (const std::string& workload : workloads) {
    for (const int workers : worker_counts) {
      Config c = base;
      c.workload = workload;
      c.workers = workers;
      std::vector<double> ratios;
      std::vector<std::uint64_t> peaks;
      std::vector<std::uint64_t> estimates;
      RunResult worst;
      double worst_ratio = 0;
      for (int run = 0; run < runs; ++run) {
        const RunResult r = measure(c);
        if (!r.ok) {
          std::fprintf(stderr, "memory_estimate: %s, %d workers: run %d failed\n", workload.c_str(),
                       workers, run);
          all_ok = false;
          continue;
        }
        const stoker::MemoryEstimate& e = r.reported.estimate;
        const double ratio = static_cast<double>(r.peak.total_bytes()) /
                             static_cast<double>(r.reported.estimate_total);
        ratios.push_back(ratio);
        peaks.push_back(r.peak.total_bytes());
        estimates.push_back(r.reported.estimate_total);
        if (ratio > worst_ratio) {
          worst_ratio = ratio;
          worst = r;
        }
        json.push_back(fmt::format(
            "{{\"bench\": \"memory_estimate\", \"workload\": \"{}\", \"workers\": {}, "
            "\"persistent\": {}, \"prefetch_factor\": {}, \"run\": {}, \"batch_size\": {}, "
            "\"bytes_per_sample\": {}, "
            "\"estimate_bytes\": {}, \"loader_bytes\": {}, \"main_bytes\": {}, "
            "\"worker_base_bytes\": {}, \"worker_startup_bytes\": {}, \"plan_bytes\": {}, "
            "\"peak_bytes\": {}, \"peak_pss_with_file_pages_bytes\": {}, \"ratio\": {:.4f}, "
            "\"samples\": {}}}",
            workload, workers, c.persistent, c.prefetch, run, e.batch_size, e.bytes_per_sample,
            r.reported.estimate_total, e.loader_bytes, e.main_bytes, e.worker_base_bytes,
            e.worker_startup_bytes, e.plan_bytes, r.peak.total_bytes(), r.peak_pss, ratio,
            r.reported.samples));
      }
      if (ratios.empty()) continue;
      std::vector<double> sorted = ratios;
      std::sort(sorted.begin(), sorted.end());
      std::sort(peaks.begin(), peaks.end());
      std::sort(estimates.begin(), estimates.end());
      const std::size_t over = static_cast<std::size_t>(
          std::count_if(ratios.begin(), ratios.end(), [](double r) { return r > 1.0; }));
      std::printf("| %s | %d | %.1f | %.1f / %.1f / %.1f | %.3f / %.3f / %.3f | %zu of %zu |\n",
                  workload.c_str(), workers, mib(estimates[estimates.size() / 2]),
                  mib(peaks.front()), mib(peaks[peaks.size() / 2]), mib(peaks.back()),
                  sorted.front(), sorted[sorted.size() / 2], sorted.back(), over, ratios.size());
      std::fflush(stdout);
      if (detail) {
        const stoker::MemoryEstimate& e = worst.reported.estimate;
        const stoker::detail::TreeMemory& p = worst.peak;
        const Usage& m0 = worst.reported.main_at_estimate;
        details.push_back(fmt::format(
            "{} {} workers: main at the estimate {:.2f} MiB (anon {:.2f}, file {:.2f}); at the "
            "peak the tree adds anon {:+.2f}, shared memory {:+.2f} (ring {:.2f})",
            workload, workers, mib(m0.pss), mib(m0.anon), mib(m0.file),
            mib(p.anonymous_bytes) - mib(m0.anon), mib(p.shared_bytes) - mib(m0.shmem),
            mib(p.ring_bytes)));
        details.push_back(fmt::format(
            "{} {} workers, worst run at its peak ({} processes): tree {:.2f} MiB = anon {:.2f} "
            "(main {:.2f}, others {:.2f}) + shared memory {:.2f} ({} objects; file-backed PSS "
            "{:.2f} left out); estimate {:.2f} = main {:.2f} + ring {:.2f} + workers {} x {:.2f} "
            "(base {:.2f}) + in-process {:.2f} + plans {:.2f} + pinned and cache {:.2f}",
            workload, workers, p.processes, mib(p.total_bytes()), mib(p.anonymous_bytes),
            mib(p.root_anonymous_bytes), mib(p.anonymous_bytes - p.root_anonymous_bytes),
            mib(p.shared_bytes), p.shared_objects, mib(p.file_pss_bytes), mib(e.total_bytes),
            mib(e.main_bytes), mib(e.ring_bytes), e.num_workers, mib(e.worker_private_bytes),
            mib(e.worker_base_bytes), mib(e.inline_bytes), mib(e.plan_bytes),
            mib(e.pinned_bytes + e.cache_bytes)));
      }
    }
  }
  std::printf("\n");
  for (const std::string& line : details) std::printf("%s\n", line.c_str());
  if (!details.empty()) std::printf("\n");
  for (const std::string& line : json) std::printf("%s\n", line.c_str());
  if (!generated.empty()) fs::remove_all(generated);
  return all_ok ? 0 : 1;
}
