// src/comm owns how ranks talk: the Communicator interface (MPI over host buffers today,
// NCCL over device buffers with the CUDA backend), the rank topology (tp x pp x dp groups)
// and the launcher that re-executes llmrun under mpirun.
//
// Every blocking call honours the run's timeout and names the operation and the group when
// it expires, then aborts all ranks: a dead or stalled peer never becomes a silent hang.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace llmrun {

enum class ReduceOp { sum, max };

// An operation in flight. wait() blocks (within the timeout); test() polls and also drives
// progress of the underlying library, so calling it between layers overlaps communication
// with compute.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "dp", "tp", "world" ... for messages

  // In place over `buf`.
  virtual std::unique_ptr<CommRequest> iall_reduce(Tensor buf, ReduceOp op) = 0;
  // in [size * n] -> out [n]: rank r receives the sum of every rank's r-th chunk. When `out`
  // starts where `in` does, it works in place and the result is the first chunk of `in`.
  virtual std::unique_ptr<CommRequest> ireduce_scatter(const Tensor& in, Tensor out) = 0;
  // in [n] -> out [size * n], chunk r from rank r. `in` may alias chunk rank() of `out`.
  virtual std::unique_ptr<CommRequest> iall_gather(const Tensor& in, Tensor out) = 0;
  virtual std::unique_ptr<CommRequest> ibroadcast(Tensor buf, int root) = 0;
  virtual std::unique_ptr<CommRequest> isend(const Tensor& buf, int peer, int tag) = 0;
  virtual std::unique_ptr<CommRequest> irecv(Tensor buf, int peer, int tag) = 0;
  virtual void barrier() = 0;
  // All-to-all with per-rank counts (expert parallelism's token dispatch and combine): `in`
  // holds send_counts[r] elements for rank r, in rank order; `out` receives recv_counts[r]
  // elements from rank r, in rank order (counts in elements of the dtype; recv_counts[r] must
  // equal rank r's send_counts[rank()]). The default posts one send and one receive per peer
  // and copies its own part (comm/all_to_all.cpp); MPI overrides it with MPI_Ialltoallv.
  virtual std::unique_ptr<CommRequest> iall_to_allv(const Tensor& in,
                                                    const std::vector<int64_t>& send_counts,
                                                    Tensor out,
                                                    const std::vector<int64_t>& recv_counts);

  void all_reduce(Tensor buf, ReduceOp op) { iall_reduce(buf, op)->wait(); }
  void reduce_scatter(const Tensor& in, Tensor out) { ireduce_scatter(in, out)->wait(); }
  void all_gather(const Tensor& in, Tensor out) { iall_gather(in, out)->wait(); }
  void broadcast(Tensor buf, int root) { ibroadcast(buf, root)->wait(); }
  void send(const Tensor& buf, int peer, int tag) { isend(buf, peer, tag)->wait(); }
  void recv(Tensor buf, int peer, int tag) { irecv(buf, peer, tag)->wait(); }
  void all_to_allv(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor out,
                   const std::vector<int64_t>& recv_counts) {
    iall_to_allv(in, send_counts, out, recv_counts)->wait();
  }
  // A double across the group (loss sums, squared norms): blocking, in double precision.
  virtual double all_reduce_scalar(double v, ReduceOp op) = 0;
};

// The group of one: every collective is a copy or nothing. Used for single-process runs,
// so that size-1 groups cost nothing and need no MPI.
std::unique_ptr<Communicator> make_self_communicator(std::string name);

}  // namespace llmrun
