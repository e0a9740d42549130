// A real launcher: Open MPI's mpirun starts 4 ranks of rank_indices, twice. Each epoch, the
// ranks' shards cover the dataset and overlap only in DistributedSampler's documented padding
// (the epoch's order repeated from its start up to a multiple of 4); a rank's shard changes
// between epochs; a rerun gives the same files.
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace {

using Shards = std::vector<std::vector<std::vector<long>>>;  // [rank][epoch] -> indices

Shards run_mpirun(const std::string& dir) {
  REQUIRE(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()) == 0);
  const std::string command = std::string("mpirun -np 4 --oversubscribe --allow-run-as-root ") +
                              STOKER_RANK_PROGRAM + " " + dir + " 2>&1";
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);
  Shards shards(4);
  for (int rank = 0; rank < 4; ++rank) {
    std::ifstream in(dir + "/rank" + std::to_string(rank) + ".txt");
    std::string source;
    int file_rank = -1;
    int world = 0;
    in >> source >> file_rank >> world;
    REQUIRE(source == "openmpi");
    REQUIRE(file_rank == rank);
    REQUIRE(world == 4);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream values(line);
      std::vector<long> epoch;
      for (long v; values >> v;) epoch.push_back(v);
      shards[static_cast<std::size_t>(rank)].push_back(epoch);
    }
    REQUIRE(shards[static_cast<std::size_t>(rank)].size() == 2);
  }
  return shards;
}

}  // namespace

TEST_CASE("mpirun -np 4: shards cover the dataset, overlap only in padding, are stable", "[mpi]") {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) {
    FAIL("mpirun is not installed (Debian: openmpi-bin; scripts/test.sh installs it)");
  }
  const Shards first = run_mpirun("/tmp/stoker-mpi-a");
  for (std::size_t epoch = 0; epoch < 2; ++epoch) {
    std::map<long, int> count;
    for (std::size_t rank = 0; rank < 4; ++rank) {
      // ceil(103 / 4) = 26 indices per rank.
      REQUIRE(first[rank][epoch].size() == 26);
      for (const long v : first[rank][epoch]) ++count[v];
    }
    REQUIRE(count.size() == 103);  // every sample, somewhere
    int repeated = 0;
    for (const auto& [index, n] : count) {
      REQUIRE(n <= 2);
      repeated += n - 1;
    }
    REQUIRE(repeated == 1);  // 104 - 103: exactly the padding
    // The padding is the epoch's first index, which rank 0 receives first and rank 3 last.
    REQUIRE(first[3][epoch].back() == first[0][epoch].front());
  }
  for (std::size_t rank = 0; rank < 4; ++rank) REQUIRE(first[rank][0] != first[rank][1]);
  const Shards again = run_mpirun("/tmp/stoker-mpi-b");
  REQUIRE(again == first);
  (void)std::system("rm -rf /tmp/stoker-mpi-a /tmp/stoker-mpi-b");
}
