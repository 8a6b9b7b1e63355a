#pragma once
// Communicators over MPI (Open MPI). Device tensors are staged through pinned host buffers
// (comm/device_staging.h).
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace llmrun {

class RankWatchdog;

// Owns MPI's lifetime in this process (MPI_Init_thread ... MPI_Finalize), with a watchdog
// that bounds startup and shutdown by timeout_s (launch.timeout_s) and ends the rank when its
// launcher dies. Destroyed by an exception, it leaves MPI running for abort_job_on_error.
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv, double timeout_s);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  // Every rank ending its run normally calls this; anything else aborts the job.
  static void abort_all(const std::string& why);

 private:
  std::unique_ptr<RankWatchdog> watchdog_;
  int rank_ = 0, size_ = 1;
};

// For an error that ends the command (main's last catch): inside a running multi-rank MPI
// job, prints "error: rank N: MESSAGE" and aborts every rank with exit_code, so the cause
// reaches the user within seconds even while peers wait in a collective. Returns only when
// no MPI job is running in this process.
void abort_job_on_error(const std::string& message, int exit_code);

// The world, or a subgroup of it: ranks that pass the same `color` form one communicator,
// ordered by `key`. timeout_s bounds every wait.
std::unique_ptr<Communicator> make_mpi_world(double timeout_s);
std::unique_ptr<Communicator> split_mpi(const Communicator& parent, int color, int key,
                                        std::string name);

}  // namespace llmrun
