// The planner on GPU clusters: which link each group uses (--gpus-per-node), and the step
// prediction of a Llama-3-8B-shaped model on 8 ranks worked out by hand (FLOPs per token,
// ZeRO-1 bytes, step = compute + data-parallel traffic, MFU), the figures bench/RESULTS.md
// records as predictions for 8xH100 and 64-GPU runs.
#include <gtest/gtest.h>

#include "plan/comm_model.h"
#include "plan/memory_model.h"
#include "plan/perf_model.h"

namespace llmrun {
namespace {

ModelConfig llama3_8b() {
  ModelConfig c;
  c.arch = Arch::llama;
  c.layers = 32;
  c.d_model = 4096;
  c.heads = 32;
  c.kv_heads = 8;
  c.ffn = 14336;
  c.vocab = 128256;
  c.seq_len = 8192;
  c.tie_embeddings = false;
  return c;
}

TrainingShape shape(const ModelConfig& c, int global_batch) {
  TrainingShape s;
  s.model = c;
  s.micro_batch = 1;
  s.global_batch = global_batch;
  return s;
}

TEST(PlanCluster, GroupSpansAndLinks) {
  TrainingLayout l;
  l.tp = 2;
  l.cp = 2;
  l.pp = 2;
  l.dp = 2;
  EXPECT_EQ(group_span(l, "tp"), 2);
  EXPECT_EQ(group_span(l, "cp"), 4);
  EXPECT_EQ(group_span(l, "pp"), 8);
  EXPECT_EQ(group_span(l, "dp"), 16);
  PerfAssumptions a;
  a.tp_bandwidth = 400;
  a.bandwidth = 50;
  // No node size: tp on its own link, every other group on the network.
  EXPECT_EQ(group_bandwidth(a, l, "tp"), 400);
  EXPECT_EQ(group_bandwidth(a, l, "cp"), 50);
  EXPECT_EQ(group_bandwidth(a, l, "pp"), 50);
  // 8 ranks a node: tp, cp and pp stay inside it, dp crosses nodes.
  a.gpus_per_node = 8;
  EXPECT_EQ(group_bandwidth(a, l, "cp"), 400);
  EXPECT_EQ(group_bandwidth(a, l, "pp"), 400);
  EXPECT_EQ(group_bandwidth(a, l, "dp"), 50);
  // 2 a node: only tp fits; a tp group wider than a node goes over the network too.
  a.gpus_per_node = 2;
  EXPECT_EQ(group_bandwidth(a, l, "tp"), 400);
  EXPECT_EQ(group_bandwidth(a, l, "cp"), 50);
  l.tp = 4;
  EXPECT_EQ(group_bandwidth(a, l, "tp"), 50);
  // A span that does not divide the node straddles node boundaries: network.
  TrainingLayout odd;
  odd.tp = 3;
  a.gpus_per_node = 8;
  EXPECT_EQ(group_bandwidth(a, odd, "tp"), 50);
  // dp of 1 over cp: the group is the cp ranks.
  TrainingLayout cp_only;
  cp_only.cp = 4;
  EXPECT_EQ(group_span(cp_only, "dp"), 4);
}

// Llama-3-8B, dp 8 with ZeRO-1, one node of 8 GPUs against 8 GPUs on 8 nodes: the compute is
// the same, the data-parallel traffic scales with the link.
TEST(PlanCluster, Llama8bOnEightRanksByHand) {
  const ModelConfig c = llama3_8b();
  EXPECT_EQ(c.param_count(), 8030261248);  // Meta-Llama-3-8B's published count
  TrainingLayout l;
  l.dp = 8;
  l.zero = 1;
  PerfAssumptions a;
  a.peak_flops = 989e12;
  a.tp_bandwidth = 450e9;
  a.bandwidth = 50e9;
  a.gpus_per_node = 8;
  const TrainingShape s = shape(c, 128);
  const StepPrediction node = predict_step(s, l, a);
  a.gpus_per_node = 1;
  const StepPrediction spread = predict_step(s, l, a);

  // Forward FLOPs per token, by hand: 2 x weights of a block (q 4096x4096, k and v 1024x4096,
  // out 4096x4096, gate and up 14336x4096, down 4096x14336) + attention 4 x seq x d, per block;
  // the head 2 x vocab x d. Backward twice that. 16 micro-batches of 8192 tokens per rank.
  const double d = 4096, block = (4096.0 + 2 * 1024 + 4096) * d + 3 * 14336 * d;
  const double fwd_token = 32 * (2 * block + 4 * 8192 * d) + 2 * 128256 * d;
  const double compute = 16 * 8192 * 3 * fwd_token / 989e12;
  EXPECT_NEAR(node.compute_s, compute, 1e-9 * compute);
  EXPECT_EQ(node.compute_s, spread.compute_s);

  // ZeRO-1 sends (n-1)/n of the padded fp32 gradients (reduce-scatter) and parameters
  // (all-gather) once per step.
  const std::vector<StageComm> comm = plan_communication(s, l);
  const double params = double(plan_memory(s, l)[0].param_elements) * 4;
  EXPECT_NEAR(comm[0].sent("dp"), 2 * params * 7 / 8, 1.0);
  EXPECT_NEAR(node.dp_comm_s, comm[0].sent("dp") / 450e9, 1e-12);
  EXPECT_NEAR(spread.dp_comm_s, comm[0].sent("dp") / 50e9, 1e-12);
  EXPECT_DOUBLE_EQ(node.step_s, node.compute_s + node.dp_comm_s);
  EXPECT_DOUBLE_EQ(node.tokens_per_s, 128 * 8192 / node.step_s);
  const double model_flops = (6.0 * (32 * block + 128256 * d) + 12.0 * 32 * d * 8192) * 128 * 8192;
  EXPECT_NEAR(node.model_flops, model_flops, 1e-9 * model_flops);
  EXPECT_DOUBLE_EQ(node.mfu, node.model_flops / (node.step_s * 8 * 989e12));
  EXPECT_GT(node.mfu, spread.mfu);
}

// The network's share of a pipeline: pp messages inside a node are cheaper than across, so a
// pp group that fits a node predicts a faster step than one spread over nodes.
TEST(PlanCluster, PipelineInsideANodeBeatsAcrossNodes) {
  const ModelConfig c = llama3_8b();
  TrainingLayout l;
  l.tp = 2;
  l.pp = 4;
  l.dp = 8;
  l.zero = 1;
  l.sequence_parallel = true;
  PerfAssumptions a;
  a.peak_flops = 989e12;
  a.tp_bandwidth = 450e9;
  a.bandwidth = 50e9;
  a.gpus_per_node = 8;  // tp x pp = 8: one pipeline per node
  const StepPrediction in_node = predict_step(shape(c, 256), l, a);
  a.gpus_per_node = 2;  // only tp inside a node
  const StepPrediction across = predict_step(shape(c, 256), l, a);
  EXPECT_LT(in_node.pipeline_s, across.pipeline_s);
  EXPECT_EQ(in_node.dp_comm_s, across.dp_comm_s);  // dp spans nodes either way
  EXPECT_EQ(in_node.tp_comm_s, across.tp_comm_s);
}

}  // namespace
}  // namespace llmrun
