#include "train/pipeline_runner.h"

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

Tensor PipelineRunner::buffer(std::map<Unit, Buffer>& pool, const Unit& u) {
  auto it = pool.find(u);
  if (it == pool.end()) it = pool.emplace(u, model_.backend().allocate(size_t(rows_ * d_) * 4)).first;
  return it->second.as(DType::f32, {rows_, d_});
}

int PipelineRunner::tag(int micro, int sender_virtual_stage, bool backward) const {
  return (micro * shape_.stages * shape_.virtual_stages + sender_virtual_stage) * 2 + (backward ? 1 : 0);
}

void PipelineRunner::receive(Tensor dst, int peer, int t) {
  const auto t0 = std::chrono::steady_clock::now();
  pp_.recv(dst, peer, t);
  idle_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double PipelineRunner::run(const std::vector<const int32_t*>& inputs, const std::vector<const int32_t*>& targets,
                           float grad_scale) {
  const int stage = pp_.rank(), last_vs = shape_.stages * shape_.virtual_stages - 1;
  std::map<Unit, int> slots;
  std::map<Unit, std::unique_ptr<CommRequest>> forward_sends;
  std::vector<std::unique_ptr<CommRequest>> sends;
  double loss = 0;
  for (const PipeOp& op : pipeline_ops(schedule_, shape_, stage)) {
    const Unit u{op.micro, op.chunk};
    const int vs = virtual_stage(shape_, stage, op.chunk);
    switch (op.kind) {
      case PipeOpKind::recv_forward:
        receive(buffer(activations_in_, u), pipe_peer_stage(shape_, stage, op), tag(op.micro, vs - 1, false));
        break;
      case PipeOpKind::forward: {
        const int slot = model_.acquire_slot(part_.begin(stage, op.chunk), part_.end(stage, op.chunk), batch_, seq_);
        slots[u] = slot;
        const Tensor in = vs == 0 ? Tensor() : buffer(activations_in_, u);
        model_.forward_chunk(slot, inputs[size_t(op.micro)], vs == 0 ? nullptr : &in);
        break;
      }
      case PipeOpKind::send_forward:
        forward_sends[u] = pp_.isend(model_.chunk_output(slots.at(u)), pipe_peer_stage(shape_, stage, op),
                                     tag(op.micro, vs, false));
        break;
      case PipeOpKind::recv_backward:
        receive(buffer(grads_in_, u), pipe_peer_stage(shape_, stage, op), tag(op.micro, vs + 1, true));
        break;
      case PipeOpKind::backward: {
        const Tensor d_out = vs == last_vs ? Tensor() : buffer(grads_in_, u);
        loss += model_.backward_chunk(slots.at(u), targets[size_t(op.micro)], vs == last_vs ? nullptr : &d_out,
                                      grad_scale);
        // The slot's buffers are reused once its output has surely left (its gradient came back).
        if (auto it = forward_sends.find(u); it != forward_sends.end()) it->second->wait();
        model_.release_slot(slots.at(u));
        if (vs > 0) model_.backend().copy(buffer(grads_out_, u), model_.input_grad());
        break;
      }
      case PipeOpKind::send_backward:
        sends.push_back(pp_.isend(buffer(grads_out_, u), pipe_peer_stage(shape_, stage, op), tag(op.micro, vs, true)));
        break;
    }
  }
  for (auto& s : sends) s->wait();
  return loss;
}

double PipelineRunner::forward_loss(const int32_t* inputs, const int32_t* targets) {
  const int stage = pp_.rank(), last_vs = shape_.stages * shape_.virtual_stages - 1;
  double loss = 0;
  for (int c = 0; c < shape_.virtual_stages; ++c) {
    const int vs = virtual_stage(shape_, stage, c);
    const PipeOp recv{PipeOpKind::recv_forward, 0, c}, send{PipeOpKind::send_forward, 0, c};
    const Tensor in = buffer(activations_in_, {0, c});
    if (vs > 0) receive(in, pipe_peer_stage(shape_, stage, recv), tag(0, vs - 1, false));
    const int slot = model_.acquire_slot(part_.begin(stage, c), part_.end(stage, c), batch_, seq_);
    model_.forward_chunk(slot, inputs, vs == 0 ? nullptr : &in);
    if (vs == last_vs)
      loss = model_.loss_chunk(slot, targets);
    else
      pp_.send(model_.chunk_output(slot), pipe_peer_stage(shape_, stage, send), tag(0, vs, false));
    model_.release_slot(slot);
  }
  return loss;
}

}  // namespace llmrun
