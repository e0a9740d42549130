// detect_launch() and DistributedSampler::from_env(): the info line naming where rank and world
// size came from, and which launcher wins when several left their variables behind (torchrun,
// then Open MPI, then MPICH / Intel MPI, then Slurm inside an srun step).
#include <stdlib.h>

#include <array>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "stoker/distributed.hpp"
#include "support/captured_log.hpp"

using namespace stoker;

namespace {

constexpr std::array<const char*, 17> kLauncherVariables = {"RANK",
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

using Variables = std::vector<std::pair<const char*, const char*>>;

Variables operator+(Variables a, const Variables& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Sets exactly the given launcher variables (clearing the others) for its lifetime, then puts
// back what the process had before, set or unset.
class LaunchEnvironment {
 public:
  explicit LaunchEnvironment(const Variables& values) {
    for (std::size_t i = 0; i < kLauncherVariables.size(); ++i) {
      const char* old = std::getenv(kLauncherVariables[i]);
      if (old != nullptr) saved_[i] = std::string(old);
      ::unsetenv(kLauncherVariables[i]);
    }
    for (const auto& [name, value] : values) ::setenv(name, value, 1);
  }
  ~LaunchEnvironment() {
    for (std::size_t i = 0; i < kLauncherVariables.size(); ++i) {
      if (saved_[i]) {
        ::setenv(kLauncherVariables[i], saved_[i]->c_str(), 1);
      } else {
        ::unsetenv(kLauncherVariables[i]);
      }
    }
  }
  LaunchEnvironment(const LaunchEnvironment&) = delete;
  LaunchEnvironment& operator=(const LaunchEnvironment&) = delete;

 private:
  std::array<std::optional<std::string>, kLauncherVariables.size()> saved_;
};

// What each launcher sets, each with its own rank and size.
const Variables kOpenMpi = {{"OMPI_COMM_WORLD_RANK", "3"},
                            {"OMPI_COMM_WORLD_SIZE", "4"},
                            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
const Variables kMpich = {{"PMI_RANK", "2"}, {"PMI_SIZE", "6"}};
const Variables kSlurmStep = {
    {"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "16"}, {"SLURM_STEP_ID", "7"}};

}  // namespace

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
