// Image fields of record shards through stoker::vision: a WebDataset shard of real JPEG and PNG
// images reads back as decoded tensors by default, through a given Pipeline when one is set,
// pixel for pixel what vision::decode and the Pipeline give on the same bytes.
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "stoker/stoker.hpp"
#include "support/files.hpp"
#include "support/images.hpp"

using namespace stoker;
namespace fs = std::filesystem;

namespace {

using stoker::test::TempDir;

Tensor bytes_tensor(const std::vector<std::uint8_t>& bytes) {
  return Tensor::from(std::span<const std::uint8_t>(bytes));
}

std::vector<std::uint8_t> pixels_of(const Tensor& t) {
  const std::uint8_t* p = t.data<std::uint8_t>();
  return std::vector<std::uint8_t>(p, p + t.numel());
}

}  // namespace

TEST_CASE("image fields of a WebDataset shard decode through stoker::vision",
          "[webdataset][images]") {
  TempDir tmp;
  std::vector<std::vector<std::uint8_t>> encoded;
  WebDatasetWriterOptions wo;
  wo.pattern = tmp.path + "/img-%03d.tar";
  WebDatasetWriter writer(wo);
  for (int i = 0; i < 6; ++i) {
    const int w = 80 + 16 * i;
    const int h = 64 + 8 * i;
    const std::vector<std::uint8_t> rgb = test::photo_pixels(w, h, static_cast<std::uint64_t>(i));
    encoded.push_back(i % 2 == 0 ? test::encode_jpeg(rgb, w, h) : test::encode_png(rgb, w, h));
    Sample s;
    s.set(i % 2 == 0 ? "jpg" : "png", bytes_tensor(encoded.back()));
    s.set("cls", Tensor::scalar<std::int64_t>(i));
    writer.write(fmt::format("s{:02}", i), s);
  }
  const std::vector<std::string> paths = writer.close();

  SECTION("by default: the decoded image, uint8 CHW") {
    WebDatasetShards ds(paths);
    REQUIRE(ds.size() == 6);
    for (std::size_t i = 0; i < 6; ++i) {
      const Sample s = ds.get(i);
      const Tensor& image = s[i % 2 == 0 ? "jpg" : "png"];
      const Tensor want = vision::Pipeline{}(encoded[i], "direct");
      REQUIRE(image.dtype() == DType::kUInt8);
      REQUIRE(image.shape() == want.shape());
      REQUIRE(image.shape()[0] == 3);
      REQUIRE(pixels_of(image) == pixels_of(want));
      REQUIRE(s["cls"].item<std::int64_t>() == static_cast<std::int64_t>(i));
    }
  }

  SECTION("through a given Pipeline, in a DataLoader with workers: stacked batches") {
    const vision::Pipeline pipeline{vision::Resize(48), vision::CenterCrop(40)};
    ShardOptions options;
    options.decoders.images(image_field(pipeline));
    options.fields = {FieldSpec{"jpg;png", "image", {}}, FieldSpec{"cls", "", {}}};
    LoaderOptions opt;
    opt.batch_size = 3;
    opt.num_workers = 2;
    DataLoader loader(WebDatasetShards(paths, options), opt);
    std::size_t rows = 0;
    for (const Batch& b : loader) {
      const Tensor& images = b["image"];  // jpg and png records under one name
      REQUIRE(images.shape() == Shape{3, 3, 40, 40});
      for (std::size_t r = 0; r < b.size(); ++r) {
        const std::size_t i = b.indices()[r];
        const std::vector<std::uint8_t> want = pixels_of(pipeline(encoded[i], "direct"));
        const std::uint8_t* got = images.data<std::uint8_t>() + r * want.size();
        REQUIRE(std::vector<std::uint8_t>(got, got + want.size()) == want);
        REQUIRE(b["cls"].data<std::int64_t>()[r] == static_cast<std::int64_t>(i));
      }
      rows += b.size();
    }
    REQUIRE(rows == 6);
  }
}
