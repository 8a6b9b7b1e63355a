// The planner's arithmetic: parameter counts against the real layout, activation and
// optimizer bytes against what the Transformer and ZeroOptimizer allocate (one rank), tensor
// and pipeline sharding by hand, communication volumes, the budget refusal and the search.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "model/param_layout.h"
#include "model/transformer.h"
#include "plan/comm_model.h"
#include "plan/layout_search.h"
#include "plan/memory_budget.h"
#include "plan/memory_model.h"
#include "plan/perf_model.h"
#include "test_backend.h"
#include "train/zero_optimizer.h"
#include "util/error.h"

namespace llmrun {
namespace {

ModelConfig config(Arch arch, bool tied, int kv_heads = 4) {
  ModelConfig c;
  c.arch = arch;
  c.layers = 4;
  c.d_model = 32;
  c.heads = 4;
  c.kv_heads = arch == Arch::gpt2 ? 4 : kv_heads;
  c.ffn = 64;
  c.vocab = 300;
  c.seq_len = 16;
  c.tie_embeddings = tied;
  return c;
}

TrainingShape shape(const ModelConfig& c, int micro_batch = 2, int global_batch = 8) {
  TrainingShape s;
  s.model = c;
  s.micro_batch = micro_batch;
  s.global_batch = global_batch;
  return s;
}

TEST(PlanMemory, ParametersMatchTheModelLayoutPaddedPerBucket) {
  for (Arch arch : {Arch::gpt2, Arch::llama})
    for (bool tied : {true, false})
      for (int dp : {1, 3}) {
        ModelConfig c = config(arch, tied, 2);
        c.qkv_bias = arch == Arch::llama && tied;  // Qwen 2's q/k/v biases count too
        TrainingLayout l;
        l.dp = dp;
        int64_t want = 0;
        for (const BucketLayout& b : model_layout(c)) want += (b.numel + dp - 1) / dp * dp;
        const std::vector<StageMemory> m = plan_memory(shape(c, 1, 3 * dp), l);
        ASSERT_EQ(m.size(), 1u);
        EXPECT_EQ(m[0].param_elements, want) << arch_name(arch) << " tied " << tied << " dp " << dp;
        EXPECT_EQ(m[0].buckets, c.layers + 2);
        if (dp == 1) {
          EXPECT_EQ(m[0].param_elements, c.param_count());
        }
      }
}

// One rank: the plan's bytes are exactly what training allocates, under either compute
// precision (bf16 rounds GEMM operands; weights, gradients and optimizer stay fp32).
TEST(PlanMemory, OneRankMatchesWhatTrainingAllocates) {
  for (const char* compute : {"fp32", "bf16"})
    for (Arch arch : {Arch::gpt2, Arch::llama})
      for (bool tied : {true, false}) {
        auto backend = test::make_test_backend(1);
        if (std::string(compute) == "bf16") backend->set_gemm_dtype(DType::bf16);
        const ModelConfig c = config(arch, tied, 2);
        const int batch = 3;
        Transformer model(*backend, c, ZeroOptimizer::store_options(0, 1));
        auto comm = make_self_communicator("dp");
        ZeroOptimizer opt(model, *comm, 0, {});
        std::vector<int32_t> tokens(size_t(batch) * c.seq_len, 7);
        model.forward(tokens.data(), batch, c.seq_len);
        TrainingShape s = shape(c, batch, batch);
        s.compute = compute;
        const StageMemory m = plan_memory(s, TrainingLayout{})[0];
        EXPECT_EQ(m.activations, double(model.activation_bytes()))
            << arch_name(arch) << " tied " << tied << " " << compute;
        EXPECT_EQ(m.params, double(opt.memory().params));
        EXPECT_EQ(m.grads, double(opt.memory().grads));
        EXPECT_EQ(m.optimizer, double(opt.memory().optimizer));
        EXPECT_EQ(m.buffers, double(opt.memory().buffers));
      }
}

TEST(PlanMemory, TensorParallelShardsByHand) {
  // Llama, 4 heads, 2 kv heads, tp 4: one query head and one (replicated) kv head per rank.
  ModelConfig c = config(Arch::llama, false, 2);
  c.vocab = 301;  // uneven: rank 0 holds 76 rows
  TrainingLayout l;
  l.tp = 4;
  const StageMemory m = plan_memory(shape(c), l)[0];
  const int64_t d = 32, hd = 8, f = 64 / 4, rows = 76;
  const int64_t block = 2 * d + (1 + 2 * 1) * hd * d + d * hd + 2 * f * d + d * f;
  EXPECT_EQ(vocab_rows(301, 4, 0), rows);
  EXPECT_EQ(vocab_rows(301, 4, 3), 75);
  EXPECT_EQ(m.param_elements, rows * d + 4 * block + d + rows * d);
  // GPT-2 at tp 2: column-parallel c_attn and c_fc with their biases, row-parallel projections
  // with replicated biases, replicated norms and position table.
  ModelConfig g = config(Arch::gpt2, true);
  l.tp = 2;
  const StageMemory mg = plan_memory(shape(g), l)[0];
  const int64_t gb = 2 * d + 48 * d + 48 + d * 16 + d + 2 * d + 32 * d + 32 + d * 32 + d;
  EXPECT_EQ(mg.param_elements, 150 * d + 16 * d + 4 * gb + 2 * d);
  // Sequence parallelism shrinks what is saved per micro-batch; full recompute keeps only inputs.
  l.sequence_parallel = true;
  const StageMemory sp = plan_memory(shape(g), l)[0];
  EXPECT_LT(sp.act_per_micro[0], mg.act_per_micro[0]);
  // Full recompute: 16 rows of the 32 tokens per rank; the 4 block inputs and the final residual,
  // the token ids and their local copy, the final norm with mean/rstd, the gathered head input
  // and this rank's 150 columns of logits.
  const int64_t n = 32, rows16 = 16;
  EXPECT_EQ(sp.act_per_micro[2],
            4.0 * (5 * rows16 * d + 2 * n + rows16 * (d + 2) + n * d + n * 150));
}

TEST(PlanMemory, PipelineStagesAndInFlightMicroBatches) {
  const ModelConfig c = config(Arch::gpt2, true);
  TrainingLayout l;
  l.pp = 2;
  const std::vector<StageMemory> m = plan_memory(shape(c, 1, 8), l);  // 8 micro-batches
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].blocks, (std::vector<int>{0, 1}));
  EXPECT_EQ(m[1].blocks, (std::vector<int>{2, 3}));
  EXPECT_TRUE(m[0].embedding && !m[0].head && m[1].head && !m[1].embedding);
  // The tied head keeps its own token table on the last stage.
  const int64_t d = 32, block = 2 * d + 96 * d + 96 + d * d + d + 2 * d + 64 * d + 64 + d * 64 + d;
  EXPECT_EQ(m[0].param_elements, 300 * d + 16 * d + 2 * block);
  EXPECT_EQ(m[1].param_elements, 2 * block + 2 * d + 300 * d);
  // 1F1B: stage 0 holds P = 2 micro-batches, the last stage one.
  EXPECT_EQ(m[0].max_in_flight, 2);
  EXPECT_EQ(m[1].max_in_flight, 1);
  EXPECT_DOUBLE_EQ(m[0].act_in_flight, 2 * m[0].act_per_micro[0]);
  l.schedule = PipelineSchedule::gpipe;
  EXPECT_DOUBLE_EQ(plan_memory(shape(c, 1, 8), l)[0].act_in_flight, 8 * m[0].act_per_micro[0]);
  // Interleaved: stage 0 runs blocks 0 and 2, stage 1 blocks 1 and 3.
  l.schedule = PipelineSchedule::interleaved;
  l.virtual_stages = 2;
  const std::vector<StageMemory> v = plan_memory(shape(c, 1, 8), l);
  EXPECT_EQ(v[0].blocks, (std::vector<int>{0, 2}));
  EXPECT_EQ(v[0].max_in_flight, 5);  // (P-1)*2 + (V-1)*P + 1 units of half a stage
  // Each chunk keeps its own pool of units: chunk 0 (virtual stage 0) has up to 4 alive, chunk 1
  // up to 2; chunk 0's unit is chunk 1's plus the 16 token ids (64 bytes).
  const double chunk1 = (v[0].act_per_micro[0] - 64) / 2;
  EXPECT_DOUBLE_EQ(v[0].act_in_flight, 4 * (chunk1 + 64) + 2 * chunk1);
  // Recompute: each level keeps less.
  for (const StageMemory& s : m) {
    EXPECT_LT(s.act_per_micro[1], s.act_per_micro[0]);
    EXPECT_LT(s.act_per_micro[2], s.act_per_micro[1]);
  }
}

TEST(PlanMemory, ZeroStagesShardAndOffloadMovesTheOptimizer) {
  const ModelConfig c = config(Arch::llama, false, 2);
  TrainingLayout l;
  l.dp = 4;
  double prev_peak = 1e300;
  for (int z = 0; z <= 3; ++z) {
    l.zero = z;
    const StageMemory m = plan_memory(shape(c, 1, 8), l)[0];
    const double full = 4.0 * double(m.param_elements), shard = full / 4;
    EXPECT_DOUBLE_EQ(m.params, z == 3 ? shard : full);
    EXPECT_DOUBLE_EQ(m.grads, z >= 2 ? shard : full);
    EXPECT_DOUBLE_EQ(m.optimizer, 2 * (z >= 1 ? shard : full));
    if (z < 2) {
      EXPECT_LT(m.params + m.grads + m.optimizer, prev_peak);
      prev_peak = m.params + m.grads + m.optimizer;
    }
  }
  TrainingShape s = shape(c, 1, 8);
  s.offload_optimizer = Offload::cpu;
  l.zero = 1;
  const StageMemory off = plan_memory(s, l)[0];
  EXPECT_EQ(off.optimizer, 0.0);
  EXPECT_DOUBLE_EQ(off.optimizer_offloaded, 8.0 * double(off.shard_elements));

  // ZeRO-3 parameter shards offloaded leave device memory: the peak drops by their bytes, less
  // the staging that streams them (test_plan_offload_staging.cpp checks it).
  s.offload_optimizer = Offload::none;
  l.zero = 3;
  const StageMemory kept = plan_memory(s, l)[0];
  for (const Offload o : {Offload::cpu, Offload::nvme}) {
    const char* where = offload_name(o);
    s.offload_params = o;
    const StageMemory moved = plan_memory(s, l)[0];
    EXPECT_EQ(moved.params, 0.0) << where;
    EXPECT_DOUBLE_EQ(moved.params_offloaded, kept.params) << where;
    EXPECT_GT(moved.offload_staging, 0.0) << where;
    EXPECT_DOUBLE_EQ(moved.peak, kept.peak - kept.params + moved.offload_staging) << where;
  }
}

TEST(PlanComm, VolumesPerStep) {
  const ModelConfig c = config(Arch::gpt2, true);
  TrainingLayout l;
  l.dp = 4;
  const TrainingShape s = shape(c, 1, 8);  // 2 micro-batches per rank
  const double g = 4.0 * double(plan_memory(s, l)[0].param_elements);
  EXPECT_DOUBLE_EQ(plan_communication(s, l)[0].sent("dp"), 2 * 0.75 * g);
  l.zero = 2;
  EXPECT_DOUBLE_EQ(plan_communication(s, l)[0].sent("dp"), 0.75 * (2 * g + g));
  l.zero = 3;
  EXPECT_DOUBLE_EQ(plan_communication(s, l)[0].sent("dp"), 0.75 * (2 * 2 * g + 2 * g));
  // tp 2: 4 all-reduces of [tokens, d] per block and micro-batch, 2 (T-1)/T = 1 byte sent per byte.
  TrainingLayout t;
  t.tp = 2;
  const TrainingShape s1 = shape(c, 1, 2);  // 2 micro-batches of 16 tokens
  const double act = 4.0 * 16 * 32;
  const StageComm tc = plan_communication(s1, t)[0];
  EXPECT_DOUBLE_EQ(tc.items[0].sent, 4 * 4 * act * 2);
  // pp 2, 1f1b: stage 0 sends one activation per micro-batch, stage 1 one gradient.
  TrainingLayout p;
  p.pp = 2;
  for (const StageComm& sc : plan_communication(s1, p)) {
    EXPECT_DOUBLE_EQ(sc.items[0].sent, 2 * act) << "stage " << sc.stage;
    EXPECT_EQ(sc.items[1].what.find("tied"), std::string("all-reduce of the ").size());
  }
}

TEST(PlanBudget, RefusalNamesTheStageAndTheFix) {
  const ModelConfig c = config(Arch::gpt2, true);
  TrainingLayout l;
  const std::vector<StageMemory> m = plan_memory(shape(c), l);
  EXPECT_EQ(memory_budget_problem(m, l, 0), "");
  EXPECT_EQ(memory_budget_problem(m, l, int64_t(m[0].peak)), "");
  const std::string msg = memory_budget_problem(m, l, int64_t(m[0].peak) - 1);
  EXPECT_NE(msg.find("exceeds the budget"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pipeline stage 0 of tp1 pp1 dp1 zero0 recompute none"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("memory.recompute=full"), std::string::npos) << msg;
}

TEST(PlanSearch, RanksValidLayoutsAndSaysWhyOthersAreOut) {
  ModelConfig c = config(Arch::llama, false, 2);
  c.heads = 4;
  PerfAssumptions a;
  a.peak_flops = 1e12;
  const LayoutSearch s = search_layouts(shape(c, 1, 8), 8, 0, a);
  ASSERT_FALSE(s.ranked.empty());
  size_t excluded = 0;
  for (const ExcludedLayouts& e : s.excluded) excluded += e.layouts.size();
  EXPECT_EQ(s.ranked.size() + excluded, size_t(s.considered));
  for (size_t i = 1; i < s.ranked.size(); ++i)
    EXPECT_LE(s.ranked[i - 1].step.step_s, s.ranked[i].step.step_s);
  auto has_reason = [&](const std::string& text) {
    for (const ExcludedLayouts& e : s.excluded)
      if (e.reason.find(text) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has_reason("model.heads=4 is not divisible by tp=8"));
  EXPECT_TRUE(
      has_reason("pipeline stages but the model has only 4 layers"));  // pp 8, or pp 4 x V 2
  EXPECT_TRUE(has_reason("ZeRO-2/3 shard gradients"));
  EXPECT_TRUE(has_reason("with dp=1 every stage is ZeRO-0"));
  for (const RankedLayout& r : s.ranked) {
    EXPECT_EQ(r.layout.world(), 8);
    EXPECT_FALSE(layout_problem(shape(c, 1, 8), r.layout).has_value());
  }
  // A budget below every layout's peak excludes them all, with that reason.
  const LayoutSearch none = search_layouts(shape(c, 1, 8), 8, 1000, a);
  EXPECT_TRUE(none.ranked.empty());
  bool budget = false;
  for (const ExcludedLayouts& e : none.excluded)
    budget |= e.reason.find("above the budget") != std::string::npos;
  EXPECT_TRUE(budget);
}

TEST(PlanPerf, PipelineBubbleAndRecomputeCost) {
  const ModelConfig c = config(Arch::gpt2, true);
  PerfAssumptions a;
  a.peak_flops = 1e12;
  a.bandwidth = 1e30;  // free messages: the bubble is the schedule's
  TrainingLayout l;
  l.pp = 2;
  const StepPrediction p = predict_step(shape(c, 1, 8), l, a);
  // Stage 1 also runs the head, so stage 0 waits on it beyond the schedule's bubble of 1/9.
  EXPECT_GT(p.bubble, 1.0 / 9.0);
  ASSERT_EQ(p.stage_waiting.size(), 2u);
  EXPECT_GT(p.stage_waiting[0], p.stage_waiting[1]);
  // Moving a block off the head's stage evens them out: less waiting in all.
  TrainingLayout even = l;
  even.pp_layers = {3, 1};
  const StepPrediction e = predict_step(shape(c, 1, 8), even, a);
  EXPECT_LT(e.bubble, p.bubble);
  TrainingLayout r = l;
  r.recompute = Recompute::full;
  EXPECT_GT(predict_step(shape(c, 1, 8), r, a).step_s, p.step_s);
}

}  // namespace
}  // namespace llmrun
