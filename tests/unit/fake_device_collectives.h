// Test doubles for the device-library seam of comm/device_communicator.h, shared by the NCCL
// host-logic tests (test_nccl_host_logic.cpp, test_nccl_p2p.cpp): a device library whose
// collectives only record their name, a probe that has already finished, and a host buffer
// labelled as device memory (the fakes never read it), so the routing, waiting and abort paths
// run without a GPU or NCCL.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "comm/device_communicator.h"
#include "tensor/tensor.h"

namespace llmrun::testing {

// An operation that finished as soon as it was posted.
class DoneOp final : public DeviceOpProbe {
 public:
  State poll(std::string&) override { return State::done; }
  void abort() override {}
};

// A device library ("FAKE") whose four collectives pass their name ("all_reduce",
// "reduce_scatter", "all_gather", "broadcast") to record() and return the probe it makes: a
// subclass decides what a posted operation does (finish, stall, fail) and may carry
// point-to-point by overriding point_to_point/send/recv.
class RecordingCollectives : public DeviceCollectives {
 public:
  std::string library() const override { return "FAKE"; }
  std::unique_ptr<DeviceOpProbe> all_reduce(Tensor, ReduceOp) override {
    return record("all_reduce");
  }
  std::unique_ptr<DeviceOpProbe> reduce_scatter(const Tensor&, Tensor) override {
    return record("reduce_scatter");
  }
  std::unique_ptr<DeviceOpProbe> all_gather(const Tensor&, Tensor) override {
    return record("all_gather");
  }
  std::unique_ptr<DeviceOpProbe> broadcast(Tensor, int) override { return record("broadcast"); }

 protected:
  virtual std::unique_ptr<DeviceOpProbe> record(const std::string& kind) = 0;
};

// A 1-D f32 tensor over host memory that claims to live on the device: the device
// communicator routes it to the device library, which (a fake) never reads it.
inline Tensor device_tensor(float* p, int64_t n) {
  Tensor t(p, DType::f32, {n});
  t.device = Device::cuda;
  return t;
}

}  // namespace llmrun::testing
