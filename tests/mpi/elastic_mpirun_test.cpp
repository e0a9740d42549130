// Elastic resume under a real launcher: mpirun starts elastic_ranks on 1, 2, 3 and 4 ranks
// (each with another num_workers) over the same WebDataset shards, seed and global batch size,
// and every global batch (the ranks' batches k, in rank order) is the same in the four runs,
// with the same number of batches on every rank. Then runs stopped mid-epoch are resumed on
// another world size from rank 0's state (4 -> 2, 2 -> 4 across the epoch boundary, 4 -> 3):
// what the stopped run delivered and what the resumed one delivers are the uninterrupted
// run's batches, so each epoch is covered exactly once (the padding of its last global batch
// apart). Seven launches, about 1 s each; each is killed after 60 s (timeout), so a hung rank
// fails the case in under ctest's 600 s.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "mpi/index_shards.hpp"

namespace {

using Key = std::pair<int, int>;                  // (epoch, global batch)
using Global = std::map<Key, std::vector<long>>;  // every rank's part, in rank order
constexpr std::size_t kSamples = 250;             // in 8 shards
constexpr std::size_t kBatchesPerEpoch = 11;      // ceil(250 / 24)

struct Run {
  Global batches;
  std::vector<std::string> states;  // per rank, when the run was stopped
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// mpirun -np `ranks` elastic_ranks; returns what the ranks wrote.
Run launch(const std::string& dir, const std::vector<std::string>& shards, const std::string& tag,
           int ranks, int workers, const std::string& stop, const std::string& state) {
  std::string command = "timeout -k 10 60 mpirun -np " + std::to_string(ranks) +
                        " --oversubscribe --allow-run-as-root -x ASAN_OPTIONS=detect_leaks=0 " +
                        STOKER_ELASTIC_PROGRAM + " " + dir + " " + tag + " " +
                        std::to_string(workers) + " " + stop + " " + state;
  for (const std::string& s : shards) command += " " + s;
  command += " 2>&1";
  INFO(command);
  const int rc = std::system(command.c_str());
  REQUIRE(WIFEXITED(rc));
  REQUIRE(WEXITSTATUS(rc) == 0);
  Run run;
  std::size_t lines_of_rank0 = 0;
  for (int r = 0; r < ranks; ++r) {
    std::ifstream in(dir + "/" + tag + ".rank" + std::to_string(r) + ".txt");
    REQUIRE(in.good());
    std::size_t lines = 0;
    for (std::string text; std::getline(in, text); ++lines) {
      std::istringstream words(text);
      Key key;
      words >> key.first >> key.second;
      std::vector<long>& part = run.batches[key];
      std::size_t size = 0;
      for (long v; words >> v; ++size) part.push_back(v);
      REQUIRE(size == 24 / static_cast<std::size_t>(ranks));  // equal batches on every rank
    }
    if (r == 0) lines_of_rank0 = lines;
    REQUIRE(lines == lines_of_rank0);  // and as many of them
    if (stop != "-")
      run.states.push_back(read_text(dir + "/" + tag + ".state" + std::to_string(r)));
  }
  return run;
}

// The batches of `a` then those of `b`, which must not overlap.
Global joined(const Global& a, const Global& b) {
  Global out = a;
  for (const auto& [key, batch] : b) REQUIRE(out.emplace(key, batch).second);
  return out;
}

void check_covers_each_epoch(const Global& batches) {
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::map<long, int> seen;
    for (std::size_t k = 0; k < kBatchesPerEpoch; ++k) {
      const std::vector<long>& b = batches.at({epoch, static_cast<int>(k)});
      REQUIRE(b.size() == 24);
      for (std::size_t j = 0; j < 24 && k * 24 + j < kSamples; ++j) ++seen[b[j]];
    }
    REQUIRE(seen.size() == kSamples);
    for (const auto& [index, count] : seen) REQUIRE(count == 1);
  }
}

}  // namespace

TEST_CASE("mpirun 1, 2, 3, 4 ranks: the same global batches, resumed on another world size",
          "[mpi][elastic]") {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) {
    FAIL("mpirun is not installed (Debian: openmpi-bin; scripts/deps.sh lists it)");
  }
  const std::string dir = "/tmp/stoker-elastic-mpi-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::vector<std::size_t> sizes = {31, 17, 40, 25, 33, 29, 45, 30};
  const std::vector<std::string> shards = stoker::test::write_index_shards(dir, sizes);
  REQUIRE(std::accumulate(sizes.begin(), sizes.end(), std::size_t{0}) == kSamples);

  const Run one = launch(dir, shards, "full1", 1, 3, "-", "-");
  REQUIRE(one.batches.size() == 2 * kBatchesPerEpoch);
  check_covers_each_epoch(one.batches);
  CHECK(launch(dir, shards, "full2", 2, 0, "-", "-").batches == one.batches);
  CHECK(launch(dir, shards, "full3", 3, 1, "-", "-").batches == one.batches);
  CHECK(launch(dir, shards, "full4", 4, 2, "-", "-").batches == one.batches);

  // Stopped after 5 batches on 4 ranks; every rank saved the same state but for its rank.
  const Run stop4 = launch(dir, shards, "stop4", 4, 2, "5", "-");
  REQUIRE(stop4.batches.size() == 5);
  for (const std::string& s : stop4.states) {
    const std::string& first = stop4.states[0];
    REQUIRE(s.substr(0, s.rfind("rank ")) == first.substr(0, first.rfind("rank ")));
  }
  const std::string state4 = dir + "/stop4.state0";
  {
    INFO("4 -> 2");
    const Run resumed = launch(dir, shards, "resume2", 2, 1, "-", state4);
    CHECK(joined(stop4.batches, resumed.batches) == one.batches);
  }
  {
    INFO("4 -> 3");
    const Run resumed = launch(dir, shards, "resume3", 3, 0, "-", state4);
    CHECK(joined(stop4.batches, resumed.batches) == one.batches);
  }
  {
    INFO("2 -> 4, stopped in the second epoch");
    const Run stop2 = launch(dir, shards, "stop2", 2, 2, "14", "-");
    REQUIRE(stop2.batches.size() == 14);
    const Run resumed = launch(dir, shards, "resume4", 4, 1, "-", dir + "/stop2.state0");
    CHECK(joined(stop2.batches, resumed.batches) == one.batches);
  }
  std::filesystem::remove_all(dir);
}
