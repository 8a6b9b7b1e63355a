#pragma once
// Pipeline parallelism at run time: walks this stage's instruction list (src/parallel's
// schedules are data) for one optimizer step, moving activations and their gradients between
// neighbouring stages over the pipeline group. Receives block; sends are non-blocking and
// their buffers live until the step ends, so any valid schedule runs without deadlock.
#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/transformer.h"
#include "parallel/schedule.h"
#include "train/model_partition.h"

namespace llmrun {

class PipelineRunner {
 public:
  PipelineRunner(Transformer& model, Communicator& pp, PipelineSchedule schedule, const PipelinePartition& part,
                 int micro_batches, int batch, int seq);

  // One step: micro-batch m's tokens are inputs[m] and targets[m] ([batch, seq] each; only
  // the stages holding the embedding / the head read them). Returns the loss summed over the
  // micro-batches on the last stage, 0 on the others.
  double run(const std::vector<const int32_t*>& inputs, const std::vector<const int32_t*>& targets,
             float grad_scale);
  // Forward only (validation), one micro-batch: the summed loss on the last stage, else 0.
  double forward_loss(const int32_t* inputs, const int32_t* targets);

  double idle_seconds() const { return idle_s_; }  // waiting on other stages, all steps so far

 private:
  using Unit = std::pair<int, int>;  // (micro-batch, chunk)
  Tensor buffer(std::map<Unit, Buffer>& pool, const Unit& u);
  int tag(int micro, int sender_virtual_stage, bool backward) const;
  void receive(Tensor dst, int peer, int tag);

  Transformer& model_;
  Communicator& pp_;
  PipelineSchedule schedule_;
  PipelinePartition part_;
  PipelineShape shape_;
  int batch_, seq_;
  int64_t rows_, d_;
  double idle_s_ = 0;
  std::map<Unit, Buffer> activations_in_, grads_in_, grads_out_;
};

}  // namespace llmrun
