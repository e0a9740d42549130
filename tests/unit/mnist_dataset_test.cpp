// Unit tests for include/stoker/mnist_dataset.hpp: the IDX header parser, MnistDataset on IDX
// files the test writes (plain and gzip), the errors for corrupt, cut-short and mismatched
// files, and the real Fashion-MNIST files of Debian's dataset-fashion-mnist when installed.
#include "stoker/mnist_dataset.hpp"

#include <catch2/catch.hpp>

#include "support/error_message.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#if STOKER_HAS_ZLIB
#include <zlib.h>
#endif

namespace stoker {
namespace {

using Catch::Contains;
using Bytes = std::vector<std::uint8_t>;

using test::message_of;

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char name[] = "/tmp/stoker-mnist-XXXXXX";
    path = mkdtemp(name);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

// An IDX file: the magic (type code, dimension count), the big-endian dimensions, the data.
Bytes idx(std::uint8_t type_code, const std::vector<std::uint32_t>& dims, const Bytes& data) {
  Bytes out = {0, 0, type_code, static_cast<std::uint8_t>(dims.size())};
  for (const std::uint32_t d : dims) {
    for (const int shift : {24, 16, 8, 0}) out.push_back(static_cast<std::uint8_t>(d >> shift));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// n images of rows x cols with pixel p of image i = (7 i + p) mod 256, and labels i mod 10.
Bytes image_file(std::uint32_t n, std::uint32_t rows, std::uint32_t cols) {
  Bytes pixels;
  for (std::uint32_t i = 0; i < n; ++i) {
    for (std::uint32_t p = 0; p < rows * cols; ++p) {
      pixels.push_back(static_cast<std::uint8_t>((7 * i + p) % 256));
    }
  }
  return idx(0x08, {n, rows, cols}, pixels);
}
Bytes label_file(std::uint32_t n) {
  Bytes labels;
  for (std::uint32_t i = 0; i < n; ++i) labels.push_back(static_cast<std::uint8_t>(i % 10));
  return idx(0x08, {n}, labels);
}

void write(const std::filesystem::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

#if STOKER_HAS_ZLIB
void write_gzip(const std::filesystem::path& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  REQUIRE(gzclose(file) == Z_OK);
}
#endif

std::span<const std::byte> as_bytes(const Bytes& b) {
  return {reinterpret_cast<const std::byte*>(b.data()), b.size()};
}

TEST_CASE("parse_idx_header reads every IDX type and checks every length", "[mnist]") {
  const IdxHeader h = parse_idx_header(as_bytes(idx(0x0C, {2, 3}, {})), "f");
  REQUIRE(h.type_code == 0x0C);
  REQUIRE(h.dtype == DType::kInt32);
  REQUIRE(h.dims == std::vector<std::uint64_t>{2, 3});
  REQUIRE(h.data_offset == 12);
  REQUIRE(h.data_bytes == 24);
  const std::vector<std::pair<std::uint8_t, DType>> types = {
      {0x08, DType::kUInt8}, {0x09, DType::kInt8},    {0x0B, DType::kInt16},
      {0x0C, DType::kInt32}, {0x0D, DType::kFloat32}, {0x0E, DType::kFloat64}};
  for (const auto& [code, dtype] : types) {
    REQUIRE(parse_idx_header(as_bytes(idx(code, {5}, {}))).dtype == dtype);
  }
  REQUIRE(parse_idx_header(as_bytes(idx(0x08, {256, 65536}, {}))).data_bytes == 256 * 65536);

  REQUIRE_THAT(message_of<IdxFormatError>([] {
                 parse_idx_header(as_bytes({0, 0, 8}), "a.idx");
               }),
               Contains("idx: a.idx: 3 bytes, shorter than an IDX header"));
  REQUIRE_THAT(message_of<IdxFormatError>([] {
                 parse_idx_header(as_bytes({0x1f, 0x8b, 8, 0}), "b.idx");
               }),
               Contains("idx: b.idx: bad magic number 0x1f8b0800") && Contains("still compressed"));
  REQUIRE_THAT(message_of<IdxFormatError>([] { parse_idx_header(as_bytes(idx(0x0A, {1}, {}))); }),
               Contains("unknown type code 0x0a"));
  Bytes cut = idx(0x08, {1, 2, 3}, {});
  cut.resize(13);
  REQUIRE_THAT(message_of<IdxFormatError>([&] { parse_idx_header(as_bytes(cut), "c"); }),
               Contains("the header declares 3 dimensions (16 bytes) but the file has 13 bytes"));
  const Bytes huge = idx(0x0E, {0xffffffff, 0xffffffff, 0xffffffff}, {});
  REQUIRE_THAT(message_of<IdxFormatError>([&] { parse_idx_header(as_bytes(huge)); }),
               Contains("describe more than SIZE_MAX bytes"));
}

TEST_CASE("MnistDataset reads plain IDX files as uint8 or float images", "[mnist]") {
  TempDir dir;
  write(dir.path / "train-images-idx3-ubyte", image_file(5, 3, 4));
  write(dir.path / "train-labels-idx1-ubyte", label_file(5));
  write(dir.path / "t10k-images.idx3-ubyte", image_file(2, 3, 4));  // the other spelling
  write(dir.path / "t10k-labels.idx1-ubyte", label_file(2));

  const MnistDataset bytes(dir.str(), MnistDataset::Mode::kTrain, {.image_dtype = DType::kUInt8});
  REQUIRE(bytes.size() == 5);
  REQUIRE(bytes.is_train());
  REQUIRE(bytes.images().shape() == Shape{5, 1, 3, 4});
  REQUIRE(bytes.labels().shape() == Shape{5});
  const Sample s = bytes.get(3);
  REQUIRE(s["image"].shape() == Shape{1, 3, 4});
  REQUIRE(s["image"].dtype() == DType::kUInt8);
  REQUIRE(s["image"].data<std::uint8_t>()[5] == 7 * 3 + 5);
  REQUIRE(s["label"].dim() == 0);
  REQUIRE(s["label"].item<std::int64_t>() == 3);

  const MnistDataset floats(dir.str());  // float32 by default, as libtorch's MNIST
  const Tensor image = floats.get(4)["image"];
  REQUIRE(image.dtype() == DType::kFloat32);
  for (std::size_t p = 0; p < 12; ++p) {
    REQUIRE(image.data<float>()[p] == static_cast<float>((28 + p) % 256) / 255.0f);
  }
  REQUIRE_THROWS_AS(floats.get(5), std::out_of_range);

  const MnistDataset test(dir.str(), MnistDataset::Mode::kTest);
  REQUIRE(test.size() == 2);
  REQUIRE(!test.is_train());
  REQUIRE(test.images_path() == (dir.path / "t10k-images.idx3-ubyte").string());
  REQUIRE_THROWS_AS(
      MnistDataset(dir.str(), MnistDataset::Mode::kTrain, {.image_dtype = DType::kInt64}),
      std::invalid_argument);
}

TEST_CASE("MnistDataset refuses corrupt, cut-short and mismatched files, naming them", "[mnist]") {
  TempDir dir;
  const auto images = dir.path / "train-images-idx3-ubyte";
  const auto labels = dir.path / "train-labels-idx1-ubyte";
  const auto load = [&] { MnistDataset(dir.str()); };

  REQUIRE_THAT(message_of<Error>(load),
               Contains("MnistDataset: no training images file in " + dir.str()) &&
                   Contains("train-images-idx3-ubyte.gz"));
  write(images, image_file(4, 2, 2));
  write(labels, label_file(3));
  REQUIRE_THAT(message_of<IdxFormatError>(load), Contains(images.string() + " holds 4 images but " +
                                                          labels.string() + " holds 3 labels"));

  Bytes cut = image_file(4, 2, 2);
  cut.pop_back();
  write(images, cut);
  REQUIRE_THAT(message_of<IdxFormatError>(load),
               Contains(images.string() + ": the file ends after 31 bytes but its header (uint8 "
                                          "[4, 2, 2]) needs 32; it was cut short"));
  Bytes longer = image_file(4, 2, 2);
  longer.push_back(0);
  write(images, longer);
  REQUIRE_THAT(message_of<IdxFormatError>(load), Contains("more bytes follow the 32"));

  write(images, label_file(4));  // the labels where the images should be
  REQUIRE_THAT(message_of<IdxFormatError>(load),
               Contains("holds uint8 [4], not the uint8 [images, rows, columns]"));
  write(images, {'<', 'h', 't', 'm', 'l', '>'});
  REQUIRE_THAT(message_of<IdxFormatError>(load), Contains(images.string() + ": bad magic number"));
  write(images, {});
  REQUIRE_THAT(message_of<IdxFormatError>(load), Contains(images.string() + " is empty"));
}

#if STOKER_HAS_ZLIB
TEST_CASE("MnistDataset reads gzip-compressed files and rejects cut-short ones", "[mnist]") {
  TempDir dir;
  const auto images = dir.path / "t10k-images-idx3-ubyte.gz";
  write_gzip(images, image_file(6, 5, 5));
  write_gzip(dir.path / "t10k-labels-idx1-ubyte.gz", label_file(6));
  const MnistDataset test(dir.str(), MnistDataset::Mode::kTest, {.image_dtype = DType::kUInt8});
  REQUIRE(test.size() == 6);
  REQUIRE(test.get(5)["image"].data<std::uint8_t>()[24] == 7 * 5 + 24);
  REQUIRE(test.get(5)["label"].item<std::int64_t>() == 5);

  // Cut the compressed file in the middle of its stream.
  const auto size = std::filesystem::file_size(images);
  std::filesystem::resize_file(images, size / 2);
  REQUIRE_THAT(
      message_of<IdxFormatError>([&] { MnistDataset(dir.str(), MnistDataset::Mode::kTest); }),
      Contains(images.string()) && Contains("cut short"));
  // A .gz file that is not gzip at all: inflate refuses its header.
  write(images, {'n', 'o', 't', ' ', 'g', 'z', 'i', 'p'});
  REQUIRE_THAT(
      message_of<IdxFormatError>([&] { MnistDataset(dir.str(), MnistDataset::Mode::kTest); }),
      Contains(images.string() + ": the gzip data is cut short or corrupt") &&
          Contains("incorrect header check"));
}
#endif

TEST_CASE("MnistDataset reads Debian's Fashion-MNIST files", "[mnist]") {
  const std::string root = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(root + "/train-labels-idx1-ubyte.gz")) {
    WARN("skipped: " << root << " is not installed (Debian: dataset-fashion-mnist)");
    return;
  }
#if !STOKER_HAS_ZLIB
  WARN("skipped: stoker was built without zlib, and Debian's Fashion-MNIST files are .gz");
  return;
#endif
  for (const auto mode : {MnistDataset::Mode::kTrain, MnistDataset::Mode::kTest}) {
    const MnistDataset data(root, mode, {.image_dtype = DType::kUInt8});
    const std::size_t n = mode == MnistDataset::Mode::kTrain ? 60000 : 10000;
    REQUIRE(data.size() == n);
    REQUIRE(data.images().shape() == Shape{static_cast<std::int64_t>(n), 1, 28, 28});
    // Fashion-MNIST is balanced: n / 10 of each of its 10 classes. Its first item, in both
    // sets, is an ankle boot (class 9).
    std::vector<std::size_t> per_class(10, 0);
    const std::int64_t* labels = data.labels().data<std::int64_t>();
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE((labels[i] >= 0 && labels[i] < 10));
      ++per_class[static_cast<std::size_t>(labels[i])];
    }
    REQUIRE(per_class == std::vector<std::size_t>(10, n / 10));
    REQUIRE(data.get(0)["label"].item<std::int64_t>() == 9);
  }
}

}  // namespace
}  // namespace stoker
