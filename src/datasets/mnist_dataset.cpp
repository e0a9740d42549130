#include "stoker/mnist_dataset.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "datasets/shards/byte_source.hpp"
#include "os/mapped_file.hpp"
#include "os/posix.hpp"

namespace stoker {
namespace {

// IDX's element types: the magic number's third byte.
struct IdxType {
  std::uint8_t code;
  DType dtype;
  const char* name;
};
constexpr IdxType kIdxTypes[] = {
    {0x08, DType::kUInt8, "uint8"},     {0x09, DType::kInt8, "int8"},
    {0x0B, DType::kInt16, "int16"},     {0x0C, DType::kInt32, "int32"},
    {0x0D, DType::kFloat32, "float32"}, {0x0E, DType::kFloat64, "float64"},
};

const IdxType* find_type(std::uint8_t code) {
  for (const IdxType& type : kIdxTypes) {
    if (type.code == code) return &type;
  }
  return nullptr;
}

std::string type_name(std::uint8_t code) {
  const IdxType* type = find_type(code);
  return type != nullptr ? type->name : fmt::format("type 0x{:02x}", code);
}

std::string dims_text(const std::vector<std::uint64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

// A file's bytes and what keeps them alive (a mapping or a decompressed buffer).
struct FileBytes {
  std::shared_ptr<const void> owner;
  std::shared_ptr<const detail::MappedFile> mapping;  // plain files
  std::span<const std::byte> bytes;
  bool complete = true;  // false: reading stopped before the end of the file (gzip only)
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Decompresses a gzip file (zlib's inflate, as every gzip stoker reads: byte_source.hpp): its
// header first, then as many bytes as the header promises and one more (to tell a longer
// file), so neither a corrupt header nor a decompression bomb makes this allocate more than the
// data that is there.
FileBytes read_gzip(const std::string& path) {
  const std::unique_ptr<detail::StreamSource> source =
      detail::open_stream_source(path, 0, "MnistDataset");
  auto buffer = std::make_shared<std::vector<std::byte>>();
  const auto read_more = [&](std::size_t want) {
    const std::size_t have = buffer->size();
    buffer->resize(have + want);
    std::size_t got = 0;
    try {
      while (got < want) {
        const std::size_t chunk = std::min<std::size_t>(want - got, std::size_t{1} << 20);
        const std::size_t n =
            source->read(std::span<std::byte>(buffer->data() + have + got, chunk));
        if (n == 0) break;
        got += n;
      }
    } catch (const Error& e) {
      throw IdxFormatError(fmt::format(
          "MnistDataset: {}: the gzip data is cut short or corrupt after {} bytes ({}); download "
          "the file again",
          path, have + got, e.what()));
    }
    buffer->resize(have + got);
    return got == want;
  };
  read_more(4);
  std::size_t header_bytes = 4;
  if (buffer->size() == 4) header_bytes += 4 * static_cast<std::size_t>((*buffer)[3]);
  read_more(header_bytes - buffer->size());
  FileBytes out;
  out.complete = true;
  if (buffer->size() == header_bytes) {
    const IdxHeader header = parse_idx_header(*buffer, path);
    // Reserve what the header promises, up to 256 MiB; beyond, the buffer grows as data comes.
    buffer->reserve(header_bytes + std::min<std::size_t>(header.data_bytes, std::size_t{1} << 28));
    const std::size_t want = header.data_bytes;
    if (read_more(want) && want < std::numeric_limits<std::size_t>::max() - header_bytes) {
      out.complete = !read_more(1);
    }
  }
  out.bytes = std::span<const std::byte>(buffer->data(), buffer->size());
  out.owner = std::move(buffer);
  return out;
}

FileBytes read_file(const std::string& path) {
  if (ends_with(path, ".gz")) return read_gzip(path);
  struct ::stat st {};
  if (detail::posix::stat_path(path.c_str(), st) && st.st_size == 0) {
    throw IdxFormatError(fmt::format(
        "MnistDataset: {} is empty (0 bytes); the download failed: download it again", path));
  }
  std::shared_ptr<const detail::MappedFile> mapping =
      detail::MappedFile::open(path, "MnistDataset");
  FileBytes out;
  out.bytes = mapping->bytes();
  out.owner = mapping;
  out.mapping = std::move(mapping);
  return out;
}

// The file's header, checked against the file's length.
IdxHeader read_header(const FileBytes& file, const std::string& path) {
  const IdxHeader header = parse_idx_header(file.bytes, path);
  const std::size_t want = header.data_offset + header.data_bytes;  // parse checked the sum
  if (file.bytes.size() < want) {
    throw IdxFormatError(fmt::format(
        "MnistDataset: {}: the file ends after {} bytes but its header ({} {}) needs {}; it "
        "was cut short: download it again",
        path, file.bytes.size(), type_name(header.type_code), dims_text(header.dims), want));
  }
  if (file.bytes.size() > want || !file.complete) {
    throw IdxFormatError(fmt::format(
        "MnistDataset: {}: more bytes follow the {} its header ({} {}) describes; the file is "
        "not an IDX file as MNIST publishes them (or two were joined)",
        path, want, type_name(header.type_code), dims_text(header.dims)));
  }
  return header;
}

// The first of the file's usual names that exists in root.
std::string find_file(const std::string& root, std::string_view prefix, std::string_view kind,
                      int ndims) {
  const std::vector<std::string> names = {
      fmt::format("{}-{}-idx{}-ubyte", prefix, kind, ndims),
      fmt::format("{}-{}.idx{}-ubyte", prefix, kind, ndims),
  };
  std::vector<std::string> tried;
  for (const char* suffix : {"", ".gz"}) {
    for (const std::string& name : names) {
      const std::string path = (std::filesystem::path(root) / (name + suffix)).string();
      struct ::stat st {};
      if (detail::posix::stat_path(path.c_str(), st) && S_ISREG(st.st_mode)) return path;
      tried.push_back(name + suffix);
    }
  }
  throw Error(fmt::format(
      "MnistDataset: no {} {} file in {} (looked for {}); pass the folder holding the four "
      "files of MNIST, Fashion-MNIST or KMNIST (Debian: dataset-fashion-mnist installs "
      "/usr/share/datasets/fashion-mnist)",
      prefix == "train" ? "training" : "test", kind, root, fmt::join(tried, ", ")));
}

}  // namespace

IdxHeader parse_idx_header(std::span<const std::byte> bytes, std::string_view source) {
  if (bytes.size() < 4) {
    throw IdxFormatError(fmt::format(
        "idx: {}: {} bytes, shorter than an IDX header (4 bytes at least); the file was cut "
        "short or is not an IDX file",
        source, bytes.size()));
  }
  const auto byte = [&bytes](std::size_t i) { return static_cast<std::uint8_t>(bytes[i]); };
  if (byte(0) != 0 || byte(1) != 0) {
    throw IdxFormatError(fmt::format(
        "idx: {}: bad magic number 0x{:02x}{:02x}{:02x}{:02x} (an IDX file starts with two zero "
        "bytes, a type code and a dimension count); this is not an IDX file (still "
        "compressed? an error page saved in its place?)",
        source, byte(0), byte(1), byte(2), byte(3)));
  }
  IdxHeader header;
  header.type_code = byte(2);
  const IdxType* type = find_type(header.type_code);
  if (type == nullptr) {
    throw IdxFormatError(fmt::format(
        "idx: {}: unknown type code 0x{:02x} in the magic number (IDX has 0x08 uint8, 0x09 "
        "int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64); this is not an IDX file",
        source, header.type_code));
  }
  header.dtype = type->dtype;
  const std::size_t ndims = byte(3);
  header.data_offset = 4 + 4 * ndims;
  if (bytes.size() < header.data_offset) {
    throw IdxFormatError(fmt::format(
        "idx: {}: the header declares {} dimensions ({} bytes) but the file has {} bytes; it "
        "was cut short",
        source, ndims, header.data_offset, bytes.size()));
  }
  std::size_t elements = 1;
  bool overflow = false;
  header.dims.reserve(ndims);
  for (std::size_t d = 0; d < ndims; ++d) {
    const std::size_t at = 4 + 4 * d;
    const std::uint64_t dim = (std::uint64_t{byte(at)} << 24) |
                              (std::uint64_t{byte(at + 1)} << 16) |
                              (std::uint64_t{byte(at + 2)} << 8) | std::uint64_t{byte(at + 3)};
    header.dims.push_back(dim);
    overflow =
        overflow || __builtin_mul_overflow(elements, static_cast<std::size_t>(dim), &elements);
  }
  const std::size_t element_bytes = dtype_size(header.dtype);
  if (overflow || __builtin_mul_overflow(elements, element_bytes, &header.data_bytes) ||
      header.data_bytes > std::numeric_limits<std::size_t>::max() - header.data_offset) {
    throw IdxFormatError(fmt::format(
        "idx: {}: the dimensions {} describe more than SIZE_MAX bytes; the header is corrupt",
        source, dims_text(header.dims)));
  }
  return header;
}

MnistDataset::MnistDataset(const std::string& root, Mode mode, MnistOptions options)
    : mode_(mode), options_(options) {
  if (options_.image_dtype != DType::kFloat32 && options_.image_dtype != DType::kUInt8) {
    throw std::invalid_argument(fmt::format(
        "MnistDataset: MnistOptions::image_dtype is {}; pick DType::kFloat32 (pixels / 255) or "
        "DType::kUInt8 (the file's bytes)",
        dtype_name(options_.image_dtype)));
  }
  const std::string_view prefix = mode == Mode::kTrain ? "train" : "t10k";
  images_path_ = find_file(root, prefix, "images", 3);
  labels_path_ = find_file(root, prefix, "labels", 1);

  const FileBytes images = read_file(images_path_);
  const IdxHeader image_header = read_header(images, images_path_);
  if (image_header.type_code != 0x08 || image_header.dims.size() != 3) {
    throw IdxFormatError(fmt::format(
        "MnistDataset: {} holds {} {}, not the uint8 [images, rows, columns] of an MNIST image "
        "file (is it the labels file?)",
        images_path_, type_name(image_header.type_code), dims_text(image_header.dims)));
  }
  const FileBytes labels = read_file(labels_path_);
  const IdxHeader label_header = read_header(labels, labels_path_);
  if (label_header.type_code != 0x08 || label_header.dims.size() != 1) {
    throw IdxFormatError(fmt::format(
        "MnistDataset: {} holds {} {}, not the uint8 [labels] of an MNIST label file (is it "
        "the images file?)",
        labels_path_, type_name(label_header.type_code), dims_text(label_header.dims)));
  }
  if (image_header.dims[0] != label_header.dims[0]) {
    throw IdxFormatError(fmt::format(
        "MnistDataset: {} holds {} images but {} holds {} labels; the two files come from "
        "different sets (or one was cut short): use the four files of one download",
        images_path_, image_header.dims[0], labels_path_, label_header.dims[0]));
  }
  size_ = static_cast<std::size_t>(image_header.dims[0]);
  const auto n = static_cast<std::int64_t>(size_);
  images_ = Tensor::view(DType::kUInt8,
                         Shape{n, 1, static_cast<std::int64_t>(image_header.dims[1]),
                               static_cast<std::int64_t>(image_header.dims[2])},
                         const_cast<std::byte*>(images.bytes.data() + image_header.data_offset),
                         images.owner);
  labels_ = Tensor::empty(DType::kInt64, Shape{n});
  std::int64_t* out = labels_.data<std::int64_t>();
  const std::byte* in = labels.bytes.data() + label_header.data_offset;
  for (std::size_t i = 0; i < size_; ++i) out[i] = static_cast<std::int64_t>(in[i]);
  if (labels.mapping) labels.mapping->check("MnistDataset", 0);
  images_file_ = images.mapping;
  if (images_file_) images_file_->check("MnistDataset", 0);
}

Sample MnistDataset::get(std::size_t i) const {
  if (i >= size_) {
    throw std::out_of_range(fmt::format(
        "MnistDataset::get: index {} is out of range for {} samples; valid indices are 0 to "
        "size() - 1",
        i, size_));
  }
  Sample sample;
  Tensor image = images_.row(i);
  if (options_.image_dtype == DType::kFloat32) {
    Tensor pixels = Tensor::empty(DType::kFloat32, image.shape());
    const std::uint8_t* src = image.data<std::uint8_t>();
    float* dst = pixels.data<float>();
    for (std::size_t p = 0; p < image.numel(); ++p) dst[p] = static_cast<float>(src[p]) / 255.0f;
    image = std::move(pixels);
  }
  // After the pixels were read (float32), before a view of them is handed out (uint8).
  if (images_file_ && !images_file_->intact()) {
    const std::size_t row = images_.nbytes() / std::max<std::size_t>(size_, 1);
    const std::size_t at = images_file_->size() - images_.nbytes() + i * row;
    images_file_->throw_shrunk(
        fmt::format("MnistDataset::get: image {} (bytes {} to {})", i, at, at + row), at);
  }
  sample.set("image", std::move(image));
  sample.set("label", labels_.row(i));
  return sample;
}

}  // namespace stoker
