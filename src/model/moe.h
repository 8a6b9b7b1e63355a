// One routed mixture-of-experts layer of SwiGLU experts, the MLP of an MoE transformer block:
//   logits = x Wr^T;  routing = softmax top-k (moe_routing.h)
//   dispatch: x_perm = the routed tokens' rows of x, permuted into contiguous per-expert blocks
//   expert e: out_perm[block e] = swiglu(x_perm[block e] Wgu_e^T) Wd_e^T  (one GEMM per expert)
//   combine:  y_t = residual_t + sum_k w_tk out_perm[row_tk] (+ sigmoid(x_t ws) shared(x_t))
// Forward and backward run through Backend ops (GEMMs, swiglu, row gather and scatter-add);
// the routing and the weighted combine run on the host, staged through the backend when the
// tensors live in device memory.
//
// Expert parallelism (an ep group of P > 1 ranks, each holding E / P experts): the permuted
// blocks of the experts rank p holds are contiguous, so dispatch is one all-to-all of those
// row ranges (model/moe_expert_parallel.h); each rank runs its experts over the rows every
// rank sent, one GEMM per (source rank, expert) block, and a second all-to-all brings the
// outputs back into the sender's permuted order, where the combine is unchanged. Backward
// mirrors it: the permuted rows' output gradients go to the experts' ranks, their input
// gradients come back.
#pragma once
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "model/config.h"
#include "model/moe_routing.h"

namespace llmrun {

// Views of one MoE layer's tensors (parameters or gradients).
struct MoeTensors {
  Tensor router;                                    // [E, d]
  std::vector<Tensor> gate_up;                      // per expert [2 f, d]: gate rows, then up rows
  std::vector<Tensor> down;                         // per expert [d, f]
  Tensor shared_gate_up, shared_down, shared_gate;  // [2 fs, d], [d, fs], [1, d] (or empty)
  bool active() const { return !router.empty(); }
};

// What the forward keeps for the backward, for N tokens (R <= N K permuted rows).
struct MoeActivations {
  Tensor logits;                // [N, E]
  Tensor src_token;             // i32 [N K]: token of each permuted row
  Tensor x_perm, up, act, out;  // [N K, d], [C, 2f], [C, f], [N K, d]
  // Expert parallelism: rows received for this rank's experts, and their outputs, [C, d] (C =
  // N K ep: every rank's slots may pick this rank's experts); empty at ep = 1 (C = N K).
  Tensor x_recv, out_recv;
  Tensor shared_up, shared_act, shared_out;  // [N, 2 fs], [N, fs], [N, d]
  Tensor shared_logit;                       // [N, 1]
  std::shared_ptr<MoeRouting> routing;       // host, set by the forward
  bool empty() const { return logits.empty(); }
  MoeActivations first_rows(int64_t n) const;  // buffers planned for more tokens
};

// Backward temporaries, shared by all MoE layers.
struct MoeScratch {
  Tensor d_out, d_act, d_up, d_x;  // [N K, d], [C, f], [C, 2f], [N K, d]
  Tensor d_out_recv, d_x_recv;     // expert parallelism: [C, d] each (else empty)
  Tensor d_logits;                 // [N, E]
  Tensor d_shared_out, d_shared_act, d_shared_up, d_shared_logit;
  float loss_scale = 0;  // scale of the router losses' gradients (set by the model per batch)
};

using MoeAllocator = std::function<Tensor(DType, std::initializer_list<int64_t>)>;
MoeActivations allocate_moe_activations(const ModelConfig& cfg, int64_t n,
                                        const MoeAllocator& alloc);
MoeScratch allocate_moe_scratch(const ModelConfig& cfg, int64_t n, const MoeAllocator& alloc);

// output = residual + moe(x) for x [N, d]. `inference` routes dropless and runs the GEMMs
// batch-invariantly (Backend::linear_rows). `ep`: the expert-parallel group (null or one rank:
// w holds every expert); every rank of it must call this together. `tokens`: the ranks holding
// the other tokens of x's sequences (context parallelism's cp group; null: x is all of them),
// over which the router losses and statistics are taken; every rank of it calls this together.
void moe_forward(Backend& be, const MoeConfig& cfg, const MoeTensors& w, MoeActivations& a,
                 const Tensor& x, const Tensor& residual, Tensor output, bool inference,
                 Communicator* ep = nullptr, Communicator* tokens = nullptr);

// dy = dL/d(output) [N, d]; dx = dL/dx [N, d] (overwritten). Parameter gradients accumulate
// into g; the router losses' gradients enter scaled by s.loss_scale.
void moe_backward(Backend& be, const MoeConfig& cfg, const MoeTensors& w, const MoeTensors& g,
                  const MoeActivations& a, const MoeScratch& s, const Tensor& dy, const Tensor& x,
                  Tensor dx, Communicator* ep = nullptr);

}  // namespace llmrun
