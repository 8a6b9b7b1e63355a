#pragma once
// src/parallel owns pipeline schedules as data: the pure function that gives each pipeline
// stage its instruction list (gpipe, 1f1b, interleaved 1f1b), the shape checks, the analytic
// bubble and memory bounds, an event simulator that executes all stages' lists together
// (blocking receives, non-blocking sends) and the text timeline `llmrun plan` prints.
// Nothing here communicates or computes: the trainer walks the lists, the planner reads them.
#include <string>
#include <vector>

namespace llmrun {

enum class PipelineSchedule { gpipe, one_f_one_b, interleaved };

// "gpipe" | "1f1b" | "interleaved"; anything else is a UserError naming the choices.
PipelineSchedule parse_pipeline_schedule(const std::string& name);
const char* schedule_name(PipelineSchedule s);

enum class PipeOpKind {
  recv_forward,
  forward,
  send_forward,
  recv_backward,
  backward,
  send_backward
};
const char* pipe_op_kind_name(PipeOpKind k);

// One instruction of a stage's list. `micro` is the micro-batch (0..M-1), `chunk` the model
// chunk on this rank (0..V-1). A send/recv carries the (micro, chunk) of the forward or
// backward it feeds or follows on this rank.
struct PipeOp {
  PipeOpKind kind;
  int micro;
  int chunk;
  bool operator==(const PipeOp&) const = default;
};

struct PipelineShape {
  int stages = 1;          // P: pipeline ranks
  int micro_batches = 1;   // M: micro-batches per optimizer step (per data-parallel rank)
  int virtual_stages = 1;  // V: model chunks per rank (interleaved only)
};

// Virtual stage of (stage p, chunk c) is c * stages + p; virtual stage 0 holds the
// embedding, the last one (stages * V - 1) the head and loss.
inline int virtual_stage(const PipelineShape& shape, int stage, int chunk) {
  return chunk * shape.stages + stage;
}

// Validates the shape for the schedule and throws UserError with the reason:
// all: stages >= 1, micro_batches >= 1, virtual_stages >= 1;
// gpipe / 1f1b: virtual_stages == 1;
// interleaved: stages >= 2, virtual_stages >= 2, micro_batches % stages == 0 (Megatron's
// interleaving walks micro-batches in groups of `stages`).
void check_pipeline_shape(PipelineSchedule s, const PipelineShape& shape);

// Stage `stage`'s instruction list. recv_forward directly precedes forward unless the op's
// virtual stage is 0; send_forward directly follows forward unless it is the last virtual
// stage; recv_backward directly precedes backward unless it is the last virtual stage;
// send_backward directly follows backward unless it is virtual stage 0.
//  gpipe: all M forwards in micro-batch order, then all M backwards in the same (ascending)
//         order; the bubble is the same in either order, ascending frees the oldest
//         activations first.
//  1f1b:  Megatron's non-interleaved schedule: min(P - p - 1, M) warm-up forwards, then
//         steady one-forward-one-backward, then the cool-down backwards.
//  interleaved: Megatron's interleaved 1F1B over M * V (micro, chunk) units. Unit k's
//         chunk is (k mod P*V) / P forward (V - 1 - that backward) and its micro-batch
//         (k / (P*V)) * P + k mod P; warm-up is min((P - p - 1) * 2 + (V - 1) * P, M * V)
//         units, or all of them when M == P (as Megatron does).
std::vector<PipeOp> pipeline_ops(PipelineSchedule s, const PipelineShape& shape, int stage);

// The stage on the other end of a send/recv op: the neighbouring virtual stage's rank
// (next one for send_forward / recv_backward, previous one for recv_forward / send_backward).
int pipe_peer_stage(const PipelineShape& shape, int stage, const PipeOp& op);

// Analytic idle share of the pipeline's makespan (equal forward/backward costs on every
// stage, free point-to-point): (P-1)/(M+P-1) for gpipe and 1f1b, (P-1)/(V*M+P-1) interleaved.
double bubble_fraction(PipelineSchedule s, const PipelineShape& shape);

// Most units of activations alive at once on `stage` (forward done, backward not yet).
// A unit is one micro-batch through one chunk: for gpipe/1f1b a micro-batch through the
// whole stage (M for gpipe, min(P - p, M) for 1f1b); for interleaved a micro-batch through
// 1/V of the stage's layers (min(warm-up + 1, M * V)).
int max_in_flight(PipelineSchedule s, const PipelineShape& shape, int stage);

}  // namespace llmrun
