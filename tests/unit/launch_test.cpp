// detect_launch() and DistributedSampler::from_env() against the environments that torchrun,
// Open MPI, MPICH / Intel MPI and Slurm set up.
#include <cstdlib>
#include <initializer_list>
#include <utility>

#include <catch2/catch.hpp>

#include "stoker/distributed.hpp"

using namespace stoker;

namespace {

// Sets exactly the given launcher variables for the test's lifetime (clearing all others).
class Environment {
 public:
  Environment(std::initializer_list<std::pair<const char*, const char*>> values) {
    for (const char* name : kAll) ::unsetenv(name);
    for (const auto& [name, value] : values) ::setenv(name, value, 1);
  }
  ~Environment() {
    for (const char* name : kAll) ::unsetenv(name);
  }

 private:
  static constexpr const char* kAll[] = {"RANK",
                                         "WORLD_SIZE",
                                         "LOCAL_RANK",
                                         "LOCAL_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_RANK",
                                         "OMPI_COMM_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_LOCAL_RANK",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE",
                                         "PMI_RANK",
                                         "PMI_SIZE",
                                         "MPI_LOCALRANKID",
                                         "MPI_LOCALNRANKS",
                                         "SLURM_PROCID",
                                         "SLURM_NTASKS",
                                         "SLURM_LOCALID",
                                         "SLURM_TASKS_PER_NODE",
                                         "SLURM_STEP_ID"};
};

}  // namespace

TEST_CASE("detect_launch: a single process without a launcher", "[launch]") {
  const Environment env({});
  const LaunchInfo info = detect_launch();
  REQUIRE(info.rank == 0);
  REQUIRE(info.world_size == 1);
  REQUIRE(info.source == "none");
}

TEST_CASE("detect_launch: torchrun, Open MPI, MPICH", "[launch]") {
  SECTION("torchrun") {
    const Environment env(
        {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}});
    const LaunchInfo info = detect_launch();
    REQUIRE((info.rank == 5 && info.world_size == 8 && info.local_rank == 1 &&
             info.local_world_size == 4 && info.source == "torchrun"));
  }
  SECTION("Open MPI") {
    const Environment env({{"OMPI_COMM_WORLD_RANK", "3"},
                           {"OMPI_COMM_WORLD_SIZE", "4"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
    const LaunchInfo info = detect_launch();
    REQUIRE((info.rank == 3 && info.world_size == 4 && info.local_world_size == 4 &&
             info.source == "openmpi"));
  }
  SECTION("MPICH / Intel MPI, without local variables") {
    const Environment env({{"PMI_RANK", "2"}, {"PMI_SIZE", "6"}});
    const LaunchInfo info = detect_launch();
    REQUIRE((info.rank == 2 && info.world_size == 6 && info.local_rank == 0 &&
             info.local_world_size == 1 && info.source == "mpich"));
  }
  SECTION("torchrun comes first when several are set") {
    const Environment env(
        {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"PMI_RANK", "7"}, {"PMI_SIZE", "9"}});
    REQUIRE(detect_launch().source == "torchrun");
  }
}

TEST_CASE("detect_launch: Slurm counts only inside an srun step", "[launch]") {
  SECTION("a batch script's environment is not a launch") {
    const Environment env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "16"}});
    REQUIRE(detect_launch().source == "none");
  }
  SECTION("inside srun") {
    const Environment env({{"SLURM_PROCID", "9"},
                           {"SLURM_NTASKS", "16"},
                           {"SLURM_LOCALID", "1"},
                           {"SLURM_TASKS_PER_NODE", "8(x2)"},
                           {"SLURM_STEP_ID", "0"}});
    const LaunchInfo info = detect_launch();
    REQUIRE((info.rank == 9 && info.world_size == 16 && info.local_rank == 1 &&
             info.local_world_size == 8 && info.source == "slurm"));
  }
}

TEST_CASE("detect_launch: explicit values win, and inconsistent ones are errors", "[launch]") {
  SECTION("overrides") {
    const Environment env({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
    LaunchOverrides o;
    o.rank = 0;
    const LaunchInfo info = detect_launch(o);
    REQUIRE(info.rank == 0);
    REQUIRE(info.world_size == 2);
    REQUIRE(info.source == "explicit (over torchrun)");
  }
  SECTION("rank past the world size") {
    const Environment env({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
    REQUIRE_THROWS_WITH(detect_launch(), Catch::Contains("rank 4 (RANK) is not below world size 4 "
                                                         "(WORLD_SIZE)"));
  }
  SECTION("not a number") {
    const Environment env({{"OMPI_COMM_WORLD_RANK", "two"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
    REQUIRE_THROWS_WITH(detect_launch(), Catch::Contains("OMPI_COMM_WORLD_RANK='two'"));
  }
  SECTION("a negative number") {
    const Environment env({{"RANK", "-1"}, {"WORLD_SIZE", "4"}});
    REQUIRE_THROWS_AS(detect_launch(), std::invalid_argument);
  }
  SECTION("local rank past the local world size") {
    const Environment env(
        {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}});
    REQUIRE_THROWS_WITH(detect_launch(), Catch::Contains("local rank 2 is not below local world "
                                                         "size 2"));
  }
}

TEST_CASE("DistributedSampler::from_env shards by the launcher's rank", "[launch][sampler]") {
  const Environment env({{"RANK", "1"}, {"WORLD_SIZE", "4"}});
  DistributedSampler::Options opt;
  opt.shuffle = false;
  DistributedSampler sampler = DistributedSampler::from_env(10, opt);
  REQUIRE(sampler.rank() == 1);
  REQUIRE(sampler.num_replicas() == 4);
  REQUIRE(sampler.indices(0) == std::vector<std::size_t>{1, 5, 9});
}
