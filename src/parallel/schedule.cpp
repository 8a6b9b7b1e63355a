#include "parallel/schedule.h"

#include <algorithm>

#include "util/error.h"

namespace llmrun {

PipelineSchedule parse_pipeline_schedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::gpipe;
  if (name == "1f1b") return PipelineSchedule::one_f_one_b;
  if (name == "interleaved") return PipelineSchedule::interleaved;
  throw UserError("unknown pipeline schedule '" + name + "': use gpipe, 1f1b or interleaved");
}

const char* schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::gpipe:
      return "gpipe";
    case PipelineSchedule::one_f_one_b:
      return "1f1b";
    case PipelineSchedule::interleaved:
      return "interleaved";
  }
  return "?";
}

const char* pipe_op_kind_name(PipeOpKind k) {
  switch (k) {
    case PipeOpKind::recv_forward:
      return "recv_forward";
    case PipeOpKind::forward:
      return "forward";
    case PipeOpKind::send_forward:
      return "send_forward";
    case PipeOpKind::recv_backward:
      return "recv_backward";
    case PipeOpKind::backward:
      return "backward";
    case PipeOpKind::send_backward:
      return "send_backward";
  }
  return "?";
}

void check_pipeline_shape(PipelineSchedule s, const PipelineShape& shape) {
  const std::string where = std::string("pipeline schedule ") + schedule_name(s) + ": ";
  if (shape.stages < 1)
    throw UserError(where + "parallel.pp must be >= 1, got " + std::to_string(shape.stages));
  if (shape.micro_batches < 1)
    throw UserError(where + "needs at least one micro-batch per step, got " +
                    std::to_string(shape.micro_batches));
  if (shape.virtual_stages < 1)
    throw UserError(where + "parallel.virtual_stages must be >= 1, got " +
                    std::to_string(shape.virtual_stages));
  if (s != PipelineSchedule::interleaved) {
    if (shape.virtual_stages != 1)
      throw UserError(where + "parallel.virtual_stages=" + std::to_string(shape.virtual_stages) +
                      " needs the interleaved schedule (set parallel.pp_schedule=interleaved or "
                      "virtual_stages=1)");
    return;
  }
  if (shape.stages < 2)
    throw UserError(
        where + "needs parallel.pp >= 2 (with one stage there is nothing to interleave; use 1f1b)");
  if (shape.virtual_stages < 2)
    throw UserError(where + "needs parallel.virtual_stages >= 2, got " +
                    std::to_string(shape.virtual_stages));
  if (shape.micro_batches % shape.stages != 0)
    throw UserError(where + "the micro-batches per step (" + std::to_string(shape.micro_batches) +
                    ") must be a multiple of parallel.pp (" + std::to_string(shape.stages) +
                    "): choose global_batch / (micro_batch * dp) accordingly");
}

namespace {

struct OpListBuilder {
  const PipelineShape& shape;
  int stage;
  std::vector<PipeOp> ops;

  int last_virtual() const { return shape.stages * shape.virtual_stages - 1; }
  void forward(int micro, int chunk) {
    const int v = virtual_stage(shape, stage, chunk);
    if (v != 0) ops.push_back({PipeOpKind::recv_forward, micro, chunk});
    ops.push_back({PipeOpKind::forward, micro, chunk});
    if (v != last_virtual()) ops.push_back({PipeOpKind::send_forward, micro, chunk});
  }
  void backward(int micro, int chunk) {
    const int v = virtual_stage(shape, stage, chunk);
    if (v != last_virtual()) ops.push_back({PipeOpKind::recv_backward, micro, chunk});
    ops.push_back({PipeOpKind::backward, micro, chunk});
    if (v != 0) ops.push_back({PipeOpKind::send_backward, micro, chunk});
  }
};

// Forward units a stage runs before its first backward.
int warmup_units(PipelineSchedule s, const PipelineShape& shape, int stage) {
  const int P = shape.stages, M = shape.micro_batches, V = shape.virtual_stages;
  switch (s) {
    case PipelineSchedule::gpipe:
      return M;
    case PipelineSchedule::one_f_one_b:
      return std::min(P - stage - 1, M);
    case PipelineSchedule::interleaved:
      if (M == P) return M * V;
      return std::min((P - stage - 1) * 2 + (V - 1) * P, M * V);
  }
  return M;
}

// Interleaved unit k -> (micro, chunk): units walk micro-batches in groups of P, chunk by
// chunk (forward: chunk 0 first; backward: the last chunk first).
PipeOp interleaved_unit(const PipelineShape& shape, int k, bool forward) {
  const int P = shape.stages, V = shape.virtual_stages;
  const int in_group = k % (P * V);
  int chunk = in_group / P;
  if (!forward) chunk = V - 1 - chunk;
  const int micro = (k / (P * V)) * P + in_group % P;
  return {forward ? PipeOpKind::forward : PipeOpKind::backward, micro, chunk};
}

}  // namespace

std::vector<PipeOp> pipeline_ops(PipelineSchedule s, const PipelineShape& shape, int stage) {
  check_pipeline_shape(s, shape);
  LLMRUN_CHECK(stage >= 0 && stage < shape.stages, "pipeline stage out of range");
  OpListBuilder b{shape, stage, {}};
  const int units = shape.micro_batches * shape.virtual_stages;
  const int warmup = warmup_units(s, shape, stage);
  auto fwd = [&](int k) {
    if (s == PipelineSchedule::interleaved) {
      const PipeOp u = interleaved_unit(shape, k, true);
      b.forward(u.micro, u.chunk);
    } else {
      b.forward(k, 0);
    }
  };
  auto bwd = [&](int k) {
    if (s == PipelineSchedule::interleaved) {
      const PipeOp u = interleaved_unit(shape, k, false);
      b.backward(u.micro, u.chunk);
    } else {
      b.backward(k, 0);
    }
  };
  for (int k = 0; k < warmup; ++k) fwd(k);
  for (int k = 0; k < units - warmup; ++k) {
    fwd(warmup + k);
    bwd(k);
  }
  for (int k = units - warmup; k < units; ++k) bwd(k);
  return b.ops;
}

int pipe_peer_stage(const PipelineShape& shape, int stage, const PipeOp& op) {
  const int v = virtual_stage(shape, stage, op.chunk);
  const int total = shape.stages * shape.virtual_stages;
  int peer = -1;
  switch (op.kind) {
    case PipeOpKind::send_forward:
    case PipeOpKind::recv_backward:
      peer = v + 1;
      break;
    case PipeOpKind::recv_forward:
    case PipeOpKind::send_backward:
      peer = v - 1;
      break;
    case PipeOpKind::forward:
    case PipeOpKind::backward:
      LLMRUN_CHECK(false, "pipe_peer_stage asked about a compute op");
  }
  LLMRUN_CHECK(peer >= 0 && peer < total, "pipeline op has no peer at this virtual stage");
  return peer % shape.stages;
}

double bubble_fraction(PipelineSchedule s, const PipelineShape& shape) {
  const double P = shape.stages, M = shape.micro_batches;
  const double V = s == PipelineSchedule::interleaved ? shape.virtual_stages : 1;
  return (P - 1) / (V * M + P - 1);
}

int max_in_flight(PipelineSchedule s, const PipelineShape& shape, int stage) {
  const int units =
      shape.micro_batches * (s == PipelineSchedule::interleaved ? shape.virtual_stages : 1);
  const int warmup = warmup_units(s, shape, stage);
  return warmup >= units ? units : warmup + 1;
}

}  // namespace llmrun
