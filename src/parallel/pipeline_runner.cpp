#include "parallel/pipeline_runner.h"

#include <chrono>

namespace llmrun {

PipelineRunner::PipelineRunner(Transformer& model, Communicator& pp, PipelineSchedule schedule,
                               const PipelinePartition& part, int micro_batches, int batch, int seq)
    : model_(model),
      pp_(pp),
      schedule_(schedule),
      part_(part),
      shape_{part.stages, micro_batches, part.chunks},
      batch_(batch),
      seq_(seq),
      d_(model.config().d_model) {
  check_pipeline_shape(schedule, shape_);
  const ModelShard& s = model.shard();
  rows_ = int64_t(batch) * seq / (s.sequence_parallel ? s.tp : 1);
}

Tensor PipelineRunner::tensor(int buffer) {
  return storage_[size_t(buffer)].as(DType::f32, {rows_, d_});
}

void PipelineRunner::recycle_finished_sends(bool wait_all) {
  for (size_t i = 0; i < sends_.size();) {
    if (wait_all) {
      sends_[i].req->wait();
    } else if (!sends_[i].req->test()) {
      ++i;
      continue;
    }
    free_.push_back(sends_[i].buffer);
    sends_.erase(sends_.begin() + std::ptrdiff_t(i));
  }
}

int PipelineRunner::take_buffer() {
  if (free_.empty()) recycle_finished_sends(false);
  if (free_.empty()) {
    storage_.push_back(model_.backend().allocate(size_t(rows_ * d_) * 4));
    return int(storage_.size()) - 1;
  }
  const int b = free_.back();
  free_.pop_back();
  return b;
}

int PipelineRunner::tag(int micro, int sender_virtual_stage, bool backward) const {
  return (micro * shape_.stages * shape_.virtual_stages + sender_virtual_stage) * 2 +
         (backward ? 1 : 0);
}

void PipelineRunner::receive(Tensor dst, int peer, int t) {
  const auto t0 = std::chrono::steady_clock::now();
  pp_.recv(dst, peer, t);
  idle_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double PipelineRunner::run(const std::vector<const int32_t*>& inputs,
                           const std::vector<const int32_t*>& targets, float grad_scale) {
  const int stage = pp_.rank(), last_vs = shape_.stages * shape_.virtual_stages - 1;
  std::map<Unit, int> slots, activations_in, grads_in, grads_out;
  std::map<Unit, std::unique_ptr<CommRequest>> forward_sends;
  double loss = 0;
  for (const PipeOp& op : pipeline_ops(schedule_, shape_, stage)) {
    const Unit u{op.micro, op.chunk};
    const int vs = virtual_stage(shape_, stage, op.chunk);
    switch (op.kind) {
      case PipeOpKind::recv_forward:
        activations_in[u] = take_buffer();
        receive(tensor(activations_in[u]), pipe_peer_stage(shape_, stage, op),
                tag(op.micro, vs - 1, false));
        break;
      case PipeOpKind::forward: {
        const int slot = model_.acquire_slot(part_.begin(stage, op.chunk),
                                             part_.end(stage, op.chunk), batch_, seq_);
        slots[u] = slot;
        if (vs == 0) {
          model_.forward_chunk(slot, inputs[size_t(op.micro)], nullptr);
          break;
        }
        const Tensor in = tensor(activations_in.at(u));
        model_.forward_chunk(slot, inputs[size_t(op.micro)], &in);  // copies it into the slot
        free_.push_back(activations_in.at(u));
        activations_in.erase(u);
        break;
      }
      case PipeOpKind::send_forward:
        forward_sends[u] = pp_.isend(model_.chunk_output(slots.at(u)),
                                     pipe_peer_stage(shape_, stage, op), tag(op.micro, vs, false));
        break;
      case PipeOpKind::recv_backward:
        grads_in[u] = take_buffer();
        receive(tensor(grads_in[u]), pipe_peer_stage(shape_, stage, op),
                tag(op.micro, vs + 1, true));
        break;
      case PipeOpKind::backward: {
        const Tensor d_out = vs == last_vs ? Tensor() : tensor(grads_in.at(u));
        loss += model_.backward_chunk(slots.at(u), targets[size_t(op.micro)],
                                      vs == last_vs ? nullptr : &d_out, grad_scale);
        if (vs != last_vs) {
          free_.push_back(grads_in.at(u));
          grads_in.erase(u);
        }
        // The slot's buffers are reused once its output has surely left (its gradient came back).
        if (auto it = forward_sends.find(u); it != forward_sends.end()) {
          it->second->wait();
          forward_sends.erase(it);
        }
        model_.release_slot(slots.at(u));
        if (vs > 0) {
          grads_out[u] = take_buffer();
          model_.backend().copy(tensor(grads_out[u]), model_.input_grad());
        }
        break;
      }
      case PipeOpKind::send_backward:
        sends_.push_back(
            {grads_out.at(u), pp_.isend(tensor(grads_out.at(u)), pipe_peer_stage(shape_, stage, op),
                                        tag(op.micro, vs, true))});
        grads_out.erase(u);
        break;
    }
  }
  recycle_finished_sends(true);
  return loss;
}

double PipelineRunner::forward_loss(const int32_t* inputs, const int32_t* targets) {
  const int stage = pp_.rank(), last_vs = shape_.stages * shape_.virtual_stages - 1;
  double loss = 0;
  for (int c = 0; c < shape_.virtual_stages; ++c) {
    const int vs = virtual_stage(shape_, stage, c);
    const PipeOp recv{PipeOpKind::recv_forward, 0, c}, send{PipeOpKind::send_forward, 0, c};
    const int in_buffer = take_buffer();
    const Tensor in = tensor(in_buffer);
    if (vs > 0) receive(in, pipe_peer_stage(shape_, stage, recv), tag(0, vs - 1, false));
    const int slot = model_.acquire_slot(part_.begin(stage, c), part_.end(stage, c), batch_, seq_);
    model_.forward_chunk(slot, inputs, vs == 0 ? nullptr : &in);
    if (vs == last_vs)
      loss = model_.loss_chunk(slot, targets);
    else
      pp_.send(model_.chunk_output(slot), pipe_peer_stage(shape_, stage, send), tag(0, vs, false));
    model_.release_slot(slot);
    free_.push_back(in_buffer);
  }
  return loss;
}

}  // namespace llmrun
