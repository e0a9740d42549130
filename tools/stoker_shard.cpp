// stoker-shard: converts a dataset into WebDataset tar shards (and their indexes) in one
// command. From an image folder (root/<class>/<file>): each image's bytes as they are, under
// its extension, and its class index as "cls"; from .npy arrays: one field per array, through
// write_webdataset() (the library route for any stoker dataset).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "os/posix.hpp"
#include "stoker/stoker.hpp"
#include "stoker/webdataset.hpp"

namespace {

namespace posix = stoker::detail::posix;

constexpr const char* kUsage =
    "usage: stoker-shard SOURCE --output PATTERN [options]\n"
    "SOURCE (one of):\n"
    "  --images DIR          an image folder DIR/<class>/<file>.jpg|.jpeg|.png|.webp: each\n"
    "                        sample holds the file's bytes (field jpg, png, ...) and its class\n"
    "                        index (field cls); the class names go to <output dir>/classes.txt\n"
    "  --npy FIELD=FILE      a .npy array whose rows are the samples' FIELD (repeat for more\n"
    "                        fields; every array has the same number of rows)\n"
    "options:\n"
    "  --output PATTERN      shard paths with one integer conversion, e.g. out/train-%06d.tar;\n"
    "                        an s3:// or http(s):// URL uploads each shard and its index\n"
    "                        (credentials and endpoint as the AWS tools find them; see\n"
    "                        docs/remote.md), written first under --staging\n"
    "  --staging DIR         where shards for a URL are written before their upload (default:\n"
    "                        a new directory under $TMPDIR or /tmp, removed after)\n"
    "  --endpoint URL        the S3 endpoint for an s3:// output (default: AWS_ENDPOINT_URL_S3,\n"
    "                        AWS_ENDPOINT_URL, the profile's, else AWS)\n"
    "  --shard-size SIZE     target bytes per shard: 1G (default), 256M, 512K or a byte count\n"
    "  --max-samples N       at most N samples per shard (default: no limit)\n"
    "  --shuffle             write the samples in a random order (from --seed), so that\n"
    "                        each shard holds a mix of classes\n"
    "  --seed N              the order's seed (default 0)\n"
    "  --no-index            do not write each shard's index (<shard>.idx)\n"
    "  --quiet               print nothing but errors\n"
    "  --help                print this\n";

[[noreturn]] void usage_error(const std::string& problem) {
  std::fprintf(stderr, "stoker-shard: %s\n%s", problem.c_str(), kUsage);
  std::exit(2);
}

struct Args {
  std::string images;
  std::vector<std::pair<std::string, std::string>> npy;
  std::string output;
  std::string staging;
  std::string endpoint;
  std::uint64_t shard_size = std::uint64_t{1} << 30;
  std::size_t max_samples = 0;
  bool shuffle = false;
  std::uint64_t seed = 0;
  bool index = true;
  bool quiet = false;
};

std::uint64_t parse_count(const std::string& flag, const std::string& text, bool suffixes) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(text.c_str(), &end, 10);
  std::uint64_t scale = 1;
  std::string rest = end == nullptr ? "" : std::string(end);
  if (suffixes && rest.size() == 1) {
    const char s = static_cast<char>(std::toupper(static_cast<unsigned char>(rest[0])));
    scale = s == 'K' ? 1ull << 10 : s == 'M' ? 1ull << 20 : s == 'G' ? 1ull << 30 : 0;
    if (scale != 0) rest.clear();
  }
  if (text.empty() || text[0] == '-' || end == text.c_str() || !rest.empty() || errno != 0 ||
      scale == 0 || n == 0 || n > (~std::uint64_t{0}) / scale) {
    usage_error(fmt::format("{} takes a positive {}, not '{}'", flag,
                            suffixes ? "size such as 256M" : "whole number", text));
  }
  return n * scale;
}

Args parse(int argc, char** argv) {
  Args a;
  auto value = [&](int& i, const std::string& flag) -> std::string {
    if (i + 1 >= argc) usage_error(flag + " needs a value");
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (flag == "--images") {
      a.images = value(i, flag);
    } else if (flag == "--npy") {
      const std::string v = value(i, flag);
      const std::size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == v.size()) {
        usage_error("--npy takes FIELD=FILE, not '" + v + "'");
      }
      a.npy.emplace_back(v.substr(0, eq), v.substr(eq + 1));
    } else if (flag == "--output") {
      a.output = value(i, flag);
    } else if (flag == "--staging") {
      a.staging = value(i, flag);
    } else if (flag == "--endpoint") {
      a.endpoint = value(i, flag);
    } else if (flag == "--shard-size") {
      a.shard_size = parse_count(flag, value(i, flag), true);
    } else if (flag == "--max-samples") {
      a.max_samples = static_cast<std::size_t>(parse_count(flag, value(i, flag), false));
    } else if (flag == "--shuffle") {
      a.shuffle = true;
    } else if (flag == "--seed") {
      const std::string v = value(i, flag);
      a.seed = v == "0" ? 0 : parse_count(flag, v, false);
    } else if (flag == "--no-index") {
      a.index = false;
    } else if (flag == "--quiet") {
      a.quiet = true;
    } else {
      usage_error("unknown option '" + flag + "'");
    }
  }
  if (a.images.empty() == a.npy.empty()) usage_error("give one source: --images or --npy");
  if (a.output.empty()) usage_error("--output is required");
  return a;
}

std::vector<std::string> sorted_entries(const std::string& dir, bool directories) {
  struct stat dir_stat {};
  if (!posix::stat_path(dir.c_str(), dir_stat)) {
    throw stoker::Error(
        posix::errno_message(fmt::format("stoker-shard: cannot read directory {}", dir), errno));
  }
  if (!S_ISDIR(dir_stat.st_mode)) {
    throw stoker::Error(fmt::format("stoker-shard: {} is not a directory", dir));
  }
  std::vector<std::string> out;
  for (const std::string& name : posix::list_directory(dir.c_str())) {
    if (name.empty() || name[0] == '.') continue;
    struct stat st {};
    if (!posix::stat_path((dir + "/" + name).c_str(), st)) continue;
    if (directories ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The whole file into `bytes`. Throws stoker::Error naming it when it cannot be read.
void read_whole(const std::string& path, std::vector<char>& bytes) {
  posix::Fd fd(posix::open_read(path.c_str()));
  const off_t size = fd.valid() ? posix::file_size(fd.get()) : -1;
  if (size < 0) {
    throw stoker::Error(posix::errno_message("stoker-shard: cannot read " + path, errno));
  }
  bytes.resize(static_cast<std::size_t>(size));
  const ssize_t got = posix::read_full(fd.get(), bytes.data(), bytes.size());
  if (got < 0) {
    throw stoker::Error(posix::errno_message("stoker-shard: cannot read " + path, errno));
  }
  if (static_cast<std::size_t>(got) != bytes.size()) {
    throw stoker::Error(fmt::format(
        "stoker-shard: {} ended after {} of its {} bytes while it was read; was it being "
        "written?",
        path, got, bytes.size()));
  }
}

// `text` as the whole of `path`. Throws stoker::Error naming it when it cannot be written.
void write_whole(const std::string& path, const std::string& text) {
  posix::Fd fd(posix::open_write(path.c_str()));
  if (!fd.valid() || posix::write_all(fd.get(), text.data(), text.size()) != 0 ||
      posix::close_fd(fd.release()) != 0) {
    throw stoker::Error(posix::errno_message("stoker-shard: cannot write " + path, errno));
  }
}

std::string image_extension(const std::string& file) {
  const std::size_t dot = file.rfind('.');
  if (dot == std::string::npos) return "";
  std::string ext = file.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == "jpg" || ext == "jpeg" || ext == "png" || ext == "webp" ? ext : "";
}

std::string output_dir(const std::string& pattern) {
  const std::size_t slash = pattern.rfind('/');
  return slash == std::string::npos ? "." : pattern.substr(0, slash);
}

std::string leaf(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return posix::stat_path(path.c_str(), st);
}

// An --output URL: the shards are written under a staging directory, then uploaded beside the
// URL's directory, each with its index, and removed locally.
struct Upload {
  std::string url_dir;  // "s3://bucket/prefix/" (up to the pattern's last '/')
  std::string staging;
  bool own_staging = false;
};

Upload prepare_upload(Args& a) {
  Upload u;
  const std::size_t slash = a.output.rfind('/');
  u.url_dir = a.output.substr(0, slash + 1);
  u.staging = a.staging;
  if (u.staging.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/stoker-shard-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      throw stoker::Error(fmt::format("stoker-shard: cannot make a staging directory {}: {}", templ,
                                      std::strerror(errno)));
    }
    u.staging = templ;
    u.own_staging = true;
  }
  a.output = u.staging + "/" + a.output.substr(slash + 1);
  return u;
}

// Uploads each shard, its index and classes.txt; returns the shards' URLs.
std::vector<std::string> upload(const Upload& u, const std::vector<std::string>& shards,
                                const Args& a) {
  stoker::RemoteOptions options;
  options.endpoint = a.endpoint;
  std::vector<std::string> urls;
  std::vector<std::string> local;
  for (const std::string& shard : shards) {
    local.push_back(shard);
    if (file_exists(shard + ".idx")) local.push_back(shard + ".idx");
  }
  if (file_exists(u.staging + "/classes.txt")) local.push_back(u.staging + "/classes.txt");
  for (const std::string& file : local) {
    const std::string url = u.url_dir + leaf(file);
    stoker::upload_file(file, url, options);
    if (std::find(shards.begin(), shards.end(), file) != shards.end()) urls.push_back(url);
  }
  for (const std::string& file : local) posix::remove_file(file.c_str());
  if (u.own_staging) ::rmdir(u.staging.c_str());
  return urls;
}

std::vector<std::string> shard_images(const Args& a, const stoker::WebDatasetWriterOptions& wo,
                                      std::size_t& samples) {
  struct Image {
    std::string path;
    std::string ext;
    std::int64_t label;
  };
  std::vector<std::string> classes = sorted_entries(a.images, true);
  if (classes.empty()) {
    throw stoker::Error(fmt::format(
        "stoker-shard: {} has no class directories; lay it out as {}/<class>/<file>.jpg", a.images,
        a.images));
  }
  std::vector<Image> images;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    for (const std::string& f : sorted_entries(a.images + "/" + classes[c], false)) {
      const std::string ext = image_extension(f);
      if (!ext.empty()) {
        images.push_back(
            {a.images + "/" + classes[c] + "/" + f, ext, static_cast<std::int64_t>(c)});
      }
    }
  }
  if (images.empty()) {
    throw stoker::Error(
        fmt::format("stoker-shard: no .jpg, .jpeg, .png or .webp under {}", a.images));
  }
  if (a.shuffle) stoker::Generator(a.seed).shuffle(images.begin(), images.end());
  std::string names;
  for (const std::string& c : classes) names += c + "\n";
  write_whole(output_dir(a.output) + "/classes.txt", names);
  stoker::WebDatasetWriter writer(wo);
  samples = images.size();
  std::vector<char> bytes;
  for (std::size_t i = 0; i < images.size(); ++i) {
    read_whole(images[i].path, bytes);
    const std::string label = std::to_string(images[i].label);
    const std::pair<std::string, std::span<const std::byte>> fields[] = {
        {images[i].ext, std::as_bytes(std::span<const char>(bytes))},
        {"cls", std::as_bytes(std::span<const char>(label.data(), label.size()))}};
    writer.write(fmt::format("{:09}", i), fields);
  }
  return writer.close();
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  try {
    const auto start = std::chrono::steady_clock::now();
    const bool remote = stoker::is_remote_url(a.output);
    Upload up;
    if (remote) up = prepare_upload(a);
    stoker::WebDatasetWriterOptions wo;
    wo.pattern = a.output;
    wo.max_shard_bytes = a.shard_size;
    wo.max_samples_per_shard = a.max_samples;
    wo.write_index = a.index;
    std::vector<std::string> shards;
    std::size_t samples = 0;
    if (!a.images.empty()) {
      shards = shard_images(a, wo, samples);
    } else {
      stoker::NpyDataset ds(a.npy);
      samples = ds.size();
      if (a.shuffle) {
        std::vector<std::size_t> order(ds.size());
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
        stoker::Generator(a.seed).shuffle(order.begin(), order.end());
        shards = stoker::detail::write_webdataset_samples(
            order.size(), [&](std::size_t i) { return ds.get(order[i]); }, wo);
      } else {
        shards = stoker::write_webdataset(ds, wo);
      }
    }
    std::uint64_t bytes = 0;
    for (const std::string& s : shards) {
      struct stat st {};
      if (posix::stat_path(s.c_str(), st)) bytes += static_cast<std::uint64_t>(st.st_size);
    }
    if (remote) shards = upload(up, shards, a);
    if (!a.quiet) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("stoker-shard: %zu samples in %zu shards (%.1f MiB) in %.2f s: %s .. %s\n",
                  samples, shards.size(), static_cast<double>(bytes) / (1 << 20), seconds,
                  shards.front().c_str(), shards.back().c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoker-shard: %s\n", e.what());
    return 1;
  }
}
