#pragma once
// Multi-LoRA serving's linear runner: the base GEMM over the whole flattened batch (whatever
// inference runner the model had: batch-invariant fp32 or quantized), then, for every run of
// consecutive rows whose sequences share an adapter, that adapter's delta
//   y[rows] += (x[rows] A^T) (scale B)^T
// batch-invariantly (on the CPU the host kernel of serve/lora_delta.h, elsewhere the backend's
// linear_rows), so a sequence's logits do not depend on which other sequences (of other
// adapters or none) share its step. Nothing is merged into the base weights. The engine tells
// it before each step which rows belong to which adapter.
#include <cstdint>
#include <vector>

#include "model/linear.h"
#include "model/transformer.h"
#include "serve/lora_adapter.h"

namespace llmrun {

class LoraBatchRunner final : public LinearRunner {
 public:
  // Decode at 16 sequences of a 256-wide model is ~0.4M multiply-adds per GEMM (~50 us on one
  // core); an OpenMP region costs far more than that on the loaded 2-core VM (the other thread
  // must be scheduled before the region ends): measured there, deltas with regions of their
  // own took as long as the base GEMMs (bench/RESULTS.md, Multi-LoRA serving).
  static constexpr int64_t kDefaultSerialMacs = int64_t(1) << 22;
  // The CPU backend's linear_rows runs a GEMM of more multiply-adds than this over its threads
  // (cpu::kParallelMin * 8); smaller ones stay on one thread, and so does a fused step then.
  static constexpr int64_t kDefaultFusedBaseMacs = int64_t(1) << 17;

  // Installs itself as `model`'s inference runner, on top of the one it had; the destructor
  // puts that one back. max_tokens: rows per step; max_width: widest adapter (3 fused targets
  // of the largest rank). serial_macs: on the CPU, a GEMM's deltas of fewer multiply-adds
  // (decode) run inside the base GEMM's own parallel region (forward_fused) when the base is
  // the plain fp32 runner and would use several threads (over fused_base_macs multiply-adds),
  // else on the calling thread; larger ones (prefill) spread over the backend's threads.
  LoraBatchRunner(Transformer& model, int max_tokens, int64_t max_width,
                  int64_t serial_macs = kDefaultSerialMacs,
                  int64_t fused_base_macs = kDefaultFusedBaseMacs);
  ~LoraBatchRunner() override;
  LoraBatchRunner(const LoraBatchRunner&) = delete;
  LoraBatchRunner& operator=(const LoraBatchRunner&) = delete;

  // The next step's rows: sequence s owns rows query_starts[s] .. query_starts[s+1] and uses
  // adapter seq_lora[s] (null: the base model). The adapters must outlive the step.
  void set_step(const std::vector<const ServedLora*>& seq_lora,
                const std::vector<int32_t>& query_starts);

  void forward(Backend& be, LinearSite site, Tensor y, const Tensor& x, const Tensor& W,
               const Tensor* bias, bool accumulate) override;

  // GEMMs that ran base and deltas in one region (forward_fused), for tests.
  int64_t fused_forwards() const { return fused_forwards_; }

 private:
  struct RowGroup {
    int64_t begin, end;
    const ServedLora* lora;
  };
  // Multiply-adds of this step's deltas at `site` (CPU adapters).
  int64_t host_macs(LinearSite site) const;
  void forward_host(Backend& be, LinearSite site, Tensor y, const Tensor& x, int64_t macs);
  // Decode on the CPU with the plain fp32 base and several threads: one OpenMP region per GEMM
  // instead of the base's region plus the deltas on one thread (which left the other threads
  // waiting through them: at 2 threads that doubled the deltas' share of a step). Each thread
  // computes its share of W's rows (y's columns) with the backend's batch-invariant kernel,
  // exactly as linear_rows would split them; after a barrier each adds the deltas of its share
  // of the row tiles. Every y element is bitwise what inner_ + the serial deltas give.
  void forward_fused(Backend& be, Tensor y, const Tensor& x, const Tensor& W, const Tensor* bias,
                     bool accumulate, LinearSite site);
  Transformer& model_;
  LinearRunner* previous_;  // the model's inference runner before this one (null: the default)
  LinearRunner& inner_;
  int max_tokens_;
  int64_t max_width_;
  int64_t serial_macs_;
  int64_t fused_base_macs_;
  bool inner_is_fp32_;  // inner_ is inference_linear(): its W can be split by rows
  Buffer u_;            // device backends: [max_tokens, max_width], x A^T of a row group
  // The CPU kernel's u scratch: one [kLoraTileRows, lora_pad(max_width)] slice per thread.
  std::vector<float> host_u_;
  int host_slots_ = 0;
  int64_t fused_forwards_ = 0;
  std::vector<std::vector<float>> host_y_;  // forward_fused: each thread's base columns
  int64_t rows_ = 0;
  std::vector<RowGroup> groups_;
  std::vector<RowGroup> tiles_;  // groups_ cut into kLoraTileRows-row pieces (threaded deltas)
};

}  // namespace llmrun
