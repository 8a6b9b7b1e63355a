#pragma once
// One optimizer step: the micro-batches of this data-parallel rank (gradient accumulation),
// gradient reduction across ranks, global-norm clipping, AdamW update.
#include <cstdint>
#include <functional>

#include "comm/communicator.h"
#include "comm/timed_communicator.h"
#include "model/transformer.h"
#include "parallel/cp_chunks.h"
#include "parallel/pipeline_runner.h"
#include "train/lr_schedule.h"
#include "train/zero_optimizer.h"

namespace llmrun {

struct StepStats {
  int64_t step = 0;
  double loss = 0;       // mean cross-entropy over the step's tokens on all ranks
  double grad_norm = 0;  // before clipping
  double lr = 0;
  // Where this rank's step time went, in seconds (steady_clock). The parts do not overlap:
  // forward, backward and optimizer exclude the communication waits that happen inside them
  // (ZeRO gathers, gradient reductions, the loss and norm all-reduces), which are comm_wait_s.
  // What is left of the step (batch assembly) is in none of them.
  double forward_s = 0, backward_s = 0, optimizer_s = 0, comm_wait_s = 0;
  double pipeline_idle_s = 0;  // pipeline bubbles; 0 while there is no pipeline parallelism
  // Data-parallel gradient reductions of this step: time in flight, and the part of it hidden
  // behind compute (not spent in comm_wait_s); see ZeroOptimizer::grad_reduce_seconds.
  double grad_reduce_s = 0, grad_reduce_hidden_s = 0;
  // Likewise the parameter all-gathers (ZeroOptimizer::param_gathers) and the transfers of
  // nvme-offloaded state (ZeroOptimizer::offload_transfers).
  double param_gather_s = 0, param_gather_hidden_s = 0;
  double offload_s = 0, offload_hidden_s = 0;
};

struct StepShape {
  int micro_batch = 1, seq = 1;
  int accum = 1;   // micro-batches per rank per step
  float clip = 0;  // 0: no clipping
  // Context parallelism: this rank trains on its chunks of every window (seq stays the full
  // length); null: all of it.
  const CpChunks* cp = nullptr;
};

// Fills one micro-batch of windows: tokens [micro_batch, seq + 1]; inputs are the first seq
// tokens of each window, targets the last seq.
using BatchSource = std::function<void(int32_t* windows)>;

class TrainStep {
 public:
  // With a pipeline, its stages run the micro-batches by its schedule and pp sums the loss.
  TrainStep(Transformer& model, ZeroOptimizer& opt, Communicator& dp, const LrSchedule& lr,
            const StepShape& shape, PipelineRunner* pipeline = nullptr, Communicator* pp = nullptr);
  StepStats run(const BatchSource& next_batch);
  // Time blocked in the tensor-parallel group (its collectives run inside forward and
  // backward) counts as communication: `tp` must be the communicator the model uses.
  void time_tensor_parallel(const TimedCommunicator* tp) { tp_ = tp; }

 private:
  double waited_so_far() const;
  Transformer& model_;
  ZeroOptimizer& opt_;
  Communicator& dp_;
  LrSchedule lr_;
  StepShape shape_;
  PipelineRunner* pipeline_;
  Communicator* pp_;
  const TimedCommunicator* tp_ = nullptr;
  std::vector<int32_t> windows_, inputs_, targets_;
  std::vector<int> positions_;  // window position of each local token (context parallelism)
};

}  // namespace llmrun
