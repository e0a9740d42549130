// Equal batches on every rank: mpirun starts 3 ranks of shard_allreduce over WebDataset shards
// of unequal sizes, with an MPI_Allreduce after every batch. Every epoch must finish (a rank
// with fewer batches leaves the others waiting: the run is under a timeout, so a hang fails),
// every rank must report the same batch count, and the ranks' samples must cover the dataset
// as the policy says: kPad every sample, repeats only for padding; kDrop no sample twice.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "mpi/index_shards.hpp"

namespace {

struct Line {
  std::size_t batches = 0;
  std::vector<long> indices;
};
using Lines = std::map<std::string, Line>;  // "<mode> <policy> <epoch>" -> what a rank saw

}  // namespace

TEST_CASE("mpirun -np 3: shards of unequal sizes give every rank the same batches", "[mpi]") {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) {
    FAIL("mpirun is not installed (Debian: openmpi-bin; scripts/deps.sh lists it)");
  }
  const std::string dir = "/tmp/stoker-shard-mpi-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::vector<std::size_t> sizes = {37, 5, 62, 12, 26};  // 142: not a multiple of 3 or 6
  const std::vector<std::string> shards = stoker::test::write_index_shards(dir, sizes);
  std::string command =
      "timeout -k 10 180 mpirun -np 3 --oversubscribe --allow-run-as-root "
      "-x ASAN_OPTIONS=detect_leaks=0 " STOKER_SHARD_ALLREDUCE_PROGRAM " " +
      dir;
  for (const std::string& s : shards) command += " " + s;
  command += " 2>&1";
  INFO(command);
  const int rc = std::system(command.c_str());
  REQUIRE(WIFEXITED(rc));
  REQUIRE(WEXITSTATUS(rc) != 124);  // the timeout: a rank waited for another forever
  REQUIRE(WEXITSTATUS(rc) == 0);

  std::vector<Lines> ranks(3);
  for (int r = 0; r < 3; ++r) {
    std::ifstream in(dir + "/rank" + std::to_string(r) + ".txt");
    std::string text;
    while (std::getline(in, text)) {
      std::istringstream words(text);
      std::string mode;
      std::string policy;
      std::string epoch;
      Line line;
      words >> mode >> policy >> epoch >> line.batches;
      for (long v; words >> v;) line.indices.push_back(v);
      ranks[static_cast<std::size_t>(r)][mode + " " + policy + " " + epoch] = line;
    }
    REQUIRE(ranks[static_cast<std::size_t>(r)].size() == 8);  // 2 modes x 2 policies x 2 epochs
  }
  for (const auto& [what, first] : ranks[0]) {
    CAPTURE(what);
    std::map<long, int> count;
    for (const Lines& rank : ranks) {
      REQUIRE(rank.at(what).batches == first.batches);
      for (const long v : rank.at(what).indices) ++count[v];
    }
    REQUIRE(first.batches > 0);
    int repeats = 0;
    for (const auto& [index, n] : count) {
      REQUIRE(index < 142);
      REQUIRE(n <= 2);
      repeats += n - 1;
    }
    // Map-style: 3 ranks of DistributedSampler; streamed: 3 ranks x 2 workers = 6 streams.
    const bool map = what.rfind("map", 0) == 0;
    if (what.find("pad") != std::string::npos) {
      REQUIRE(count.size() == 142);
      REQUIRE(repeats == (map ? 3 * 48 - 142 : 6 * 24 - 142));
    } else {
      REQUIRE(repeats == 0);
      REQUIRE(count.size() == (map ? 3 * 47 : 6 * 23));
    }
  }
  std::filesystem::remove_all(dir);
}
