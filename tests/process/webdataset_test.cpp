// WebDataset tar shards through the DataLoader: shards written by WebDatasetWriter and by GNU tar
// (ustar, pax, GNU long names) read back exactly; map-style and streaming reading with every
// sample once, in order, deterministic for num_workers 0/1/2/4, and resumed exactly; equal
// batches on every rank from shards of unequal sizes; compressed shards and pipes; damaged and
// truncated shards.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "stoker/webdataset.hpp"
#include "support/clean_state.hpp"
#include "support/datasets.hpp"
#include "support/files.hpp"

using namespace stoker;
namespace fs = std::filesystem;

namespace {

// A scratch directory, removed with its contents.
using stoker::test::TempDir;

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

std::string bin_of(std::size_t i) {
  std::string b(8, '\0');
  for (std::size_t k = 0; k < 8; ++k) b[k] = static_cast<char>((i * 7 + k * 31) % 256);
  return b;
}
std::string txt_of(std::size_t i) {
  return "sample " + std::string(i % 5 + 1, 'x') + std::to_string(i);
}

// Shards of the given sizes; sample i (counted across shards) has fields "index" (i as text),
// "bin" (8 bytes from i) and "txt" (a string whose length varies).
std::vector<std::string> write_shards(const std::string& dir,
                                      const std::vector<std::size_t>& sizes) {
  std::vector<std::string> paths;
  std::size_t next = 0;
  for (std::size_t j = 0; j < sizes.size(); ++j) {
    WebDatasetWriterOptions options;
    options.pattern = dir + "/part" + std::to_string(j) + "-%d.tar";
    WebDatasetWriter writer(options);
    for (std::size_t k = 0; k < sizes[j]; ++k, ++next) {
      const std::string index = std::to_string(next);
      const std::string bin = bin_of(next);
      const std::string txt = txt_of(next);
      const std::pair<std::string, std::span<const std::byte>> fields[] = {
          {"index", as_bytes(index)}, {"bin", as_bytes(bin)}, {"txt", as_bytes(txt)}};
      writer.write(fmt::format("s{:06}", next), fields);
    }
    const std::vector<std::string> written = writer.close();
    REQUIRE(written.size() == (sizes[j] == 0 ? 0u : 1u));
    if (!written.empty()) paths.push_back(written[0]);
  }
  return paths;
}

// "index" and "bin" as they are, "noise" = the first draw of sample_rng() in the record's
// decoding, "worker" = the id of the worker that decoded it (-1 in the main process).
ShardOptions test_fields() {
  ShardOptions o;
  o.fields.push_back(FieldSpec{"index", "", {}});
  o.fields.push_back(FieldSpec{"bin", "", {}});
  o.fields.push_back(
      FieldSpec{"index", "noise", [](std::span<const std::uint8_t>, std::string_view) {
                  return Tensor::scalar<std::uint64_t>(sample_rng().next());
                }});
  o.fields.push_back(FieldSpec{
      "index", "worker", [](std::span<const std::uint8_t>, std::string_view) {
        const WorkerInfo* w = worker_info();
        return Tensor::scalar<std::int64_t>(w == nullptr ? -1 : static_cast<std::int64_t>(w->id));
      }});
  return o;
}

struct Epoch {
  std::vector<std::int64_t> index;  // delivery order
  std::map<std::int64_t, std::uint64_t> noise;
  std::vector<std::int64_t> worker;  // of each batch's first sample
  std::size_t batches = 0;
};

template <class D>
Epoch run_epoch(DataLoader<D>& loader, std::size_t max_batches = ~std::size_t{0}) {
  Epoch e;
  for (const Batch& batch : loader) {
    const std::int64_t* index = batch["index"].data<std::int64_t>();
    const std::uint64_t* noise = batch["noise"].data<std::uint64_t>();
    const std::uint8_t* bin = batch["bin"].data<std::uint8_t>();
    for (std::size_t r = 0; r < batch.size(); ++r) {
      e.index.push_back(index[r]);
      e.noise[index[r]] = noise[r];
      const std::string expected = bin_of(static_cast<std::size_t>(index[r]));
      REQUIRE(std::memcmp(bin + 8 * r, expected.data(), 8) == 0);
    }
    e.worker.push_back(batch["worker"].data<std::int64_t>()[0]);
    if (++e.batches == max_batches) break;
  }
  return e;
}

std::vector<std::int64_t> sorted(std::vector<std::int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}
std::vector<std::int64_t> iota(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

[[maybe_unused]] std::string read_file(const std::string& path) {  // the stoker-shard test
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string field_string(const Sample& s, std::string_view name) {
  const Tensor& t = s[name];
  return std::string(reinterpret_cast<const char*>(t.raw_data()), t.nbytes());
}

}  // namespace

TEST_CASE("shards written by GNU tar (ustar, pax, gnu, long names) read back exactly",
          "[webdataset]") {
  if (std::system("tar --version > /dev/null 2>&1") != 0) FAIL("GNU tar is not installed");
  TempDir tmp("gnutar");
  const std::string long_dir = "samples/" + std::string(120, 'd');
  std::map<std::string, std::map<std::string, std::string>> expected;  // key -> field -> bytes
  for (int i = 0; i < 12; ++i) {
    const std::string dir = i % 3 == 0 ? long_dir : "samples/short";
    // Names past 100 bytes need pax or GNU long names; ustar fits them in prefix + name.
    const std::string stem =
        i % 4 == 1 ? "img" + std::string(90, 'n') + std::to_string(i) : "img" + std::to_string(i);
    const std::string key = dir + "/" + stem;
    expected[key]["cls"] = std::to_string(i % 10);
    expected[key]["txt"] =
        "caption " + std::to_string(i) + std::string(static_cast<std::size_t>(i * 100), '!');
    expected[key]["seg.png"] = std::string(static_cast<std::size_t>(i), '\x89');
    for (const auto& [field, bytes] : expected[key]) {
      write_text(tmp.path + "/src/" + key + "." + field, bytes);
    }
  }
  const char* formats[] = {"pax", "gnu", "ustar"};
  for (const char* format : formats) {
    CAPTURE(format);
    const std::string shard = tmp.path + "/" + format + ".tar";
    if (std::string(format) == "ustar") {
      // ustar's name + prefix cannot hold the 90-byte file names: only the short ones.
      REQUIRE(std::system(("cd " + tmp.path +
                           "/src && find samples -name 'img?.*' -o -name "
                           "'img1?.*' | sort | tar --format=ustar -cf " +
                           shard + " --no-recursion -T -")
                              .c_str()) == 0);
    } else {
      REQUIRE(std::system(("cd " + tmp.path + "/src && tar --format=" + std::string(format) +
                           " --sort=name -cf " + shard + " samples")
                              .c_str()) == 0);
    }
    ShardOptions options;
    options.decoders = FieldDecoders();  // raw bytes, to compare
    WebDatasetShards ds({shard}, options);
    REQUIRE(ds.bad_records() == 0);
    std::size_t checked = 0;
    for (std::size_t i = 0; i < ds.size(); ++i) {
      const Sample s = ds.get(i);
      REQUIRE(s.size() == 3);
      // Which key? The txt field says the number.
      const std::string txt = field_string(s, "txt");
      bool found = false;
      for (const auto& [key, fields] : expected) {
        if (fields.at("txt") != txt) continue;
        found = true;
        REQUIRE(field_string(s, "cls") == fields.at("cls"));
        REQUIRE(field_string(s, "seg.png") == fields.at("seg.png"));
      }
      REQUIRE(found);
      ++checked;
    }
    REQUIRE(checked == (std::string(format) == "ustar" ? 9u : 12u));
    // The same shard streamed gives the same samples.
    StreamOptions so;
    so.shuffle = false;
    ShardedStream stream = WebDatasetShards::stream({shard}, so, options);
    std::size_t streamed = 0;
    while (auto s = stream.next()) {
      REQUIRE(field_string(*s, "txt") == field_string(ds.get(streamed), "txt"));
      ++streamed;
    }
    REQUIRE(streamed == checked);
  }
}

TEST_CASE("WebDatasetWriter shards round-trip every field, and their index is the reader's",
          "[webdataset]") {
  TempDir tmp("writer");
  WebDatasetWriterOptions wo;
  wo.pattern = tmp.path + "/w-%03d.tar";
  wo.max_shard_bytes = 8 * 1024;  // several shards
  WebDatasetWriter writer(wo);
  for (int i = 0; i < 40; ++i) {
    Sample s;
    s.set("bin", Tensor::from(std::vector<std::uint8_t>(static_cast<std::size_t>(100 + i),
                                                        static_cast<std::uint8_t>(i))));
    s.set("cls", Tensor::scalar<std::int32_t>(i % 7));
    s.set("emb", Tensor::from<float>({static_cast<float>(i), 0.5f, -1.0f}, Shape{3, 1}));
    s.set(std::string(120, 'n'), Tensor::from<std::uint8_t>({1, 2}));  // needs a pax path
    writer.write(fmt::format("k{:03}", i), s);
  }
  const std::vector<std::string> paths = writer.close();
  REQUIRE(paths.size() > 2);
  for (const std::string& p : paths) {
    REQUIRE(fs::file_size(p) <= 8 * 1024);
    REQUIRE(fs::exists(p + ".idx"));
    // GNU tar agrees it is a tar archive.
    REQUIRE(std::system(("tar -tf " + p + " > /dev/null").c_str()) == 0);
  }
  const auto idx_mtime = fs::last_write_time(paths[0] + ".idx");
  WebDatasetShards ds(paths);
  REQUIRE(fs::last_write_time(paths[0] + ".idx") == idx_mtime);  // the writer's index is used
  REQUIRE(ds.size() == 40);
  for (std::size_t i = 0; i < 40; ++i) {
    const Sample s = ds.get(i);
    REQUIRE(s["bin"].numel() == 100 + i);
    REQUIRE(s["bin"].data<std::uint8_t>()[0] == i);
    REQUIRE(s["cls"].item<std::int64_t>() == static_cast<std::int64_t>(i % 7));
    const Tensor& emb = s["emb.npy"];
    REQUIRE(emb.dtype() == DType::kFloat32);
    REQUIRE(emb.shape() == Shape{3, 1});
    REQUIRE(emb.data<float>()[0] == static_cast<float>(i));
    REQUIRE(s[std::string(120, 'n')].numel() == 2);
  }
  // Indexing the shards again, without the writer's index, gives the same records.
  for (const std::string& p : paths) fs::remove(p + ".idx");
  ShardOptions memory_only;
  memory_only.write_index = false;
  WebDatasetShards again(paths, memory_only);
  REQUIRE_FALSE(fs::exists(paths[0] + ".idx"));
  REQUIRE(again.size() == 40);
  REQUIRE(again.get(39)["emb.npy"].data<float>()[0] == 39.0f);
  // An index directory that cannot be written: the index stays in memory.
  ShardOptions read_only;
  read_only.index_dir = "/proc/stoker-no-such-dir";
  REQUIRE(WebDatasetShards(paths, read_only).size() == 40);
}

TEST_CASE("map-style shards: every sample once, in order, the same for any num_workers",
          "[webdataset]") {
  TempDir tmp("map");
  const std::vector<std::string> paths = write_shards(tmp.path, {13, 40, 1, 0, 26});
  WebDatasetShards ds(paths, test_fields());
  REQUIRE(ds.size() == 80);
  REQUIRE(ds.num_shards() == 4);
  REQUIRE(ds.locate(53) == std::pair<std::size_t, std::uint64_t>{2, 0});
  std::optional<Epoch> first;
  for (const int workers : {0, 1, 2, 4}) {
    CAPTURE(workers);
    LoaderOptions opt;
    opt.batch_size = 7;
    opt.num_workers = workers;
    opt.shuffle = true;
    opt.seed = 5;
    DataLoader loader(ds, opt);
    const Epoch e = run_epoch(loader);
    REQUIRE(sorted(e.index) == iota(80));
    REQUIRE(e.batches == 12);
    if (!first) {
      first = e;
      REQUIRE(e.index != iota(80));  // shuffled
    } else {
      REQUIRE(e.index == first->index);
      REQUIRE(e.noise == first->noise);
    }
  }
  // Sequential: shard order.
  LoaderOptions seq;
  seq.batch_size = 16;
  seq.num_workers = 2;
  DataLoader loader(ds, seq);
  REQUIRE(run_epoch(loader).index == iota(80));
}

TEST_CASE("map-style shards resume through DataLoader::state()", "[webdataset]") {
  TempDir tmp("mapresume");
  const std::vector<std::string> paths = write_shards(tmp.path, {30, 30});
  WebDatasetShards ds(paths, test_fields());
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  opt.shuffle = true;
  opt.seed = 3;
  DataLoader full(ds, opt);
  const Epoch all = run_epoch(full);
  DataLoader first(ds, opt);
  std::string state;
  {
    std::size_t seen = 0;
    for (const Batch& b : first) {
      (void)b;
      if (++seen == 6) {
        state = first.state();
        break;
      }
    }
  }
  opt.num_workers = 1;
  DataLoader resumed(ds, opt);
  resumed.load_state(state);
  const Epoch rest = run_epoch(resumed);
  REQUIRE(rest.index == std::vector<std::int64_t>(all.index.begin() + 24, all.index.end()));
}

TEST_CASE("streamed shards: each rank's batches, ordered by worker, deterministic",
          "[webdataset][stream]") {
  TempDir tmp("stream");
  const std::vector<std::string> paths = write_shards(tmp.path, {17, 3, 44, 9, 27});
  const std::size_t total = 100;
  // The map-style noise of each index: streaming must draw the same (sample_rng keyed by index).
  std::map<std::int64_t, std::uint64_t> map_noise;
  {
    LoaderOptions opt;
    opt.batch_size = 10;
    opt.seed = 21;
    DataLoader loader(WebDatasetShards(paths, test_fields()), opt);
    map_noise = run_epoch(loader).noise;
  }
  for (const int workers : {0, 1, 2, 4}) {
    for (const EqualBatches policy : {EqualBatches::kPad, EqualBatches::kDrop}) {
      CAPTURE(workers, policy == EqualBatches::kPad);
      std::map<std::int64_t, int> count;
      std::set<std::size_t> batches_per_rank;
      for (std::size_t rank = 0; rank < 3; ++rank) {
        StreamOptions so;
        so.seed = 8;
        so.shuffle_buffer = 16;
        so.rank = rank;
        so.world_size = 3;
        so.equal_batches = policy;
        LoaderOptions opt;
        opt.batch_size = 5;
        opt.num_workers = workers;
        opt.seed = 21;
        ShardedStream stream = WebDatasetShards::stream(paths, so, test_fields());
        const StreamSplit split = stream.split(workers);
        DataLoader loader(std::move(stream), opt);
        const Epoch e = run_epoch(loader);
        batches_per_rank.insert(e.batches);
        REQUIRE(e.batches == split.batches_per_stream(5, false) *
                                 static_cast<std::size_t>(std::max(workers, 1)));
        if (workers >= 2) {  // batch k from worker k mod W
          for (std::size_t k = 0; k < e.worker.size(); ++k) {
            REQUIRE(e.worker[k] ==
                    static_cast<std::int64_t>(k % static_cast<std::size_t>(workers)));
          }
        }
        for (const std::int64_t i : e.index) ++count[i];
        for (const auto& [i, noise] : e.noise) REQUIRE(noise == map_noise.at(i));
        if (rank == 1) {  // the same again: deterministic
          ShardedStream again = WebDatasetShards::stream(paths, so, test_fields());
          DataLoader loader2(std::move(again), opt);
          REQUIRE(run_epoch(loader2).index == e.index);
        }
      }
      REQUIRE(batches_per_rank.size() == 1);  // every rank the same number of batches
      const StreamSplit split = plan_stream_split(total, 3, workers, policy);
      std::size_t repeats = 0;
      for (const auto& [i, n] : count) {
        REQUIRE(n <= 2);
        repeats += static_cast<std::size_t>(n - 1);
      }
      if (policy == EqualBatches::kPad) {
        REQUIRE(count.size() == total);
        REQUIRE(repeats == split.repeated);
      } else {
        REQUIRE(repeats == 0);
        REQUIRE(count.size() == total - split.dropped);
      }
    }
  }
}

TEST_CASE("a stream without shuffling reads the shards in order, and shuffles per epoch",
          "[webdataset][stream]") {
  TempDir tmp("order");
  const std::vector<std::string> paths = write_shards(tmp.path, {10, 20, 6});
  StreamOptions so;
  so.shuffle = false;
  LoaderOptions opt;
  opt.batch_size = 6;
  DataLoader plain(WebDatasetShards::stream(paths, so, test_fields()), opt);
  REQUIRE(run_epoch(plain).index == iota(36));
  so.shuffle = true;
  so.shuffle_buffer = 8;
  opt.num_workers = 2;
  opt.persistent_workers = true;
  DataLoader shuffled(WebDatasetShards::stream(paths, so, test_fields()), opt);
  const Epoch e0 = run_epoch(shuffled);
  const Epoch e1 = run_epoch(shuffled);
  REQUIRE(sorted(e0.index) == iota(36));
  REQUIRE(sorted(e1.index) == iota(36));
  REQUIRE(e0.index != e1.index);
  REQUIRE(e0.index != iota(36));
}

TEST_CASE("a streamed epoch resumes with exactly the remaining samples", "[webdataset][stream]") {
  TempDir tmp("resume");
  const std::vector<std::string> paths = write_shards(tmp.path, {23, 41, 12, 30});
  StreamOptions so;
  so.seed = 4;
  so.shuffle_buffer = 10;
  so.world_size = 2;
  so.rank = 1;
  for (const int workers : {0, 1, 2, 4}) {
    CAPTURE(workers);
    LoaderOptions opt;
    opt.batch_size = 3;
    opt.num_workers = workers;
    opt.seed = 6;
    DataLoader full(WebDatasetShards::stream(paths, so, test_fields()), opt);
    full.set_epoch(2);
    const Epoch all = run_epoch(full);
    const std::size_t stop = 5;  // batches taken before the "checkpoint"
    std::string state;
    {
      DataLoader partial(WebDatasetShards::stream(paths, so, test_fields()), opt);
      partial.set_epoch(2);
      const Epoch head = run_epoch(partial, stop);
      REQUIRE(head.index == std::vector<std::int64_t>(all.index.begin(), all.index.begin() + 15));
      state = partial.dataset().state(2, stop, opt);
    }
    DataLoader resumed(WebDatasetShards::stream(paths, so, test_fields()), opt);
    resumed.dataset().load_state(state);
    resumed.set_epoch(2);
    const Epoch rest = run_epoch(resumed);
    REQUIRE(rest.index == std::vector<std::int64_t>(all.index.begin() + 15, all.index.end()));
    for (const auto& [i, noise] : rest.noise) REQUIRE(noise == all.noise.at(i));
    // The state does not touch other epochs.
    resumed.set_epoch(3);
    REQUIRE(run_epoch(resumed).index.size() == all.index.size());
  }
  ShardedStream s = WebDatasetShards::stream(paths, so, test_fields());
  LoaderOptions opt;
  opt.num_workers = kAuto;
  REQUIRE_THROWS_WITH(s.state(0, 1, opt), Catch::Contains("kAuto"));
  REQUIRE_THROWS_WITH(s.load_state("stoker-stream 1 epoch=x"),
                      Catch::Contains("not a stream state"));
  opt.num_workers = 2;
  const std::string two = s.state(0, 3, opt);
  REQUIRE(two.find("delivered=2,1") != std::string::npos);  // batch_size 1: 2 and 1 records
  ShardedStream other = WebDatasetShards::stream(paths, so, test_fields());
  other.load_state(two);
  REQUIRE_THROWS_WITH(other.start_epoch(0), Catch::Contains("resume with the same shards"));
}

TEST_CASE("compressed shards and pipes stream the same samples as plain ones",
          "[webdataset][stream]") {
  TempDir tmp("compressed");
  const std::vector<std::string> plain = write_shards(tmp.path, {25, 14, 31});
  std::vector<std::string> gz;
  std::vector<std::string> zst;
  std::vector<std::string> pipes;
  for (const std::string& p : plain) {
    REQUIRE(std::system(("gzip -c " + p + " > " + p + ".gz").c_str()) == 0);
    gz.push_back(p + ".gz");
    if (std::system("command -v zstd > /dev/null") == 0) {
      REQUIRE(std::system(("zstd -q -c " + p + " > " + p + ".zst").c_str()) == 0);
      zst.push_back(p + ".zst");
    }
    pipes.push_back("pipe:cat " + p);
  }
  StreamOptions so;
  so.seed = 2;
  so.shuffle_buffer = 12;
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 2;
  DataLoader reference(WebDatasetShards::stream(plain, so, test_fields()), opt);
  const Epoch expected = run_epoch(reference);
  REQUIRE(sorted(expected.index) == iota(70));
  for (const auto* shards : {&gz, &zst, &pipes}) {
    if (shards->empty()) continue;
    CAPTURE(shards->front());
    DataLoader loader(WebDatasetShards::stream(*shards, so, test_fields()), opt);
    REQUIRE(run_epoch(loader).index == expected.index);
  }
  REQUIRE(fs::exists(gz[0] + ".idx"));  // the counting pass is cached
  // Pipes with their counts given are not read twice; a failing command is an error.
  so.sample_counts = {25, 14, 31};
  DataLoader counted(WebDatasetShards::stream(pipes, so, test_fields()), opt);
  REQUIRE(run_epoch(counted).index == expected.index);
  so.sample_counts = {1};
  REQUIRE_THROWS_WITH(WebDatasetShards::stream(pipes, so, test_fields()),
                      Catch::Contains("1 counts for 3 shards"));
  so.sample_counts.clear();
  REQUIRE_THROWS_WITH(WebDatasetShards::stream({"pipe:exit 3"}, so, test_fields()),
                      Catch::Contains("exited with status 3"));
  REQUIRE_THROWS_WITH(WebDatasetShards(gz), Catch::Contains("stream it with"));
}

TEST_CASE("bad shards: errors name the shard and offset, kSkip skips and counts",
          "[webdataset][fault]") {
  TempDir tmp("bad");
  std::vector<std::string> paths = write_shards(tmp.path, {20, 20});
  // Shard 0: the header of sample 5's first member gets a wrong checksum.
  {
    WebDatasetShards probe({paths[0]});
    REQUIRE(probe.size() == 20);
  }
  fs::remove(paths[0] + ".idx");
  const std::uint64_t sample5 = 5 * (3 * 1024);  // three members of one block each
  {
    std::fstream f(paths[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(sample5 + 101));  // its mode field: the name stays
    f.put('7');
  }
  // Shard 1: cut inside its last sample's data.
  fs::resize_file(paths[1], fs::file_size(paths[1]) - 1024 - 2 * 512 - 100);
  fs::remove(paths[1] + ".idx");

  ShardOptions options = test_fields();
  WebDatasetShards ds(paths, options);
  REQUIRE(ds.bad_records() == 2);
  REQUIRE(ds.size() == 40);        // each shard: 19 good records and a bad one
  WebDatasetShards direct(paths);  // default fields: no sample_rng() outside a loader
  REQUIRE_THROWS_WITH(direct.get(5),
                      Catch::Contains(paths[0] + ": record 5 at byte 15360: a member "
                                                 "header with a wrong checksum"));
  REQUIRE_THROWS_WITH(direct.get(5), Catch::Contains("OnSampleError::kSkip"));
  REQUIRE_THROWS_WITH(direct.get(39), Catch::Contains("truncated"));
  REQUIRE(direct.get(6)["index"].item<std::int64_t>() == 6);  // the rest of the shard reads

  LoaderOptions opt;
  opt.batch_size = 6;
  opt.num_workers = 2;
  opt.on_sample_error = OnSampleError::kSkip;
  DataLoader loader(ds, opt);
  Epoch e = run_epoch(loader);
  std::vector<std::int64_t> good = iota(40);
  good.erase(good.begin() + 39);
  good.erase(good.begin() + 5);
  REQUIRE(sorted(e.index) == good);
  REQUIRE(loader.stats().skipped_samples == 2);

  // Streaming: the bad records are skipped and counted, and the stream reads one more record
  // for each, so every stream still delivers its share.
  StreamOptions so;
  so.seed = 1;
  DataLoader stream(WebDatasetShards::stream(paths, so, options), opt);
  e = run_epoch(stream);
  REQUIRE(e.index.size() == 40);
  REQUIRE(stream.stats().skipped_samples == 2);
  std::set<std::int64_t> distinct(e.index.begin(), e.index.end());
  REQUIRE(distinct.size() == 38);
  for (const std::int64_t i : good) REQUIRE(distinct.count(i) == 1);

  // Without kSkip, the error reaches the consumer as a WorkerException naming the shard.
  opt.on_sample_error = OnSampleError::kFail;
  DataLoader failing(ds, opt);
  int errors = 0;
  test::drain_epoch(failing, [&](const WorkerException& error) {
    ++errors;
    REQUIRE_THAT(error.original_what(), Catch::Contains(tmp.path));
  });
  REQUIRE(errors == 2);

  // Not a tar file at all, and a missing shard.
  write_text(tmp.path + "/junk.tar", std::string(4096, 'j'));
  REQUIRE_THROWS_WITH(WebDatasetShards({tmp.path + "/junk.tar"}),
                      Catch::Contains("is not a tar file"));
  REQUIRE_THROWS_WITH(WebDatasetShards({tmp.path + "/missing.tar"}),
                      Catch::Contains("cannot open shard " + tmp.path + "/missing.tar"));
  REQUIRE_THROWS_AS(WebDatasetShards(std::vector<std::string>{}), std::invalid_argument);
}

TEST_CASE("ragged text fields collate with collate_ragged", "[webdataset]") {
  TempDir tmp("ragged");
  const std::vector<std::string> paths = write_shards(tmp.path, {12});
  ShardOptions options;
  options.fields = {FieldSpec{"index", "", {}}, FieldSpec{"txt", "", {}}};
  LoaderOptions opt;
  opt.batch_size = 5;
  opt.num_workers = 1;
  opt.collate = collate_ragged({"txt"});
  DataLoader loader(WebDatasetShards(paths, options), opt);
  std::size_t n = 0;
  for (const Batch& b : loader) {
    const std::int64_t* offsets = b["txt.offsets"].data<std::int64_t>();
    const auto* chars = reinterpret_cast<const char*>(b["txt"].raw_data());
    for (std::size_t r = 0; r < b.size(); ++r) {
      const std::string got(chars + offsets[r], chars + offsets[r + 1]);
      REQUIRE(got == txt_of(static_cast<std::size_t>(b["index"].data<std::int64_t>()[r])));
      ++n;
    }
  }
  REQUIRE(n == 12);
}

#ifdef STOKER_SHARD_TOOL
TEST_CASE("stoker-shard packs an image folder into shards that read back exactly",
          "[webdataset][tools]") {
  TempDir tmp("tool");
  std::map<std::string, std::string> files;  // relative path -> bytes
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 9; ++i) {
      const std::string ext = i % 3 == 0 ? "png" : i % 3 == 1 ? "jpg" : "JPEG";
      const std::string rel = "class" + std::to_string(c) + "/im." + std::to_string(i) + "." + ext;
      files[rel] =
          std::string(static_cast<std::size_t>(300 + 97 * i + c), static_cast<char>(c * 16 + i));
      write_text(tmp.path + "/images/" + rel, files[rel]);
    }
  }
  write_text(tmp.path + "/images/class1/notes.txt", "not an image");
  fs::create_directories(tmp.path + "/out");
  const std::string tool = STOKER_SHARD_TOOL;
  const std::string command = tool + " --images " + tmp.path + "/images --output " + tmp.path +
                              "/out/train-%04d.tar --shard-size 4K --shuffle --seed 3 --quiet";
  REQUIRE(std::system(command.c_str()) == 0);
  REQUIRE(read_file(tmp.path + "/out/classes.txt") == "class0\nclass1\nclass2\n");
  std::vector<std::string> shards;
  for (int n = 0; fs::exists(fmt::format("{}/out/train-{:04}.tar", tmp.path, n)); ++n) {
    shards.push_back(fmt::format("{}/out/train-{:04}.tar", tmp.path, n));
    REQUIRE(fs::exists(shards.back() + ".idx"));
  }
  REQUIRE(shards.size() > 3);
  ShardOptions raw;
  raw.decoders = FieldDecoders();
  raw.decoders.set("cls", &decode_int_field);
  WebDatasetShards ds(shards, raw);
  REQUIRE(ds.size() == 27);
  std::multiset<std::string> seen;
  for (std::size_t i = 0; i < ds.size(); ++i) {
    const Sample s = ds.get(i);
    REQUIRE(s.size() == 2);
    const std::string ext = s.fields()[0].name;
    const std::string bytes = field_string(s, ext);
    const std::int64_t label = s["cls"].item<std::int64_t>();
    bool found = false;
    for (const auto& [rel, content] : files) {
      if (content == bytes && rel.rfind("class" + std::to_string(label) + "/", 0) == 0) {
        REQUIRE(rel.substr(rel.rfind('.') + 1) == (ext == "jpeg" ? "JPEG" : ext));
        found = true;
      }
    }
    REQUIRE(found);
    seen.insert(bytes);
  }
  REQUIRE(seen.size() == 27);
  // --help prints the usage; an unknown flag is refused with it.
  REQUIRE(std::system((tool + " --help > " + tmp.path + "/help.txt").c_str()) == 0);
  REQUIRE_THAT(read_file(tmp.path + "/help.txt"), Catch::StartsWith("usage: stoker-shard"));
  const int rc =
      std::system((tool + " --images x --output y --bogus 2> " + tmp.path + "/err.txt").c_str());
  REQUIRE(WEXITSTATUS(rc) == 2);
  REQUIRE_THAT(read_file(tmp.path + "/err.txt"), Catch::Contains("unknown option '--bogus'"));
}
#endif

namespace {

// A GNU tar shard of keys c/00 ... c/<n-1>, each a .txt member and then a .cls member (in that
// order, as the command line gives them), with the default (gnu) format.
std::string gnu_tar_shard(const std::string& dir, int n) {
  std::string members;
  for (int i = 0; i < n; ++i) {
    const std::string key = fmt::format("c/{:02}", i);
    write_text(dir + "/src/" + key + ".txt", "text of " + key + std::string(300, '.'));
    write_text(dir + "/src/" + key + ".cls", std::to_string(i));
    members += " " + key + ".txt " + key + ".cls";
  }
  const std::string shard = dir + "/cut.tar";
  REQUIRE(std::system(("cd " + dir + "/src && tar -cf " + shard + members).c_str()) == 0);
  return shard;
}

// The offset of the header block of member `name` in a tar file, found by its name field (the
// first bytes of a 512-byte block), not with stoker's parser.
std::uint64_t header_offset(const std::string& tar, const std::string& name) {
  const std::string bytes = read_file(tar);
  for (std::size_t at = 0; at + 512 <= bytes.size(); at += 512) {
    if (bytes.compare(at, name.size(), name) == 0 && bytes[at + name.size()] == '\0') return at;
  }
  FAIL("no header of " << name << " in " << tar);
  return 0;
}

// The first `n` records a stream reads, in order: each one's "txt" field's first bytes, or
// "error: <what()>" (after a bad record the stream reads one more, from its start again, to
// deliver its share of good ones: `n` = the records in the shards sees each once).
std::vector<std::string> stream_records(ShardedStream stream, std::size_t n) {
  std::vector<std::string> out;
  while (out.size() < n) {
    try {
      const std::optional<Sample> s = stream.next();
      if (!s) return out;
      out.push_back(field_string(*s, "txt").substr(0, 12));
    } catch (const Error& e) {
      out.push_back(std::string("error: ") + e.what());
    }
  }
  return out;
}

}  // namespace

TEST_CASE("a shard cut inside a member's header: the sample it cut is the bad record",
          "[webdataset][fault]") {
  if (std::system("tar --version > /dev/null 2>&1") != 0) FAIL("GNU tar is not installed");
  TempDir tmp("headercut");
  const std::string whole = gnu_tar_shard(tmp.path, 4);
  ShardOptions options;
  options.decoders = FieldDecoders();  // raw bytes
  options.write_index = false;
  StreamOptions in_order;
  in_order.shuffle = false;
  struct Cut {
    std::string member;  // whose header is cut
    std::uint64_t into;  // bytes of it left
    std::size_t bad;     // the record that is bad: the last one
  };
  // The last sample's second header (its name whole, or a few bytes of it): sample 3 is the
  // bad record. Its first header, its name whole: sample 3 too, samples 0-2 are whole. Its first
  // header with only "c/" of its name: that could be "c/02.<more>", so sample 2 is the bad one.
  for (const Cut& cut : {Cut{"c/03.cls", 100, 3}, Cut{"c/03.cls", 3, 3}, Cut{"c/03.cls", 5, 3},
                         Cut{"c/03.cls", 511, 3}, Cut{"c/03.txt", 100, 3}, Cut{"c/03.txt", 300, 3},
                         Cut{"c/03.txt", 2, 2}}) {
    CAPTURE(cut.member, cut.into);
    const std::string shard = tmp.path + "/cut-copy.tar";
    fs::copy_file(whole, shard, fs::copy_options::overwrite_existing);
    fs::resize_file(shard, header_offset(whole, cut.member) + cut.into);

    WebDatasetShards ds({shard}, options);
    REQUIRE(ds.size() == cut.bad + 1);
    REQUIRE(ds.bad_records() == 1);
    for (std::size_t i = 0; i < cut.bad; ++i) {
      const Sample s = ds.get(i);
      REQUIRE(s.size() == 2);
      REQUIRE(field_string(s, "cls") == std::to_string(i));
    }
    REQUIRE_THROWS_WITH(ds.get(cut.bad),
                        Catch::Contains(fmt::format("{}: record {}", shard, cut.bad)) &&
                            Catch::Contains("the shard ends early (truncated)"));

    const std::vector<std::string> streamed =
        stream_records(WebDatasetShards::stream({shard}, in_order, options), ds.size());
    REQUIRE(streamed.size() == cut.bad + 1);
    REQUIRE(streamed[0] == "text of c/00");
    REQUIRE(streamed[cut.bad - 1] == fmt::format("text of c/{:02}", cut.bad - 1));
    REQUIRE_THAT(streamed[cut.bad], Catch::StartsWith("error: ") &&
                                        Catch::Contains(fmt::format("record {}", cut.bad)));
  }
  // Through a loader under kSkip: samples 0-2, one skipped.
  fs::copy_file(whole, tmp.path + "/skip.tar");
  fs::resize_file(tmp.path + "/skip.tar", header_offset(whole, "c/03.cls") + 100);
  LoaderOptions opt;
  opt.batch_size = 2;
  opt.num_workers = 2;
  opt.on_sample_error = OnSampleError::kSkip;
  DataLoader loader(WebDatasetShards({tmp.path + "/skip.tar"}, options), opt);
  std::size_t seen = 0;
  for (const Batch& batch : loader) seen += batch.size();
  REQUIRE(seen == 3);
  REQUIRE(loader.stats().skipped_samples == 1);
}

TEST_CASE("a 0-byte shard is an error naming it, map-style and streaming", "[webdataset][fault]") {
  TempDir tmp("empty");
  const std::vector<std::string> good = write_shards(tmp.path, {5});
  const std::string empty = tmp.path + "/empty.tar";
  write_text(empty, "");
  const auto names_it = Catch::Contains("WebDatasetShards: " + empty + " is empty (0 bytes)");
  REQUIRE_THROWS_AS(WebDatasetShards({good[0], empty}), Error);
  REQUIRE_THROWS_WITH(WebDatasetShards({good[0], empty}), names_it);
  REQUIRE_THROWS_WITH(WebDatasetShards::stream({good[0], empty}), names_it);
  // Compressed: a 0-byte .tar.gz, and a gzip stream of nothing.
  write_text(tmp.path + "/empty.tar.gz", "");
  REQUIRE_THROWS_WITH(WebDatasetShards::stream({tmp.path + "/empty.tar.gz"}),
                      Catch::Contains(tmp.path + "/empty.tar.gz") && Catch::Contains("empty"));
  REQUIRE(std::system(("gzip -c < /dev/null > " + tmp.path + "/nothing.tar.gz").c_str()) == 0);
  REQUIRE_THROWS_WITH(WebDatasetShards::stream({tmp.path + "/nothing.tar.gz"}),
                      Catch::Contains(tmp.path + "/nothing.tar.gz") && Catch::Contains("empty"));
  // A pipe whose count is given is read only by the workers: its first record is the error.
  StreamOptions so;
  so.sample_counts = {5, 2};
  so.shuffle = false;
  const std::vector<std::string> records =
      stream_records(WebDatasetShards::stream({good[0], "pipe:cat " + empty}, so), 7);
  REQUIRE(records.size() == 7);
  REQUIRE_THAT(records[5], Catch::Contains("pipe:cat " + empty) && Catch::Contains("empty"));
}

TEST_CASE("upper-case extensions are lower-cased into field names unless told otherwise",
          "[webdataset]") {
  if (std::system("tar --version > /dev/null 2>&1") != 0) FAIL("GNU tar is not installed");
  TempDir tmp("upper");
  write_text(tmp.path + "/uc/a.JPG", "jpeg bytes");
  write_text(tmp.path + "/uc/a.CLS", "7");
  write_text(tmp.path + "/uc/b.Seg.PNG", "png bytes");
  write_text(tmp.path + "/uc/b.cls", "8");
  write_text(tmp.path + "/uc/b.", "a member named 'key.'");
  write_text(tmp.path + "/uc/c.jpg", "lower");
  write_text(tmp.path + "/uc/c.JPG", "upper");
  write_text(tmp.path + "/uc/d.cls", "9");
  const std::string shard = tmp.path + "/uc.tar";
  REQUIRE(std::system(("cd " + tmp.path + " && tar -cf " + shard +
                       " uc/a.JPG uc/a.CLS uc/b.Seg.PNG uc/b. uc/b.cls uc/c.jpg uc/c.JPG uc/d.cls")
                          .c_str()) == 0);
  WebDatasetOptions options;
  options.decoders = FieldDecoders().set("cls", decode_int_field);
  options.write_index = false;
  SECTION("by default, as WebDataset groups them") {
    WebDatasetShards ds({shard}, options);
    REQUIRE(ds.size() == 4);
    const Sample a = ds.get(0);
    REQUIRE(a.size() == 2);
    REQUIRE(field_string(a, "jpg") == "jpeg bytes");
    REQUIRE(a["cls"].item<std::int64_t>() == 7);  // decoded by the lower-case name
    // "b." has no field name: it is passed over, and b's other members make the sample.
    const Sample b = ds.get(1);
    REQUIRE(b.size() == 2);
    REQUIRE(field_string(b, "seg.png") == "png bytes");
    REQUIRE(b["cls"].item<std::int64_t>() == 8);
    // c.jpg and c.JPG are one field twice: a bad record.
    REQUIRE(ds.bad_records() == 1);
    REQUIRE_THROWS_WITH(ds.get(2), Catch::Contains("field 'jpg' of key 'uc/c' appears twice"));
    REQUIRE(ds.get(3)["cls"].item<std::int64_t>() == 9);
    StreamOptions so;
    so.shuffle = false;
    ShardedStream stream = WebDatasetShards::stream({shard}, so, options);
    REQUIRE(field_string(*stream.next(), "jpg") == "jpeg bytes");
    REQUIRE(field_string(*stream.next(), "seg.png") == "png bytes");
    REQUIRE_THROWS_WITH(stream.next(), Catch::Contains("appears twice"));
    REQUIRE((*stream.next())["cls"].item<std::int64_t>() == 9);
  }
  SECTION("kept as they are with lowercase_fields = false") {
    options.lowercase_fields = false;
    WebDatasetShards ds({shard}, options);
    REQUIRE(ds.size() == 4);
    REQUIRE(ds.bad_records() == 0);
    const Sample a = ds.get(0);
    REQUIRE(field_string(a, "JPG") == "jpeg bytes");
    REQUIRE(field_string(a, "CLS") == "7");  // no decoder of that name: raw bytes
    REQUIRE(field_string(ds.get(1), "Seg.PNG") == "png bytes");
    REQUIRE(ds.get(2).size() == 2);  // jpg and JPG are two fields
    StreamOptions so;
    so.shuffle = false;
    ShardedStream stream = WebDatasetShards::stream({shard}, so, options);
    REQUIRE(field_string(*stream.next(), "JPG") == "jpeg bytes");
  }
}

TEST_CASE("a .tar.gz whose gzip checksum is wrong is an error naming it", "[webdataset][fault]") {
  TempDir tmp("gzcrc");
  const std::vector<std::string> plain = write_shards(tmp.path, {10});
  const std::string gz = plain[0] + ".gz";
  REQUIRE(std::system(("gzip -c " + plain[0] + " > " + gz).c_str()) == 0);
  {
    // The trailer: CRC-32 of the data, then its size (RFC 1952). The data itself is intact.
    std::fstream f(gz, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(fs::file_size(gz) - 8));
    const char crc0 = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(fs::file_size(gz) - 8));
    f.put(static_cast<char>(crc0 ^ 0x5a));
  }
  // The counting pass reads it all.
  REQUIRE_THROWS_WITH(WebDatasetShards::stream({gz}, {}, test_fields()),
                      Catch::Contains(gz) && Catch::Contains("incorrect data check"));
  // With its count given, the reading stream meets the bad checksum at the shard's end.
  StreamOptions so;
  so.sample_counts = {10};
  so.shuffle = false;
  ShardedStream stream = WebDatasetShards::stream({gz}, so, test_fields());
  bool reported = false;
  for (int i = 0; i < 40 && !reported; ++i) {
    try {
      if (!stream.next()) break;
    } catch (const Error& e) {
      REQUIRE_THAT(e.what(), Catch::Contains(gz) && Catch::Contains("incorrect data check"));
      reported = true;
    }
  }
  REQUIRE(reported);
}
