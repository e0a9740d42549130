// NpyDataset over a .npy file far larger than RAM: 200,000 x 3 x 224 x 224 float32 (120 GB).
// The file is sparse (a header, four rows written with pwrite, the rest a hole made by
// ftruncate), so it takes a few MB of disk. NpyDataset memory-maps it, and two workers read
// only the pages of the samples a SubsetRandomSampler picks: the process stays small.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <stoker/stoker.hpp>

#include "cli.hpp"

int main(int argc, char** argv) {
  example::Cli cli(argc, argv,
                   "usage: npy_memmap\n  NpyDataset over a sparse 120 GB .npy file, served with a "
                   "few MB of memory.\n  It takes no arguments.");
  cli.done();
  constexpr std::int64_t kRows = 200000;
  constexpr std::size_t kRowFloats = 3 * 224 * 224;
  const std::vector<std::size_t> written = {0, 4242, 123456, 199999};  // row i holds i + 0.5
  char dir_template[] = "/tmp/stoker-npy-example-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string path = dir + "/images.npy";
  const std::vector<std::int64_t> shape = {kRows, 3, 224, 224};
  const std::vector<std::byte> header = stoker::make_npy_header(stoker::DType::kFloat32, shape);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  bool ok = fd >= 0 &&
            ::pwrite(fd, header.data(), header.size(), 0) == static_cast<ssize_t>(header.size());
  for (const std::size_t i : written) {
    const std::vector<float> row(kRowFloats, static_cast<float>(i) + 0.5f);
    const auto at = static_cast<off_t>(header.size() + i * kRowFloats * sizeof(float));
    ok = ok && ::pwrite(fd, row.data(), row.size() * sizeof(float), at) ==
                   static_cast<ssize_t>(row.size() * sizeof(float));
  }
  const std::size_t file_bytes = header.size() + kRowFloats * sizeof(float) * kRows;
  ok = ok && ::ftruncate(fd, static_cast<off_t>(file_bytes)) == 0;
  if (fd >= 0) ::close(fd);
  struct stat st {};
  ok = ok && ::stat(path.c_str(), &st) == 0;
  std::printf("%s: %.1f GB, %.1f MB on disk\n", path.c_str(), static_cast<double>(file_bytes) / 1e9,
              static_cast<double>(st.st_blocks) * 512 / 1e6);

  std::size_t read = 0;
  std::size_t wrong = 0;
  try {
    stoker::NpyDataset dataset(path, "image");
    stoker::LoaderOptions opt;
    opt.batch_size = 2;
    opt.num_workers = 2;
    // Four rows that were written and four in the hole (which read as zeros).
    opt.sampler = std::make_shared<stoker::SubsetRandomSampler>(
        std::vector<std::size_t>{0, 4242, 123456, 199999, 1, 77777, 150000, 199998}, 3);
    stoker::DataLoader loader(dataset, opt);
    for (const stoker::Batch& batch : loader) {
      const float* images = batch["image"].data<float>();  // [2, 3, 224, 224]
      for (std::size_t r = 0; r < batch.size(); ++r) {
        const std::size_t i = batch.indices()[r];
        const bool has_data = std::find(written.begin(), written.end(), i) != written.end();
        const float want = has_data ? static_cast<float>(i) + 0.5f : 0.0f;
        const float* row = images + r * kRowFloats;
        const bool good = row[0] == want && row[kRowFloats - 1] == want;
        wrong += good ? 0 : 1;
        ++read;
        std::printf("sample %6zu: %s, first value %.1f%s\n", i,
                    batch["image"].row(r).shape().to_string().c_str(), static_cast<double>(row[0]),
                    good ? "" : " (WRONG)");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "npy_memmap: %s\n", e.what());
    ok = false;
  }
  std::filesystem::remove_all(dir);
  rusage self{};
  rusage workers{};
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &workers);
  std::printf("%zu samples read; max RSS: %.0f MB (this process), %.0f MB (largest worker)\n", read,
              static_cast<double>(self.ru_maxrss) / 1024,
              static_cast<double>(workers.ru_maxrss) / 1024);
  const long limit_kib = 1024 * 1024;  // 1 GiB of RSS, for a file of 120 GB
  const bool small = self.ru_maxrss < limit_kib && workers.ru_maxrss < limit_kib;
  return ok && read == 8 && wrong == 0 && small ? 0 : 1;
}
