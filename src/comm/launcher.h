#pragma once
// Starting the ranks. Outside any MPI launcher, `llmrun train` with nproc > 1 re-executes
// itself under Open MPI's mpirun; under mpirun, srun or a Slurm batch step it uses the ranks
// it was given.
#include <string>
#include <vector>

namespace llmrun {

struct LaunchEnvironment {
  bool under_launcher = false;  // started by mpirun/srun with a rank of its own
  int world_size = 1;
  int local_size = 1;    // ranks on this node (for threads per rank)
  int local_rank = 0;    // this rank among them (picks its GPU)
  std::string launcher;  // "mpirun", "srun" or ""
};

LaunchEnvironment detect_launch_environment();

// This node's task count from Slurm's compressed per-node list (SLURM_STEP_TASKS_PER_NODE,
// e.g. "4", "2(x3),1"), for node index node_id (SLURM_NODEID); 0 when it cannot be read.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node_id);

// Runs `mpirun -np nproc [extra args] <this binary> <args>` and returns its exit status.
// Running as root adds Open MPI's explicit permission; more ranks than cores adds
// --oversubscribe. SIGTERM/SIGINT to this process reach the ranks as SIGUSR1, which mpirun
// forwards (on SIGTERM it would kill them): they checkpoint and exit cleanly, and so does this.
// If this process dies (even by SIGKILL), mpirun gets SIGTERM and the ranks exit too (they
// watch this pid, passed as LLMRUN_LAUNCHER_PID).
int run_under_mpirun(int nproc, const std::vector<std::string>& mpirun_args,
                     const std::vector<std::string>& args);

// CPU threads each rank should use so that all local ranks together fill the cores once.
int threads_per_rank(int local_ranks);

}  // namespace llmrun
