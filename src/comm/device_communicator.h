// A communicator whose collectives on device tensors run on a device library (NCCL) while
// everything else stays on the group's MPI communicator: control traffic (strings, scalars,
// checkpoint indexes, FP8 amax vectors), host tensors, barriers, and point-to-point sends.
// Plain C++: the device library sits behind DeviceCollectives, so the routing and the
// timeout/abort path are unit-tested with a fault-injected implementation and no GPU.
//
// Point-to-point goes to the device library when it carries the peer (point_to_point(peer):
// NCCL does for the pipeline group's ring neighbours, one two-rank communicator per direction,
// see comm/nccl_bootstrap.h's ring_edges); every other send and receive stays on MPI (device
// tensors staged through pinned host memory). The tag is not sent: on a device edge sends and
// receives match in posting order, which the pipeline schedules keep.
//
// All-to-all with per-rank counts (expert parallelism's token dispatch and combine) goes to the
// device library when it carries it (NCCL: grouped sends and receives, one pair per peer with a
// nonzero count); otherwise, or for host tensors, to the group's MPI communicator.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace llmrun {

// One peer's part of an all-to-all: `count` elements at element `offset` of the buffer.
struct AllToAllPart {
  int peer = 0;
  int64_t offset = 0, count = 0;
  bool operator==(const AllToAllPart&) const = default;
};

// The parts of an all-to-all buffer of `capacity` elements laid out as `counts` (one entry per
// rank, in rank order): the peers with a nonzero count, in rank order, this rank's own part
// included. Throws naming the problem when a count is negative, the counts are not one per
// rank of `size`, or they exceed the buffer. `which`: "send" or "receive", for messages.
std::vector<AllToAllPart> all_to_all_parts(const std::vector<int64_t>& counts, int size,
                                           int64_t capacity, const char* which);

// One device operation in flight.
class DeviceOpProbe {
 public:
  enum class State { running, done, failed };
  virtual ~DeviceOpProbe() = default;
  // Non-blocking. On `failed`, `error` says why (the library's async error).
  virtual State poll(std::string& error) = 0;
  // Ends the communicator's outstanding work on this rank (ncclCommAbort), so that a dead or
  // stalled peer cannot leave a kernel spinning on the device.
  virtual void abort() = 0;
};

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  virtual std::string library() const = 0;  // "NCCL", for messages
  // Enqueue one operation (tensors on the device; semantics of Communicator's).
  virtual std::unique_ptr<DeviceOpProbe> all_reduce(Tensor buf, ReduceOp op) = 0;
  virtual std::unique_ptr<DeviceOpProbe> reduce_scatter(const Tensor& in, Tensor out) = 0;
  virtual std::unique_ptr<DeviceOpProbe> all_gather(const Tensor& in, Tensor out) = 0;
  virtual std::unique_ptr<DeviceOpProbe> broadcast(Tensor buf, int root) = 0;
  // Point-to-point on the device, for the peers it carries (none unless overridden).
  virtual bool point_to_point(int /*peer*/) const { return false; }
  virtual std::unique_ptr<DeviceOpProbe> send(const Tensor& buf, int peer);
  virtual std::unique_ptr<DeviceOpProbe> recv(Tensor buf, int peer);
  // All-to-all on the device, when the library carries it (none unless overridden): sends
  // each part of `sends` from `in` to its peer and receives each part of `recvs` into `out`
  // (all_to_all_parts' layout; this rank's own part is one of each, sent to itself).
  virtual bool all_to_all() const { return false; }
  virtual std::unique_ptr<DeviceOpProbe> all_to_allv(const Tensor& in,
                                                     const std::vector<AllToAllPart>& sends,
                                                     Tensor out,
                                                     const std::vector<AllToAllPart>& recvs);
};

// Ends the job with a message ("rank N: OPERATION ..."); MpiRuntime::abort_all in a run.
// Must not return (if it does, the caller throws std::runtime_error with the message).
using CommFailure = std::function<void(const std::string&)>;
CommFailure abort_job_failure();

// Waits until `op` is done. When it fails, or is still running after timeout_s, aborts it and
// calls fail("rank <world_rank>: <what> ...") naming the cause.
void wait_device_op(DeviceOpProbe& op, const std::string& what, int world_rank, double timeout_s,
                    const CommFailure& fail);

// `host`: the group's MPI communicator (name, rank and size come from it). world_rank names
// this rank in failures.
std::unique_ptr<Communicator> make_device_communicator(std::unique_ptr<Communicator> host,
                                                       std::unique_ptr<DeviceCollectives> device,
                                                       int world_rank, double timeout_s,
                                                       CommFailure fail = abort_job_failure());

}  // namespace llmrun
