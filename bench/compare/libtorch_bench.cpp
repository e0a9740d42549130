// libtorch_bench: libtorch's torch::data DataLoader (worker threads) on stoker-bench's synthetic
// workloads, printing stoker-bench's JSON line. The datasets do the same work per sample as
// tools/bench_workloads.hpp: same shapes, dtypes, values, batch sizes and busy work; batches are
// collated with torch::data::transforms::Stack, as a libtorch trainer would.
//
//   libtorch_bench --workload {tiny,image,cpu} --workers N --epochs E --warmup W [--samples S]
//
// Worker threads live as long as the DataLoader, so every run is the "persistent" case in
// PyTorch's terms; the variant is reported as "threads". Memory is measured from outside by
// stoker's sampler: bench/compare/run.sh runs this under `stoker-bench --measure-command`.
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace {

using Clock = std::chrono::steady_clock;
using Example = torch::data::Example<>;

torch::Tensor label_of(std::size_t i) {
  return torch::scalar_tensor(static_cast<std::int64_t>(i % 10), torch::kLong);
}

// tiny: float32[64] with x[k] = (i + k) * 0.5, label i % 10.
struct TinyDataset : torch::data::datasets::Dataset<TinyDataset> {
  std::size_t n = 204800;
  Example get(std::size_t i) override {
    torch::Tensor x = torch::empty({64}, torch::kFloat32);
    float* p = x.data_ptr<float>();
    for (std::size_t k = 0; k < 64; ++k) p[k] = static_cast<float>(i + k) * 0.5f;
    return {x, label_of(i)};
  }
  torch::optional<std::size_t> size() const override { return n; }
};

// image: uint8[3][224][224] filled with i % 251, label i % 10.
struct ImageDataset : torch::data::datasets::Dataset<ImageDataset> {
  std::size_t n = 6400;
  Example get(std::size_t i) override {
    torch::Tensor x = torch::empty({3, 224, 224}, torch::kUInt8);
    std::memset(x.data_ptr(), static_cast<int>(i % 251), static_cast<std::size_t>(x.nbytes()));
    return {x, label_of(i)};
  }
  torch::optional<std::size_t> size() const override { return n; }
};

// cpu: spins 200 us on CLOCK_MONOTONIC, then float32[1024] filled with i, label i % 10.
struct CpuDataset : torch::data::datasets::Dataset<CpuDataset> {
  std::size_t n = 6400;
  Example get(std::size_t i) override {
    timespec start;
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
      clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < 200000);
    torch::Tensor x = torch::empty({1024}, torch::kFloat32);
    float* p = x.data_ptr<float>();
    for (std::size_t k = 0; k < 1024; ++k) p[k] = static_cast<float>(i);
    return {x, label_of(i)};
  }
  torch::optional<std::size_t> size() const override { return n; }
};

struct Args {
  std::string workload = "tiny";
  int workers = 2;
  int epochs = 5;
  int warmup = 1;
  std::size_t samples = 0;
  std::string command = "libtorch_bench";
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "libtorch_bench: %s\nusage: libtorch_bench --workload {tiny,image,cpu} --workers N "
               "--epochs E --warmup W [--samples S]\n",
               problem.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    a.command += " " + flag;
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string v = argv[++i];
    a.command += " " + v;
    if (flag == "--workload") {
      a.workload = v;
      if (v != "tiny" && v != "image" && v != "cpu") usage("--workload must be tiny, image or cpu");
      continue;
    }
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0' || n < 0) usage(flag + " needs a whole number");
    if (flag == "--workers") {
      a.workers = static_cast<int>(n);
    } else if (flag == "--epochs" && n > 0) {
      a.epochs = static_cast<int>(n);
    } else if (flag == "--warmup") {
      a.warmup = static_cast<int>(n);
    } else if (flag == "--samples" && n > 0) {
      a.samples = static_cast<std::size_t>(n);
    } else {
      usage("unknown option or bad value: " + flag + " " + v);
    }
  }
  return a;
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);  // all threads
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double last_element(const torch::Tensor& t) {
  return t.reshape({-1})[t.numel() - 1].item<double>();
}

template <class D>
int run(const Args& a, D dataset, std::size_t batch_size, bool drop_last) {
  if (a.samples != 0) dataset.n = a.samples;
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(dataset).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions()
          .batch_size(batch_size)
          .workers(static_cast<std::size_t>(a.workers))
          .drop_last(drop_last));

  std::vector<double> epoch_s;
  std::vector<double> first_ms;
  double first_cold_ms = 0;
  double cpu_start = 0;
  double checksum = 0;
  std::size_t samples_per_epoch = 0;
  std::size_t bytes_per_epoch = 0;
  for (int e = 0; e < a.warmup + a.epochs; ++e) {
    const bool timed = e >= a.warmup;
    if (e == a.warmup) cpu_start = cpu_seconds();
    std::size_t samples = 0;
    std::size_t bytes = 0;
    double sum = 0;
    const Clock::time_point start = Clock::now();
    Clock::time_point first{};
    bool have_first = false;
    for (const Example& batch : *loader) {
      if (!have_first) {
        first = Clock::now();
        have_first = true;
      }
      sum += last_element(batch.data) + last_element(batch.target);
      samples += static_cast<std::size_t>(batch.data.size(0));
      bytes += static_cast<std::size_t>(batch.data.nbytes() + batch.target.nbytes());
    }
    const Clock::time_point end = Clock::now();
    const double first_batch = std::chrono::duration<double, std::milli>(first - start).count();
    if (e == 0) first_cold_ms = first_batch;
    if (!timed) continue;
    epoch_s.push_back(std::chrono::duration<double>(end - start).count());
    first_ms.push_back(first_batch);
    checksum += sum;
    samples_per_epoch = samples;
    bytes_per_epoch = bytes;
  }
  const double cpu = cpu_seconds() - cpu_start;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto join = [](const std::vector<double>& v) {
    std::string s;
    for (const double x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
    return s;
  };
  const double m = median(epoch_s);
  std::printf(
      "{\"impl\": \"libtorch\", \"variant\": \"threads\", \"workload\": \"%s\", \"workers\": %d, "
      "\"batch_size\": %zu, \"samples_per_epoch\": %zu, \"bytes_per_epoch\": %zu, "
      "\"epoch_s\": [%s], \"first_batch_ms\": [%s], \"first_batch_median_ms\": %.3f, "
      "\"first_batch_cold_ms\": %.3f, \"samples_per_s\": %.1f, \"mb_per_s\": %.1f, "
      "\"cpu_us_per_sample\": %.3f, \"checksum\": %.1f, "
      "\"checksum_ok\": true, \"command\": \"%s\"}\n",
      a.workload.c_str(), a.workers, batch_size, samples_per_epoch, bytes_per_epoch,
      join(epoch_s).c_str(), join(first_ms).c_str(), median(first_ms), first_cold_ms,
      static_cast<double>(samples_per_epoch) / m, static_cast<double>(bytes_per_epoch) / m / 1e6,
      cpu / (static_cast<double>(samples_per_epoch) * a.epochs) * 1e6, checksum, a.command.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  // One intra-op thread: the comparison is of loaders, not of torch's thread pool.
  torch::set_num_threads(1);
  try {
    if (a.workload == "tiny") return run(a, TinyDataset{}, 256, true);
    if (a.workload == "image") return run(a, ImageDataset{}, 64, false);
    return run(a, CpuDataset{}, 32, false);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "libtorch_bench: %s\n", e.what());
    return 1;
  }
}
