#pragma once
// Pipeline parallelism at run time: walks this stage's instruction list (src/parallel's
// schedules are data) for one optimizer step, moving activations and their gradients between
// neighbouring stages over the pipeline group. Receives block; sends are non-blocking, so any
// valid schedule runs without deadlock. Message buffers are recycled: a received activation
// lives until its forward copied it into the model's slot, a received gradient until its
// backward ran, a sent gradient until its send completed; so their number follows the
// messages in flight, not the micro-batches of a step.
#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/transformer.h"
#include "parallel/model_partition.h"
#include "parallel/schedule.h"

namespace llmrun {

class PipelineRunner {
 public:
  PipelineRunner(Transformer& model, Communicator& pp, PipelineSchedule schedule,
                 const PipelinePartition& part, int micro_batches, int batch, int seq);

  // One step: micro-batch m's tokens are inputs[m] and targets[m] ([batch, seq] each; only
  // the stages holding the embedding / the head read them). Returns the loss summed over the
  // micro-batches on the last stage, 0 on the others.
  double run(const std::vector<const int32_t*>& inputs, const std::vector<const int32_t*>& targets,
             float grad_scale);
  // Forward only (validation), one micro-batch: the summed loss on the last stage, else 0.
  double forward_loss(const int32_t* inputs, const int32_t* targets);

  double idle_seconds() const { return idle_s_; }  // waiting on other stages, all steps so far
  size_t buffer_bytes() const { return storage_.size() * size_t(rows_ * d_) * 4; }  // high-water

 private:
  using Unit = std::pair<int, int>;  // (micro-batch, chunk)
  struct PendingSend {               // a gradient on its way to the previous stage
    int buffer;
    std::unique_ptr<CommRequest> req;
  };
  int take_buffer();  // a free [rows, d] buffer's index, recycling finished sends first
  Tensor tensor(int buffer);
  void recycle_finished_sends(bool wait_all);
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
  std::vector<Buffer> storage_;
  std::vector<int> free_;
  std::vector<PendingSend> sends_;
};

}  // namespace llmrun
