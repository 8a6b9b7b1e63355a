#include "comm/launcher.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "util/error.h"

namespace llmrun {

namespace {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}
}  // namespace

LaunchEnvironment detect_launch_environment() {
  LaunchEnvironment e;
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
    e.under_launcher = true;
    e.launcher = "mpirun";
    e.world_size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    e.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", e.world_size);
  } else if (std::getenv("PMIX_RANK") || (std::getenv("SLURM_PROCID") && std::getenv("SLURM_STEP_ID"))) {
    // srun --mpi=pmix starts each rank directly.
    e.under_launcher = true;
    e.launcher = "srun";
    e.world_size = env_int("SLURM_NTASKS", env_int("PMIX_SIZE", 1));
    e.local_size = env_int("SLURM_NTASKS_PER_NODE", env_int("SLURM_STEP_NUM_TASKS", e.world_size));
  }
  return e;
}

int threads_per_rank(int local_ranks) {
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, local_ranks));
}

void exec_under_mpirun(int nproc, const std::vector<std::string>& mpirun_args, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(nproc)};
  if (nproc > int(std::thread::hardware_concurrency())) argv.push_back("--oversubscribe");
  if (geteuid() == 0) {
    // Open MPI refuses root unless told twice; containers and CI commonly run as root.
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  argv.insert(argv.end(), mpirun_args.begin(), mpirun_args.end());
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  argv.push_back(n > 0 ? std::string(self, size_t(n)) : args.at(0));
  argv.insert(argv.end(), args.begin() + 1, args.end());

  std::vector<char*> c_argv;
  for (auto& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  execvp("mpirun", c_argv.data());
  throw UserError(std::string("cannot start mpirun for launch.nproc=") + std::to_string(nproc) + ": " +
                  std::strerror(errno) + " (install openmpi-bin, or run under your own launcher)");
}

}  // namespace llmrun
