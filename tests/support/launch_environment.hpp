// The launcher variables (torchrun, Open MPI, MPICH / Intel MPI, Slurm) a test sets: exactly
// the given ones, the others cleared, for the object's lifetime; then what the process had
// before, set or unset, is put back.
#pragma once

#include <array>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace stoker::test {

inline constexpr std::array<const char*, 17> kLauncherVariables = {"RANK",
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

using LauncherVariables = std::vector<std::pair<const char*, const char*>>;

class LaunchEnvironment {
 public:
  explicit LaunchEnvironment(const LauncherVariables& values) {
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

}  // namespace stoker::test
