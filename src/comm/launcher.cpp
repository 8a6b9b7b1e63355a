#include "comm/launcher.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "comm/rank_watchdog.h"
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
    e.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  } else if (std::getenv("PMIX_RANK") ||
             (std::getenv("SLURM_PROCID") && std::getenv("SLURM_STEP_ID"))) {
    // srun --mpi=pmix starts each rank directly. The step's own counts come first: a step
    // may use fewer tasks than its job (SLURM_NTASKS in a batch script is the job's).
    e.under_launcher = true;
    e.launcher = "srun";
    e.world_size =
        env_int("SLURM_STEP_NUM_TASKS", env_int("SLURM_NTASKS", env_int("PMIX_SIZE", 1)));
    const char* per_node = std::getenv("SLURM_STEP_TASKS_PER_NODE");
    const int here = per_node ? slurm_tasks_on_node(per_node, env_int("SLURM_NODEID", 0)) : 0;
    e.local_size = here > 0 ? here : env_int("SLURM_NTASKS_PER_NODE", e.world_size);
    e.local_rank = env_int("SLURM_LOCALID", 0);
  }
  return e;
}

int slurm_tasks_on_node(const std::string& tasks_per_node, int node_id) {
  // Comma-separated groups "COUNT" or "COUNT(xREPEAT)", in node order.
  int node = 0;
  size_t pos = 0;
  while (pos < tasks_per_node.size()) {
    size_t end = tasks_per_node.find(',', pos);
    if (end == std::string::npos) end = tasks_per_node.size();
    const std::string group = tasks_per_node.substr(pos, end - pos);
    int count = 0, repeat = 1;
    char close = 0;
    const int fields = std::sscanf(group.c_str(), "%d(x%d%c", &count, &repeat, &close);
    if (fields < 1 || count <= 0 || (fields > 1 && (fields != 3 || close != ')' || repeat <= 0)))
      return 0;
    if (node_id < node + repeat) return count;
    node += repeat;
    pos = end + 1;
  }
  return 0;
}

int threads_per_rank(int local_ranks) {
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, local_ranks));
}

namespace {
volatile std::sig_atomic_t g_mpirun_pid = 0;
void forward_as_usr1(int) {
  if (g_mpirun_pid > 0) kill(pid_t(g_mpirun_pid), SIGUSR1);
}
}  // namespace

int run_under_mpirun(int nproc, const std::vector<std::string>& mpirun_args,
                     const std::vector<std::string>& args) {
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

  struct sigaction sa {
  }, old_term, old_int;
  sa.sa_handler = forward_as_usr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGINT, &sa, &old_int);
  // The ranks watch this pid (RankWatchdog) and exit when it is gone: a kill -9 of this
  // process must not leave a job training on unobserved.
  const pid_t self_pid = getpid();
  setenv(kLauncherPidEnv, std::to_string(self_pid).c_str(), 1);
  int exec_error[2];
  if (pipe2(exec_error, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  const pid_t pid = fork();
  if (pid == 0) {
    // mpirun gets its own process group, so a terminal's Ctrl-C reaches it only through us.
    setpgid(0, 0);
    // ... and dies with us: SIGTERM when this process ends in any way (kill -9 included), on
    // which mpirun ends its ranks and cleans up. The check closes the race with a parent
    // that died before the prctl.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != self_pid) _exit(1);
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGINT, &old_int, nullptr);
    execvp("mpirun", c_argv.data());
    const int err = errno;
    (void)!write(exec_error[1], &err, sizeof err);
    _exit(127);
  }
  close(exec_error[1]);
  g_mpirun_pid = pid;
  int err = 0;
  const bool exec_failed = read(exec_error[0], &err, sizeof err) == sizeof err;
  close(exec_error[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_mpirun_pid = 0;
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGINT, &old_int, nullptr);
  if (exec_failed)
    throw UserError(std::string("cannot start mpirun for launch.nproc=") + std::to_string(nproc) +
                    ": " + std::strerror(err) +
                    " (install openmpi-bin, or run under your own launcher)");
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace llmrun
