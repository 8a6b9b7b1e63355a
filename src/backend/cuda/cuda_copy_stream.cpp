// The CUDA copy streams (backend/copy_stream.h): two non-blocking streams next to the device's
// compute stream, one per copy lane (host to device, device to host: separate DMA engines, so
// a copy back overlaps the next copy in), ordered against each other and the compute stream
// with cudaStreamWaitEvent. Events keep timing
// (no cudaEventDisableTiming) so that the offload pipeline can tell how long each copy ran and
// how long the compute stream stood waiting for one.
#include <cuda_runtime.h>

#include "backend/copy_stream.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"

namespace llmrun {

namespace {

using cuda::check;

class CudaStreamEvent final : public StreamEvent {
 public:
  explicit CudaStreamEvent(cudaStream_t on) {
    check(cudaEventCreate(&e_), "cudaEventCreate (copy stream)");
    check(cudaEventRecord(e_, on), "cudaEventRecord (copy stream)");
  }
  ~CudaStreamEvent() override { cudaEventDestroy(e_); }  // released once it completes
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

cudaEvent_t event_of(const StreamEvent& e) { return static_cast<const CudaStreamEvent&>(e).get(); }

class CudaCopyStream final : public CopyStream {
 public:
  CudaCopyStream(int ordinal, cudaStream_t compute) : ordinal_(ordinal), compute_(compute) {
    check(cudaSetDevice(ordinal), "cudaSetDevice (copy stream)");
    for (cudaStream_t& s : lanes_)
      check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate (copies)");
  }
  ~CudaCopyStream() override {
    for (cudaStream_t s : lanes_) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  }

  // Events are made on this stream's device, whichever thread asks (checkpoint writers settle
  // the pipeline from threads of their own).
  StreamEventPtr mark_compute() override {
    check(cudaSetDevice(ordinal_), "cudaSetDevice (copy stream)");
    return std::make_unique<CudaStreamEvent>(compute_);
  }
  StreamEventPtr mark_copy(CopyLane lane) override {
    check(cudaSetDevice(ordinal_), "cudaSetDevice (copy stream)");
    return std::make_unique<CudaStreamEvent>(stream(lane));
  }
  void copy_waits(CopyLane lane, const StreamEvent& e) override {
    check(cudaStreamWaitEvent(stream(lane), event_of(e), 0), "cudaStreamWaitEvent (copy stream)");
  }
  void compute_waits(const StreamEvent& e) override {
    check(cudaStreamWaitEvent(compute_, event_of(e), 0), "cudaStreamWaitEvent (compute stream)");
  }
  void copy(CopyLane lane, Tensor dst, const Tensor& src) override {
    LLMRUN_CHECK(dst.dtype == src.dtype && dst.numel() == src.numel(),
                 "copy stream: " + dst.shape_str() + " <- " + src.shape_str());
    if (dst.numel() == 0) return;
    check(cudaMemcpyAsync(dst.data, src.data, dst.bytes(), cudaMemcpyDefault, stream(lane)),
          "cudaMemcpyAsync (copy stream)");
  }
  bool complete(const StreamEvent& e) override {
    const cudaError_t r = cudaEventQuery(event_of(e));
    if (r == cudaErrorNotReady) return false;
    check(r, "cudaEventQuery (copy stream)");
    return true;
  }
  void host_waits(const StreamEvent& e) override {
    check(cudaEventSynchronize(event_of(e)), "cudaEventSynchronize (copy stream)");
  }
  double seconds_between(const StreamEvent& a, const StreamEvent& b) override {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, event_of(a), event_of(b)), "cudaEventElapsedTime");
    return double(ms) / 1e3;
  }

 private:
  cudaStream_t stream(CopyLane lane) const { return lanes_[lane == CopyLane::in ? 0 : 1]; }

  int ordinal_;
  cudaStream_t compute_;
  cudaStream_t lanes_[2] = {nullptr, nullptr};  // in (host to device), out (device to host)
};

}  // namespace

std::unique_ptr<CopyStream> CudaBackend::make_copy_stream() {
  return std::make_unique<CudaCopyStream>(ctx_.ordinal, stream_);
}

}  // namespace llmrun
