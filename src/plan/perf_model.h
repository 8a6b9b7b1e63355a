#pragma once
// Step time from shapes (AxoNN-style: compute at a peak rate plus communication at a link
// bandwidth plus the pipeline's bubble). Per micro-batch and pipeline stage, forward and
// backward FLOPs of the stage's blocks (weight GEMMs of this tensor-parallel rank, attention
// scores and values counted as full, as Megatron does) and of the vocab-parallel head run at
// `peak_flops`; backward is twice the forward, plus a block forward under full recompute or
// the attention core's forward under selective. Tensor-parallel collectives are added to
// the stage's forward and backward at `tp_bandwidth`. The pipeline (each stage's own times,
// point-to-point messages at `bandwidth`) is simulated with the schedule's op lists, which
// gives the bubble and how long each stage waits on its neighbours (a stage without the head
// waits for the one with it, beyond the schedule's own bubble). Data-parallel traffic (and the
// tied-embedding all-reduce) runs at `bandwidth` after the pipeline: nothing is assumed to overlap,
// so predictions are upper bounds when communication overlaps the backward in reality.
// With `gpus_per_node` set, a group whose ranks all sit in one node (ranks are numbered tp
// fastest, then cp, pp, dp, and nodes hold consecutive ranks) is priced at `tp_bandwidth`, the
// node's link (NVLink), and only groups that span nodes at `bandwidth` (the network).
#include <string>
#include <vector>

#include "parallel/layout_rules.h"

namespace llmrun {

struct PerfAssumptions {
  double peak_flops = 0;    // FLOP/s one rank reaches in dense fp32 GEMMs
  std::string peak_source;  // where that number came from, for the report
  double tp_bandwidth =
      150e9;  // bytes/s a rank sends inside its tensor-parallel group (NVLink-class)
  double bandwidth =
      25e9;  // bytes/s a rank sends to data/pipeline-parallel peers (200 Gb/s InfiniBand)
  int gpus_per_node = 0;  // 0: every cp, pp and dp group is priced at `bandwidth`
};

// Which links a group uses: ranks a group of the layout spans (tp: tp; cp: tp*cp; pp: tp*cp*pp;
// dp, over dp x cp: the world).
int group_span(const TrainingLayout& l, const std::string& group);
// Bytes/s of `group` under `a`: tp_bandwidth inside a node, else bandwidth.
double group_bandwidth(const PerfAssumptions& a, const TrainingLayout& l, const std::string& group);

struct StepPrediction {
  double forward_s = 0,
         backward_s = 0;  // one micro-batch on the slowest stage, tp collectives included
  double compute_s = 0;   // all micro-batches' compute on the slowest stage
  double tp_comm_s = 0;   // of which tensor-parallel collectives
  double pipeline_s = 0;  // simulated makespan of the forward/backward pipeline
  double bubble = 0;      // its idle share, all stages together
  std::vector<double> stage_waiting;  // per stage, share of the step blocked in receives

  // Context parallel: the ring's transfers over the step (slowest stage), and the part of
  // them not hidden behind the attention blocks (already in compute_s).
  double cp_comm_s = 0;
  double cp_exposed_s = 0;
  // Expert parallel: the token all-to-alls over the step (slowest stage; in compute_s, not
  // overlapped: every expert GEMM waits for its rows).
  double ep_comm_s = 0;

  double dp_comm_s = 0;  // data-parallel (and tied-embedding) traffic after the pipeline
  double step_s = 0;
  double tokens_per_s = 0;
  double model_flops = 0;  // per step, whole job: 6N + attention per token (train_flops_per_token)
  double mfu = 0;          // model_flops / (step_s * ranks * peak_flops)
};

StepPrediction predict_step(const TrainingShape& s, const TrainingLayout& l,
                            const PerfAssumptions& a);

}  // namespace llmrun
