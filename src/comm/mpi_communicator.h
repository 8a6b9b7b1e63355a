#pragma once
// Communicators over MPI (Open MPI). Device tensors are staged through pinned host buffers
// (comm/device_staging.h).
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace llmrun {

// Owns MPI's lifetime in this process (MPI_Init_thread ... MPI_Finalize).
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  // Every rank ending its run normally calls this; anything else aborts the job.
  static void abort_all(const std::string& why);

 private:
  int rank_ = 0, size_ = 1;
};

// The world, or a subgroup of it: ranks that pass the same `color` form one communicator,
// ordered by `key`. timeout_s bounds every wait.
std::unique_ptr<Communicator> make_mpi_world(double timeout_s);
std::unique_ptr<Communicator> split_mpi(const Communicator& parent, int color, int key, std::string name);

}  // namespace llmrun
