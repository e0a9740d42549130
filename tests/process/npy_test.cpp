// NpyDataset and the .npy header parser: files of every format version, dtype and byte order
// (ours, and NumPy's own when Debian's python3-numpy is there), malformed headers rejected
// with clear errors, a randomized corpus of damaged headers, and a sparse file far larger
// than RAM served without reading it whole.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include <catch2/catch.hpp>

#include "support/datasets.hpp"
#include "support/files.hpp"

using namespace stoker;

namespace {

using stoker::test::TempDir;

void write_bytes(const std::string& path, const std::vector<std::byte>& header, const void* data,
                 std::size_t n) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()),
            static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

template <class T>
std::string write_npy(const TempDir& dir, const std::string& name, const std::vector<T>& values,
                      std::vector<std::int64_t> shape) {
  const std::string path = dir.path + "/" + name;
  write_bytes(path, make_npy_header(kDTypeOf<T>, shape), values.data(), values.size() * sizeof(T));
  return path;
}

// A header built by hand: any version, any dictionary text.
std::vector<std::byte> raw_header(int version, const std::string& dict) {
  std::vector<std::byte> out;
  for (const char c : std::string("\x93NUMPY", 6)) out.push_back(static_cast<std::byte>(c));
  out.push_back(static_cast<std::byte>(version));
  out.push_back(std::byte{0});
  const std::size_t n = dict.size();
  const std::size_t width = version == 1 ? 2 : 4;
  for (std::size_t i = 0; i < width; ++i)
    out.push_back(static_cast<std::byte>((n >> (8 * i)) & 0xff));
  for (const char c : dict) out.push_back(static_cast<std::byte>(c));
  return out;
}

std::string fmt_path(const std::string& dir, const char* code, const char* order, int version) {
  return dir + "/" + code + "_" + order + "_v" + std::to_string(version) + ".npy";
}

std::string numpy_python() {
  return std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0 ? "/usr/bin/python3"
                                                                            : "";
}

}  // namespace

TEST_CASE("make_npy_header and parse_npy_header agree", "[npy]") {
  const std::vector<std::int64_t> shape = {5, 3, 2};
  const std::vector<std::byte> header = make_npy_header(DType::kFloat32, shape);
  REQUIRE(header.size() % 64 == 0);
  const NpyArray a = parse_npy_header(header);
  REQUIRE(a.major_version == 1);
  REQUIRE(a.dtype == DType::kFloat32);
  REQUIRE_FALSE(a.big_endian);
  REQUIRE(a.shape == shape);
  REQUIRE(a.data_offset == header.size());
  REQUIRE(a.data_bytes == 5 * 3 * 2 * 4);
  REQUIRE(parse_npy_header(make_npy_header(DType::kUInt8, std::vector<std::int64_t>{7})).shape ==
          std::vector<std::int64_t>{7});
  REQUIRE(
      parse_npy_header(make_npy_header(DType::kBool, std::vector<std::int64_t>{})).shape.empty());
}

TEST_CASE("NpyDataset serves rows of one or several files", "[npy]") {
  TempDir dir;
  std::vector<float> images(10 * 2 * 3);
  for (std::size_t i = 0; i < images.size(); ++i) images[i] = static_cast<float>(i) * 0.5f;
  std::vector<std::int64_t> labels = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::string image_path = write_npy(dir, "images.npy", images, {10, 2, 3});
  const std::string label_path = write_npy(dir, "labels.npy", labels, {10});
  NpyDataset ds({{"image", image_path}, {"label", label_path}});
  REQUIRE(ds.size() == 10);
  const Sample s = ds.get(4);
  REQUIRE(s["image"].shape() == Shape({2, 3}));
  REQUIRE(s["image"].is_view());
  REQUIRE(s["image"].data<float>()[5] == (4 * 6 + 5) * 0.5f);
  REQUIRE(s["label"].dim() == 0);
  REQUIRE(s["label"].item<std::int64_t>() == 4);
  REQUIRE_THROWS_AS(ds.get(10), std::out_of_range);

  SECTION("through a DataLoader with workers") {
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.num_workers = 2;
    opt.shuffle = true;
    DataLoader loader(ds, opt);
    std::size_t seen = 0;
    for (const Batch& batch : loader) {
      for (std::size_t r = 0; r < batch.size(); ++r) {
        const std::size_t i = batch.indices()[r];
        REQUIRE(batch["label"].data<std::int64_t>()[r] == static_cast<std::int64_t>(i));
        REQUIRE(batch["image"].data<float>()[r * 6] == static_cast<float>(i * 6) * 0.5f);
        ++seen;
      }
    }
    REQUIRE(seen == 10);
  }
  SECTION("files whose first dimensions differ are rejected") {
    const std::string short_labels =
        write_npy(dir, "short.npy", std::vector<std::int64_t>{1, 2}, {2});
    REQUIRE_THROWS_WITH(NpyDataset({{"image", image_path}, {"label", short_labels}}),
                        Catch::Contains("has 2 rows but") && Catch::Contains("has 10"));
  }
}

TEST_CASE("format versions 2.0 and 3.0, big-endian data and bool", "[npy]") {
  TempDir dir;
  SECTION("version 2 and 3 headers") {
    for (const int version : {2, 3}) {
      std::vector<std::byte> file =
          raw_header(version, "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }   \n");
      const std::int16_t values[3] = {-5, 7, 300};
      const std::string path = dir.path + "/v" + std::to_string(version) + ".npy";
      write_bytes(path, file, values, sizeof values);
      NpyDataset ds(path, "x");
      REQUIRE(ds.array("x").major_version == version);
      REQUIRE(ds.get(2)["x"].item<std::int16_t>() == 300);
    }
  }
  SECTION("big-endian values are swapped") {
    const std::vector<std::byte> header =
        raw_header(1, "{'descr': '>f8', 'fortran_order': False, 'shape': (2, 2), }\n");
    const double values[4] = {1.5, -2.25, 1e300, 3.0};
    unsigned char swapped[sizeof values];
    std::memcpy(swapped, values, sizeof values);
    for (std::size_t e = 0; e < 4; ++e) std::reverse(swapped + 8 * e, swapped + 8 * e + 8);
    const std::string path = dir.path + "/big.npy";
    write_bytes(path, header, swapped, sizeof swapped);
    NpyDataset ds(path);
    REQUIRE(ds.array("data").big_endian);
    const Sample s = ds.get(1);
    REQUIRE_FALSE(s["data"].is_view());
    REQUIRE(s["data"].data<double>()[0] == 1e300);
    REQUIRE(s["data"].data<double>()[1] == 3.0);
  }
  SECTION("bool") {
    const std::vector<bool> flags = {true, false, true};
    std::vector<std::uint8_t> raw = {1, 0, 1};
    const std::string path = dir.path + "/b.npy";
    write_bytes(path, make_npy_header(DType::kBool, std::vector<std::int64_t>{3}), raw.data(), 3);
    NpyDataset ds(path);
    REQUIRE(ds.get(0)["data"].item<bool>());
    REQUIRE_FALSE(ds.get(1)["data"].item<bool>());
    (void)flags;
  }
}

TEST_CASE("malformed and unsupported .npy files are rejected with clear errors", "[npy]") {
  TempDir dir;
  auto file_with = [&](const std::string& name, const std::vector<std::byte>& header,
                       std::size_t data_bytes) {
    const std::string path = dir.path + "/" + name;
    const std::vector<char> zeros(data_bytes, 0);
    write_bytes(path, header, zeros.data(), zeros.size());
    return path;
  };
  const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2), }\n";
  REQUIRE_NOTHROW(NpyDataset(file_with("ok.npy", raw_header(1, ok), 32)));
  const std::vector<std::byte> full = raw_header(1, ok);
  const std::vector<std::byte> cut(full.begin(), full.begin() + 30);
  const struct {
    std::string name;
    std::vector<std::byte> header;
    std::size_t data;
    std::vector<std::string> expect;
  } cases[] = {
      {"fortran",
       raw_header(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (4, 2), }"),
       32,
       {"Fortran (column-major) order", "np.ascontiguousarray"}},
      {"object",
       raw_header(1, "{'descr': '|O', 'fortran_order': False, 'shape': (4,), }"),
       32,
       {"object dtype", "cannot be memory-mapped"}},
      {"string",
       raw_header(1, "{'descr': '<U8', 'fortran_order': False, 'shape': (4,), }"),
       128,
       {"a string dtype"}},
      {"structured",
       raw_header(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }"),
       16,
       {"structured dtype"}},
      {"complex",
       raw_header(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (4,), }"),
       32,
       {"complex"}},
      {"truncated", raw_header(1, ok), 31, {"truncated", "the file is only"}},
      {"version", raw_header(4, ok), 32, {"format version 4.0 is not supported"}},
      {"no shape",
       raw_header(1, "{'descr': '<f4', 'fortran_order': False, }"),
       32,
       {"must have 'descr', 'fortran_order' and 'shape'"}},
      {"extra key",
       raw_header(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}"),
       16,
       {"unexpected key 'x'"}},
      {"bad shape",
       raw_header(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, -2), }"),
       32,
       {"expected a non-negative integer dimension"}},
      {"cut header", cut, 0, {"the file was cut short"}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const std::string path = file_with(c.name + ".npy", c.header, c.data);
    try {
      NpyDataset ds(path);
      FAIL("accepted");
    } catch (const NpyFormatError& e) {
      const std::string what = e.what();
      REQUIRE_THAT(what, Catch::Contains(path));
      for (const std::string& part : c.expect) REQUIRE_THAT(what, Catch::Contains(part));
    }
  }
  REQUIRE_THROWS_WITH(NpyDataset(dir.path + "/missing.npy"),
                      Catch::Contains("cannot open") && Catch::Contains("No such file"));
  const std::string not_npy = file_with("plain.npy", std::vector<std::byte>(64, std::byte{'x'}), 0);
  REQUIRE_THROWS_WITH(NpyDataset(not_npy), Catch::Contains("not a .npy file"));
}

TEST_CASE("randomly damaged headers are rejected or parsed, never crash", "[npy][fuzz]") {
  // A corpus of valid headers, mutated at random (bytes flipped, cut, spliced): the parser
  // must either return a consistent result or throw NpyFormatError. Run under ASan and UBSan
  // in CI, this is the fuzz test of the header parser.
  std::mt19937_64 rng(20261130);
  std::vector<std::vector<std::byte>> corpus;
  for (const DType t : {DType::kUInt8, DType::kFloat32, DType::kInt64, DType::kBool}) {
    corpus.push_back(make_npy_header(t, std::vector<std::int64_t>{3, 224, 224}));
    corpus.push_back(make_npy_header(t, std::vector<std::int64_t>{}));
  }
  corpus.push_back(raw_header(2, "{'descr': '>u2', 'fortran_order': False, 'shape': (10L, 2), }"));
  corpus.push_back(
      raw_header(3, "{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": (1,)}"));
  std::size_t parsed = 0;
  std::size_t rejected = 0;
  for (int round = 0; round < 20000; ++round) {
    std::vector<std::byte> bytes = corpus[rng() % corpus.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      const std::size_t at = rng() % bytes.size();
      switch (rng() % 4) {
        case 0:
          bytes[at] = static_cast<std::byte>(rng());
          break;
        case 1:
          bytes.resize(at);
          break;
        case 2:
          bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                       static_cast<std::byte>("(),:'0123456789TF{} L["[rng() % 21]));
          break;
        default:
          bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(at));
          break;
      }
    }
    try {
      const NpyArray a = parse_npy_header(bytes, "fuzz");
      REQUIRE(a.data_offset <= bytes.size());
      REQUIRE(dtype_size(a.dtype) > 0);
      ++parsed;
    } catch (const NpyFormatError&) {
      ++rejected;
    }
  }
  INFO(parsed << " parsed, " << rejected << " rejected");
  REQUIRE(parsed > 0);
  REQUIRE(rejected > 0);
}

TEST_CASE("files written by NumPy itself: every version, dtype and byte order", "[npy][numpy]") {
  const std::string python = numpy_python();
  if (python.empty()) {
    WARN("no NumPy for /usr/bin/python3 (Debian's python3-numpy): cross-check skipped");
    return;
  }
  TempDir dir;
  const std::string script = dir.path + "/make.py";
  std::ofstream(script) << R"(import numpy as np, sys
from numpy.lib import format as f
d = sys.argv[1]
for code in ['<u1','|i1','<u2','>u2','<i2','>i2','<i4','>i4','<i8','>i8','<u4','<u8','<f2','>f2','<f4','>f4','<f8','>f8','|b1']:
    a = (np.arange(24).reshape(4, 3, 2) % 7).astype(code)
    for v in [(1, 0), (2, 0), (3, 0)]:
        with open(f"{d}/{code[1:]}_{'be' if code[0] == '>' else 'le'}_v{v[0]}.npy", 'wb') as fh:
            f.write_array(fh, a, version=v)
)";
  REQUIRE(std::system((python + " " + script + " " + dir.path).c_str()) == 0);
  int files = 0;
  for (const char* code :
       {"u1", "i1", "u2", "i2", "i4", "i8", "u4", "u8", "f2", "f4", "f8", "b1"}) {
    for (const char* order : {"le", "be"}) {
      for (int v = 1; v <= 3; ++v) {
        const std::string path = fmt_path(dir.path, code, order, v);
        if (access(path.c_str(), R_OK) != 0) continue;  // that code has no big-endian form
        CAPTURE(path);
        NpyDataset ds(path);
        REQUIRE(ds.size() == 4);
        REQUIRE(ds.array("data").major_version == v);
        const Sample s = ds.get(3);
        REQUIRE(s["data"].shape() == Shape({3, 2}));
        // Element (3, 2, 1) = (3 * 6 + 2 * 2 + 1) % 7 = 2; the bool array holds true there.
        const Tensor t = s["data"].clone();
        double value = 0;
        switch (t.dtype()) {
          case DType::kUInt8:
            value = t.data<std::uint8_t>()[5];
            break;
          case DType::kInt8:
            value = t.data<std::int8_t>()[5];
            break;
          case DType::kUInt16:
            value = t.data<std::uint16_t>()[5];
            break;
          case DType::kInt16:
            value = t.data<std::int16_t>()[5];
            break;
          case DType::kInt32:
            value = t.data<std::int32_t>()[5];
            break;
          case DType::kInt64:
            value = static_cast<double>(t.data<std::int64_t>()[5]);
            break;
          case DType::kUInt32:
            value = t.data<std::uint32_t>()[5];
            break;
          case DType::kUInt64:
            value = static_cast<double>(t.data<std::uint64_t>()[5]);
            break;
          case DType::kFloat16:
            value = t.data<Float16>()[5].bits == 0x4000 ? 2.0 : -1.0;
            break;
          case DType::kFloat32:
            value = t.data<float>()[5];
            break;
          case DType::kFloat64:
            value = t.data<double>()[5];
            break;
          case DType::kBool:
            value = t.data<bool>()[5] ? 2.0 : 0.0;
            break;
          default:
            FAIL("unexpected dtype");
        }
        REQUIRE(value == 2.0);
        ++files;
      }
    }
  }
  REQUIRE(files >= 3 * 19);
}

TEST_CASE("a file far larger than RAM is served without being read whole", "[npy][large]") {
  // 1,000,000 x 3 x 224 x 224 float32 is 602 GB; the sparse file takes no disk space, and a
  // few samples from its middle and end must load with the resident memory barely moving.
  TempDir dir;
  const std::string path = dir.path + "/huge.npy";
  const std::vector<std::int64_t> shape = {1000000, 3, 224, 224};
  const std::vector<std::byte> header = make_npy_header(DType::kFloat32, shape);
  const std::size_t sample = std::size_t{3} * 224 * 224 * 4;
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, header.data(), header.size()) == static_cast<ssize_t>(header.size()));
    const float marker = 42.5f;
    const off_t last = static_cast<off_t>(header.size() + sample * 999999);
    REQUIRE(::pwrite(fd, &marker, sizeof marker, last) == sizeof marker);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(header.size() + sample * 1000000)) == 0);
    ::close(fd);
  }
  NpyDataset ds(path, "image");
  REQUIRE(ds.size() == 1000000);
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  auto sampler = std::make_shared<SubsetRandomSampler>(
      std::vector<std::size_t>{0, 123456, 500000, 999999, 999998, 42, 7777, 654321});
  opt.sampler = sampler;
  DataLoader loader(ds, opt);
  bool saw_marker = false;
  for (const Batch& batch : loader) {
    for (std::size_t r = 0; r < batch.size(); ++r) {
      const float first = batch["image"].data<float>()[r * (sample / 4)];
      if (batch.indices()[r] == 999999) {
        REQUIRE(first == 42.5f);
        saw_marker = true;
      } else {
        REQUIRE(first == 0.0f);
      }
    }
  }
  REQUIRE(saw_marker);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  REQUIRE(usage.ru_maxrss < 1024 * 1024);  // KiB: far below the file's 602 GB
}
