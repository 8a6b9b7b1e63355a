#pragma once
// FP8 training of a model's linear layers with Transformer Engine's delayed scaling, emulated
// exactly on the CPU: every GEMM operand (a linear's input and weight, and in the backward its
// output gradient) is cast to FP8 with its own tensor's current scale, the GEMM multiplies
// the FP8 values in fp32 and applies the two inverse scales to the product, as cuBLASLt's
// FP8 GEMM does with its scale pointers (so the result matches a GPU FP8 GEMM up to
// accumulation order). The fp32 master weights are never modified.
// On a backend with FP8 tensor cores (backend/fp8_gemm.h: CUDA on compute capability 8.9+) the
// GEMMs are native FP8 GEMMs instead (fp8/fp8_device_gemm.h), with the same casts bit for bit,
// the same scales and the same amax bookkeeping; a CUDA device without FP8 is refused.
//
// Formats: hybrid = E4M3 for inputs and weights, E5M2 for output gradients; e4m3 = E4M3 for
// all three. The bias gradient is summed from the unquantised output gradient, as TE's fused
// cast + dbias kernel does.
//
// Scales change once per optimizer step (end_step): every micro-batch and every rank of a step
// casts with the same scales, and each amax is reduced (max) over every rank of the run, so a
// scale is always the full tensor's over the whole global batch, whatever the layout:
// data-parallel ranks saw other micro-batches, tensor-parallel ranks hold other shards of the
// same weight, input or output gradient (the max of the shards' amaxes is the full tensor's;
// replicated tensors give the same amax on every rank, which max does not double), and
// pipeline stages other layers (a stage records nothing for layers it does not hold, amax 0,
// so the max is the owner's). Transformer Engine reduces over its amax_reduction_group (the
// data- and tensor-parallel ranks of one stage); reducing over the pipeline too gives the
// owner's numbers unchanged and leaves every rank with the state of every layer, which is
// what a checkpoint saves from rank 0 and what a resume under any layout reads back. (With
// GQA and kv_heads < tp, the shared key/value heads' output gradients are partial sums per rank
// and are quantised before they are added: numerically fine, but not one rank's run.) (TE
// updates at each fp8_autocast exit; with one micro-batch per step that is the same thing.)
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "fp8/delayed_scaling.h"
#include "fp8/fp8_cast.h"
#include "fp8/fp8_config.h"
#include "fp8/fp8_device_gemm.h"
#include "model/config.h"
#include "model/linear.h"

namespace llmrun {

struct Fp8Counts {
  int64_t overflows = 0;   // values clipped to the format's max
  int64_t underflows = 0;  // non-zero values that became zero
};

class Fp8Linears final : public LinearRunner {
 public:
  // UserError when the backend is a GPU without FP8 tensor cores (require_fp8_device).
  Fp8Linears(const Fp8Section& recipe, const ModelConfig& cfg, Backend& be);
  // Whether the GEMMs run as native FP8 GEMMs (else the exact emulation).
  bool native() const { return device_ != nullptr; }

  void forward(Backend& be, LinearSite site, Tensor y, const Tensor& x, const Tensor& W,
               const Tensor* bias, bool accumulate) override;
  void backward(Backend& be, LinearSite site, Tensor dx, const Tensor& dW, const Tensor& db,
                const Tensor& dy, const Tensor& x, const Tensor& W) override;

  // Casts between begin_step() and end_step() record amaxes and count over/underflows; casts
  // outside (validation) only use the current scales.
  void begin_step();
  // Reduces this step's amaxes over `ranks` (max; every rank of the run, see above) and
  // updates every tensor's scale. A collective: every rank calls it after every step.
  void end_step(Communicator& ranks);
  // Over/underflows counted since the previous call, summed over `ranks` (a collective). A
  // tensor every tensor-parallel rank casts whole (a column-parallel linear's input, a
  // row-parallel one's output gradient) is counted on tp rank 0 only, so the sum is what one
  // rank would count; sharded tensors add up. Context-parallel ranks run every micro-batch on
  // their own tokens: inputs and output gradients add up, but each casts the same weights, so
  // weights count on cp rank 0 only.
  Fp8Counts take_counts(Communicator& ranks, int tp_rank = 0, int cp_rank = 0);
  // Every tensor's scale, latest amax and counts since the previous take_counts (for a debug log
  // line).
  std::string describe() const;

  // Scales and amax histories for the training checkpoint, and back. restore() starts
  // afresh (with a log line) when the saved state has another format or history length, and
  // keeps fresh state for tensors the checkpoint lacks; UserError (naming `where`) when the
  // state is malformed.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state, const std::string& where);

  // Tensor names: "layers.<l>.<qkv|out|up|down>.<input|weight|grad_output>", "lm_head.<...>".
  std::vector<std::string> tensor_names() const;
  const DelayedScaling& scaling(const std::string& name) const;
  bool runs_fp8(LinearKind kind) const { return !skip_[int(kind)]; }

 private:
  enum Role { input = 0, weight = 1, grad_output = 2 };
  struct TensorState {
    std::string name;
    Fp8Format format;
    DelayedScaling scaling;
    Fp8Counts counts;
    bool whole_on_tp_ranks = false;  // replicated over tensor-parallel ranks (see take_counts)
    bool is_weight = false;          // the same on every context-parallel rank (see take_counts)
  };
  // First of the site's three tensors in tensors_, or -1 when the site runs in fp32.
  int first_tensor(LinearSite site) const;
  // x cast to FP8 (values on the FP8 grid, in fp32) in scratch buffer `slot`.
  Tensor cast(const Tensor& x, TensorState& t, int slot, bool record);
  // The native path (device_): scales to the device when they changed since the last upload.
  void sync_device_scales();
  std::unique_ptr<Fp8DeviceGemms> device_;
  bool device_scales_stale_ = true;

  Fp8Section recipe_;
  AmaxCompute compute_;
  int layers_;
  bool skip_[kLinearKinds] = {};
  std::vector<int> site_first_;  // per site (layer * 4 + kind, lm_head last): first tensor or -1
  std::vector<TensorState> tensors_;
  bool recording_ = false;
  Backend& be_;
  Buffer scratch_[3];
  std::vector<float> host_in_[3], host_out_[3];  // staging when the tensors are in device memory
};

// Refuses (UserError) FP8 on a GPU without FP8 tensor cores: called when a run's backend is
// built, before the model is allocated.
void require_fp8_device(Backend& be);

}  // namespace llmrun
