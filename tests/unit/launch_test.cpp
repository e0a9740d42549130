// detect_launch() and DistributedSampler::from_env() against the environments that torchrun,
// Open MPI, MPICH / Intel MPI and Slurm set up: the rank and size each gives, the info line
// naming where they came from, and which launcher wins when several left their variables
// behind (torchrun, then Open MPI, then MPICH / Intel MPI, then Slurm inside an srun step).
#include <catch2/catch.hpp>

#include "stoker/distributed.hpp"
#include "support/captured_log.hpp"
#include "support/launch_environment.hpp"

using namespace stoker;

namespace {

using test::LaunchEnvironment;
using Variables = test::LauncherVariables;

Variables operator+(Variables a, const Variables& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// What each launcher sets, each with its own rank and size.
const Variables kOpenMpi = {{"OMPI_COMM_WORLD_RANK", "3"},
                            {"OMPI_COMM_WORLD_SIZE", "4"},
                            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
const Variables kMpich = {{"PMI_RANK", "2"}, {"PMI_SIZE", "6"}};
const Variables kSlurmStep = {
    {"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "16"}, {"SLURM_STEP_ID", "7"}};

}  // namespace

TEST_CASE("detect_launch: a single process without a launcher", "[launch]") {
  const LaunchEnvironment env({});
  const LaunchInfo info = detect_launch();
  REQUIRE(info.rank == 0);
  REQUIRE(info.world_size == 1);
  REQUIRE(info.source == "none");
}

TEST_CASE("detect_launch: torchrun, Open MPI, MPICH", "[launch]") {
  SECTION("torchrun") {
    const LaunchEnvironment env(
        {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}});
    const LaunchInfo info = detect_launch();
    REQUIRE((info.rank == 5 && info.world_size == 8 && info.local_rank == 1 &&
             info.local_world_size == 4 && info.source == "torchrun"));
  }
  SECTION("Open MPI") {
    const LaunchEnvironment env({{"OMPI_COMM_WORLD_RANK", "3"},
                                 {"OMPI_COMM_WORLD_SIZE", "4"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
    const LaunchInfo info = detect_launch();
    REQUIRE((info.rank == 3 && info.world_size == 4 && info.local_world_size == 4 &&
             info.source == "openmpi"));
  }
  SECTION("MPICH / Intel MPI, without local variables") {
    const LaunchEnvironment env({{"PMI_RANK", "2"}, {"PMI_SIZE", "6"}});
    const LaunchInfo info = detect_launch();
    REQUIRE((info.rank == 2 && info.world_size == 6 && info.local_rank == 0 &&
             info.local_world_size == 1 && info.source == "mpich"));
  }
  SECTION("torchrun comes first when several are set") {
    const LaunchEnvironment env(
        {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"PMI_RANK", "7"}, {"PMI_SIZE", "9"}});
    REQUIRE(detect_launch().source == "torchrun");
  }
}

TEST_CASE("detect_launch: Slurm counts only inside an srun step", "[launch]") {
  SECTION("a batch script's environment is not a launch") {
    const LaunchEnvironment env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "16"}});
    REQUIRE(detect_launch().source == "none");
  }
  SECTION("inside srun") {
    const LaunchEnvironment env({{"SLURM_PROCID", "9"},
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
    const LaunchEnvironment env({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
    LaunchOverrides o;
    o.rank = 0;
    const LaunchInfo info = detect_launch(o);
    REQUIRE(info.rank == 0);
    REQUIRE(info.world_size == 2);
    REQUIRE(info.source == "explicit (over torchrun)");
  }
  SECTION("rank past the world size") {
    const LaunchEnvironment env({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
    REQUIRE_THROWS_WITH(detect_launch(), Catch::Contains("rank 4 (RANK) is not below world size 4 "
                                                         "(WORLD_SIZE)"));
  }
  SECTION("not a number") {
    const LaunchEnvironment env({{"OMPI_COMM_WORLD_RANK", "two"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
    REQUIRE_THROWS_WITH(detect_launch(), Catch::Contains("OMPI_COMM_WORLD_RANK='two'"));
  }
  SECTION("a negative number") {
    const LaunchEnvironment env({{"RANK", "-1"}, {"WORLD_SIZE", "4"}});
    REQUIRE_THROWS_AS(detect_launch(), std::invalid_argument);
  }
  SECTION("local rank past the local world size") {
    const LaunchEnvironment env(
        {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}});
    REQUIRE_THROWS_WITH(detect_launch(), Catch::Contains("local rank 2 is not below local world "
                                                         "size 2"));
  }
}

TEST_CASE("DistributedSampler::from_env shards by the launcher's rank", "[launch][sampler]") {
  const LaunchEnvironment env({{"RANK", "1"}, {"WORLD_SIZE", "4"}});
  DistributedSampler::Options opt;
  opt.shuffle = false;
  DistributedSampler sampler = DistributedSampler::from_env(10, opt);
  REQUIRE(sampler.rank() == 1);
  REQUIRE(sampler.num_replicas() == 4);
  REQUIRE(sampler.indices(0) == std::vector<std::size_t>{1, 5, 9});
}

TEST_CASE("from_env logs which launcher gave the rank", "[launch]") {
  SECTION("torchrun") {
    const LaunchEnvironment env(
        {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}});
    const test::CapturedLog log(spdlog::level::info);
    const DistributedSampler sampler = DistributedSampler::from_env(100);
    REQUIRE(sampler.rank() == 5);
    REQUIRE_THAT(log.text(), Catch::Contains("stoker: rank 5 of 8 (local 1 of 4), from torchrun"));
  }
  SECTION("Open MPI") {
    const LaunchEnvironment env(kOpenMpi);
    const test::CapturedLog log(spdlog::level::info);
    const DistributedSampler sampler = DistributedSampler::from_env(100);
    REQUIRE(sampler.num_replicas() == 4);
    REQUIRE_THAT(log.text(), Catch::Contains("stoker: rank 3 of 4 (local 1 of 2), from openmpi"));
  }
  SECTION("MPICH / Intel MPI") {
    const LaunchEnvironment env(
        {{"PMI_RANK", "2"}, {"PMI_SIZE", "6"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "3"}});
    const test::CapturedLog log(spdlog::level::info);
    (void)DistributedSampler::from_env(100);
    REQUIRE_THAT(log.text(), Catch::Contains("stoker: rank 2 of 6 (local 0 of 3), from mpich"));
  }
  SECTION("Slurm, inside an srun step") {
    const LaunchEnvironment env({{"SLURM_PROCID", "9"},
                                 {"SLURM_NTASKS", "16"},
                                 {"SLURM_LOCALID", "1"},
                                 {"SLURM_TASKS_PER_NODE", "8(x2)"},
                                 {"SLURM_STEP_ID", "0"}});
    const test::CapturedLog log(spdlog::level::info);
    (void)DistributedSampler::from_env(100);
    REQUIRE_THAT(log.text(), Catch::Contains("stoker: rank 9 of 16 (local 1 of 8), from slurm"));
  }
  SECTION("no launcher") {
    const LaunchEnvironment env({});
    const test::CapturedLog log(spdlog::level::info);
    (void)DistributedSampler::from_env(100);
    REQUIRE_THAT(log.text(), Catch::Contains("stoker: rank 0 of 1 (local 0 of 1), from none"));
  }
  SECTION("explicit values over a launcher") {
    const LaunchEnvironment env(kOpenMpi);
    const test::CapturedLog log(spdlog::level::info);
    LaunchOverrides o;
    o.rank = 0;
    (void)DistributedSampler::from_env(100, DistributedSampler::Options{}, o);
    REQUIRE_THAT(
        log.text(),
        Catch::Contains("stoker: rank 0 of 4 (local 1 of 2), from explicit (over openmpi)"));
  }
  SECTION("nothing at warn level") {
    const LaunchEnvironment env(kOpenMpi);
    const test::CapturedLog log(spdlog::level::warn);
    (void)DistributedSampler::from_env(100);
    REQUIRE(log.text().empty());
  }
}

TEST_CASE("detect_launch: Open MPI before MPICH before Slurm", "[launch]") {
  // E.g. mpirun started inside an srun step: more than one launcher's variables are set.
  SECTION("Open MPI wins over MPICH and Slurm") {
    const LaunchEnvironment env(kOpenMpi + kMpich + kSlurmStep);
    const test::CapturedLog log(spdlog::level::info);
    const LaunchInfo info = detect_launch();
    REQUIRE(info.source == "openmpi");
    REQUIRE((info.rank == 3 && info.world_size == 4));
    REQUIRE_THAT(log.text(), Catch::Contains("rank 3 of 4") && Catch::Contains("from openmpi"));
  }
  SECTION("MPICH wins over Slurm") {
    const LaunchEnvironment env(kMpich + kSlurmStep);
    const LaunchInfo info = detect_launch();
    REQUIRE(info.source == "mpich");
    REQUIRE((info.rank == 2 && info.world_size == 6));
  }
  SECTION("Slurm alone, in a step") {
    const LaunchEnvironment env(kSlurmStep);
    const LaunchInfo info = detect_launch();
    REQUIRE(info.source == "slurm");
    REQUIRE((info.rank == 9 && info.world_size == 16));
  }
  SECTION("Slurm without SLURM_STEP_ID is a batch script, not a launch") {
    const LaunchEnvironment env({{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "16"}});
    const test::CapturedLog log(spdlog::level::info);
    const LaunchInfo info = detect_launch();
    REQUIRE(info.source == "none");
    REQUIRE(info.world_size == 1);
    REQUIRE_THAT(log.text(), Catch::Contains("from none"));
  }
  SECTION("a launcher with only a rank is not used") {
    const LaunchEnvironment env(Variables{{"OMPI_COMM_WORLD_RANK", "3"}} + kMpich);
    REQUIRE(detect_launch().source == "mpich");
  }
}

TEST_CASE("the launcher environment is put back after each test", "[launch]") {
  ::setenv("PMI_RANK", "1", 1);
  ::unsetenv("PMI_SIZE");
  {
    const LaunchEnvironment env({{"PMI_RANK", "4"}, {"PMI_SIZE", "5"}});
    REQUIRE(std::string(std::getenv("PMI_RANK")) == "4");
  }
  REQUIRE(std::string(std::getenv("PMI_RANK")) == "1");
  REQUIRE(std::getenv("PMI_SIZE") == nullptr);
  ::unsetenv("PMI_RANK");
}
