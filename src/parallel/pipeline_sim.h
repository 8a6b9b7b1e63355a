#pragma once
// Executes every stage's instruction list together in simulated time: forwards and backwards
// occupy their stage, sends never block (a message arrives t_p2p after it was sent),
// receives block until their message has arrived. Messages travel on one FIFO channel per
// (sender stage, receiver stage, direction), as point-to-point messages with one tag per
// direction do, so the simulator also proves that each receive gets exactly the message it
// expects (same micro-batch, neighbouring virtual stage) in the order it expects it.
#include <vector>

#include "parallel/schedule.h"

namespace llmrun {

struct PipeInterval {
  double start = 0, end = 0;
  PipeOp op{PipeOpKind::forward, 0, 0};  // a forward or backward
};

struct PipelineSimulation {
  PipelineShape shape;
  std::vector<std::vector<PipeInterval>> busy;  // per stage, its compute in execution order
  double makespan = 0;                          // all stages start at 0
  double bubble_fraction = 0;                   // 1 - busy time / (stages * makespan)
  std::vector<int> peak_in_flight;              // per stage, most units alive at once
  // Per stage, the time it spent blocked in receives (what the trainer measures as its
  // pipeline_idle), up to its last op.
  std::vector<double> waiting;
};

// Forward and backward time of one micro-batch through each stage's layers.
struct StageTimes {
  std::vector<double> forward, backward;
  static StageTimes uniform(int stages, double t_forward, double t_backward) {
    return {std::vector<double>(size_t(stages), t_forward),
            std::vector<double>(size_t(stages), t_backward)};
  }
};

// t_forward / t_backward: one micro-batch through all of a stage's layers; an interleaved
// chunk op takes 1/V of it. Throws std::logic_error on a deadlock (naming each stage's
// blocked op), a receive that gets the wrong message, or messages nobody receives.
PipelineSimulation simulate_pipeline(PipelineSchedule s, const PipelineShape& shape,
                                     double t_forward, double t_backward, double t_p2p);

// Stages of different speeds (e.g. the last one also runs the head).
PipelineSimulation simulate_pipeline(PipelineSchedule s, const PipelineShape& shape,
                                     const StageTimes& times, double t_p2p);

// The same for explicit lists (one per stage), e.g. a schedule under test.
PipelineSimulation simulate_pipeline_ops(const PipelineShape& shape,
                                         const std::vector<std::vector<PipeOp>>& ops,
                                         double t_forward, double t_backward, double t_p2p);
PipelineSimulation simulate_pipeline_ops(const PipelineShape& shape,
                                         const std::vector<std::vector<PipeOp>>& ops,
                                         const StageTimes& times, double t_p2p);

}  // namespace llmrun
