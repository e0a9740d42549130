// TFRecordDataset: TensorFlow's TFRecord files of tf.train.Example records, read without
// TensorFlow. The program writes two files with TFRecordWriter (record k: "id" = k, "score" =
// k / 2 and "caption", bytes), reads them map-style with two workers in a shuffled order
// (each record once), then streams them, and finally reads a copy with one corrupt byte under
// OnSampleError::kSkip: the bad record is skipped and counted, the rest is read.
//
//   tfrecord_reader [--records N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <stoker/stoker.hpp>

namespace {

std::string write_file(const std::string& path, std::int64_t first, std::int64_t count) {
  stoker::TFRecordWriter writer(path);
  for (std::int64_t k = first; k < first + count; ++k) {
    const std::string caption = "record " + std::to_string(k);
    stoker::Sample s;
    s.set("id", stoker::Tensor::scalar<std::int64_t>(k));
    s.set("score", stoker::Tensor::scalar<float>(static_cast<float>(k) / 2));
    s.set("caption", stoker::Tensor::from(std::span<const std::uint8_t>(
                         reinterpret_cast<const std::uint8_t*>(caption.data()), caption.size())));
    writer.write_example(s);
  }
  writer.close();
  return path;
}

// The ids of one epoch, and whether every score matched its id.
template <class Loader>
std::vector<std::int64_t> read_epoch(Loader& loader, bool& scores_ok) {
  std::vector<std::int64_t> ids;
  for (const stoker::Batch& batch : loader) {
    const std::int64_t* id = batch["id"].data<std::int64_t>();  // [B]: a scalar feature
    const float* score = batch["score"].data<float>();
    for (std::size_t i = 0; i < batch.size(); ++i) {
      scores_ok = scores_ok && score[i] == static_cast<float>(id[i]) / 2;
      ids.push_back(id[i]);
    }
  }
  return ids;
}

bool each_once(std::vector<std::int64_t> ids, std::int64_t n) {
  std::sort(ids.begin(), ids.end());
  for (std::int64_t k = 0; k < n; ++k) {
    if (ids.size() != static_cast<std::size_t>(n) || ids[static_cast<std::size_t>(k)] != k)
      return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t records = 1000;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::puts(
          "usage: tfrecord_reader [--records N]\n"
          "Writes N tf.train.Example records into two TFRecord files and reads them back\n"
          "map-style, streaming, and with a damaged record skipped.");
      return 0;
    }
    if (arg == "--records" && i + 1 < argc) {
      records = std::atoll(argv[++i]);
      if (records < 10) {
        std::fprintf(stderr, "tfrecord_reader: --records needs a number >= 10\n");
        return 2;
      }
      continue;
    }
    std::fprintf(stderr, "tfrecord_reader: unknown argument %s (try --help)\n", argv[i]);
    return 2;
  }
  char dir_template[] = "/tmp/stoker-tfrecord-example-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  int status = 1;
  try {
    const std::vector<std::string> files = {
        write_file(dir + "/train-0.tfrecord", 0, records / 2),
        write_file(dir + "/train-1.tfrecord", records / 2, records - records / 2)};
    stoker::TFRecordOptions options;
    options.fields = {{"id", "", {}}, {"score", "", {}}};  // caption left out: it is ragged
    options.scalar_features = {"id", "score"};             // [B] batches instead of [B, 1]

    stoker::LoaderOptions opt;
    opt.batch_size = 64;
    opt.num_workers = 2;
    opt.shuffle = true;
    opt.seed = 7;
    stoker::DataLoader loader(stoker::TFRecordDataset(files, options), opt);
    bool ok = true;
    const std::vector<std::int64_t> shuffled = read_epoch(loader, ok);
    std::printf("map-style: %zu records from %zu files, 2 workers, shuffled: %s\n", shuffled.size(),
                loader.dataset().num_shards(),
                each_once(shuffled, records) ? "every record once" : "RECORDS MISSING");
    ok = ok && each_once(shuffled, records);

    stoker::StreamOptions stream;  // the stream shuffles itself: shards, then a buffer
    stream.seed = 7;
    opt.shuffle = false;
    stoker::DataLoader streamed(stoker::TFRecordDataset::stream(files, stream, options), opt);
    const std::vector<std::int64_t> ids = read_epoch(streamed, ok);
    std::printf("streaming: %zu records through a shuffle buffer of %zu: %s\n", ids.size(),
                stream.shuffle_buffer,
                each_once(ids, records) ? "every record once" : "RECORDS MISSING");
    ok = ok && each_once(ids, records);

    // A copy of the first file with one byte of record 3's caption changed: its CRC fails.
    std::ifstream in(files[0], std::ios::binary);
    std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    bytes[bytes.find("record 3") + 1] ^= 1;
    const std::string damaged = dir + "/damaged.tfrecord";
    std::ofstream(damaged, std::ios::binary) << bytes;
    opt.on_sample_error = stoker::OnSampleError::kSkip;
    stoker::DataLoader skipping(stoker::TFRecordDataset({damaged}, options), opt);
    const std::vector<std::int64_t> rest = read_epoch(skipping, ok);
    const auto skipped = skipping.stats().skipped_samples;
    std::printf("damaged copy: %zu records read, %llu skipped (a bad CRC)\n", rest.size(),
                static_cast<unsigned long long>(skipped));
    ok = ok && skipped == 1 && rest.size() == static_cast<std::size_t>(records / 2 - 1) &&
         std::find(rest.begin(), rest.end(), 3) == rest.end();
    status = ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tfrecord_reader: %s\n", e.what());
  }
  (void)!std::system(("rm -rf " + dir).c_str());
  return status;
}
