#pragma once
// A thread beside each MPI rank that ends the rank when waiting can no longer help:
//  - a startup phase (MPI_Init, creating the groups, MPI_Finalize) that outlasts
//    launch.timeout_s, because a peer rank never started or stalled there: MPI's own calls
//    have no timeout, so without this the other ranks would wait forever;
//  - the launcher gone: the rank's parent (mpirun, srun's step daemon) died, or the
//    `llmrun --nproc` process that started mpirun (LLMRUN_LAUNCHER_PID) did. Ranks then die
//    with their launcher, as torchrun's agent ensures, instead of training on unobserved.
// It prints one "error: rank N: ..." line naming the phase or the launcher and _exits: the
// main thread may be inside MPI, so neither MPI_Abort nor unwinding is safe from here, and
// mpirun ends the remaining ranks once one exits without MPI_Finalize.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace llmrun {

// The environment variable through which `llmrun --nproc` tells its ranks its pid.
inline constexpr const char* kLauncherPidEnv = "LLMRUN_LAUNCHER_PID";

class RankWatchdog {
 public:
  // rank: for messages (known from the launcher's environment before MPI_Init).
  RankWatchdog(int rank, double timeout_s);
  ~RankWatchdog();
  RankWatchdog(const RankWatchdog&) = delete;
  RankWatchdog& operator=(const RankWatchdog&) = delete;

  // Starts a phase that must end within timeout_s; end_phase() ends it.
  void begin_phase(std::string what);
  void end_phase();
  void set_rank(int rank);

 private:
  void run();
  [[noreturn]] void die(const std::string& why);

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int rank_;
  double timeout_s_;
  std::string phase_;
  std::chrono::steady_clock::time_point deadline_;
  long parent_;    // getppid() at start: a different value means the parent died
  long launcher_;  // LLMRUN_LAUNCHER_PID, or 0
  std::thread thread_;
};

// This rank's index from the launcher's environment (Open MPI, PMIx, Slurm), -1 if unknown.
int rank_from_environment();

}  // namespace llmrun
