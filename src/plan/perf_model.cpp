#include "plan/perf_model.h"

#include <algorithm>
#include <stdexcept>

#include "parallel/expert_layout.h"
#include "parallel/pipeline_sim.h"
#include "plan/comm_model.h"
#include "plan/memory_model.h"
#include "util/error.h"

namespace llmrun {

int group_span(const TrainingLayout& l, const std::string& group) {
  if (group == "tp") return l.tp;
  if (group == "cp") return l.tp * l.cp;
  if (group == "pp") return l.tp * l.cp * l.pp;
  if (group == "dp") return l.dp > 1 ? l.world() : l.tp * l.cp;
  if (group == "ep") return l.tp * l.cp * l.pp * l.ep;  // experts split over dp's first ranks
  throw std::logic_error("plan: unknown group " + group);
}

double group_bandwidth(const PerfAssumptions& a, const TrainingLayout& l,
                       const std::string& group) {
  const int span = group_span(l, group);
  // Nodes hold consecutive ranks, so a group stays inside one exactly when its span divides the
  // node's GPUs.
  const bool in_node =
      a.gpus_per_node > 0 && span <= a.gpus_per_node && a.gpus_per_node % span == 0;
  if (a.gpus_per_node == 0) return group == "tp" ? a.tp_bandwidth : a.bandwidth;
  return in_node ? a.tp_bandwidth : a.bandwidth;
}

StepPrediction predict_step(const TrainingShape& s, const TrainingLayout& l,
                            const PerfAssumptions& a) {
  if (!(a.peak_flops > 0) || !(a.bandwidth > 0) || !(a.tp_bandwidth > 0))
    throw UserError("plan: the peak FLOP/s and bandwidths must be positive");
  if (a.gpus_per_node < 0) throw UserError("plan: --gpus-per-node must not be negative");
  const double tp_bw = group_bandwidth(a, l, "tp"), cp_bw = group_bandwidth(a, l, "cp"),
               pp_bw = group_bandwidth(a, l, "pp");
  const ModelConfig& m = s.model;
  const std::vector<StageMemory> mem = plan_memory(s, l);
  const std::vector<StageComm> comm = plan_communication(s, l);
  const int M = micro_batches_per_step(s, l);
  // Tokens of a micro-batch on one rank: under context parallelism its share of each sequence
  // (each local token still attends over the whole sequence's keys, as before).
  const double tokens = double(s.micro_batch) * m.seq_len / l.cp;
  // Per token, one tensor-parallel rank's forward FLOPs of one block and of the head.
  const double heads = double(m.heads / l.tp), kv = std::max(m.kv_heads / l.tp, 1),
               hd = m.head_dim();
  const double d = m.d_model, f = double(m.ffn / l.tp), up = m.arch == Arch::gpt2 ? f : 2 * f;
  const double block_weights = (heads + 2 * kv) * hd * d + d * heads * hd + up * d + d * f;
  const double attention_fwd = 4.0 * m.seq_len * heads * hd;
  const double block_fwd = 2.0 * block_weights + attention_fwd;
  // An MoE layer's MLP per token: the router, top_k experts and the shared expert (whole on every
  // tp rank).
  const MoeConfig& moe = m.moe;
  const double moe_mlp = d * moe.experts + 3.0 * d * moe.top_k * moe.expert_ffn +
                         (moe.shared_width() > 0 ? 3.0 * d * moe.shared_width() + d : 0);
  const double moe_fwd_delta = 2.0 * (moe_mlp - (up * d + d * f));
  const double head_fwd = 2.0 * double(vocab_rows(m.vocab, l.tp, 0)) * d;
  double recompute = 0;
  if (l.recompute == Recompute::full) recompute = block_fwd;
  if (l.recompute == Recompute::selective) recompute = attention_fwd;
  const double act = 4.0 * tokens * d;
  const double T = l.tp > 1 ? 2.0 * (l.tp - 1) / l.tp : 0.0;  // all-reduce bytes sent per byte

  StepPrediction p;
  StageTimes times;
  for (const StageMemory& st : mem) {
    const double blocks = double(st.blocks.size());
    double moe_extra = 0;  // the stage's MoE layers' forward FLOPs over dense blocks'
    for (int b : st.blocks) moe_extra += moe.layer_is_moe(b) ? moe_fwd_delta : 0;
    double fwd =
        tokens * (blocks * block_fwd + moe_extra + (st.head ? head_fwd : 0)) / a.peak_flops;
    double bwd = tokens *
                 (blocks * (2 * block_fwd + recompute) + 2 * moe_extra +
                  (l.recompute == Recompute::full ? moe_extra : 0) + (st.head ? 2 * head_fwd : 0)) /
                 a.peak_flops;
    const double tp_each = 2 * blocks * act * T / tp_bw;  // two all-reduces per block each way
    fwd += tp_each;
    bwd += tp_each;
    // Expert parallel: dispatch and combine forward, their gradients backward, per MoE layer.
    double ep_each = 0;
    for (int b : st.blocks)
      ep_each += moe.layer_is_moe(b) ? expert_all_to_all_bytes(m, l.ep, int64_t(tokens)) : 0;
    ep_each /= group_bandwidth(a, l, "ep");
    fwd += ep_each / 2;
    bwd += ep_each / 2;
    // Context parallel ring (p2p): the key/value hops travel while the attention blocks
    // compute, so only what the attention does not cover shows; so do the dK/dV hops but the
    // last; the all_gather and a2a variants' collectives wait in full.
    double cp_ring = 0, cp_exposed = 0;
    if (l.cp > 1 && blocks > 0) {
      const double packed = 4.0 * 2.0 * tokens * kv * hd;
      const double attn_s = blocks * tokens * attention_fwd / a.peak_flops;
      const double kv_s = blocks * (l.cp - 1) * packed / cp_bw;
      if (l.cp_comm == CpComm::a2a) {
        // Ulysses's all-to-alls wait in full: forward q|k|v and the output, backward twice.
        const double ring = double(l.cp - 1) / l.cp;
        const double a2a_s = blocks * 4.0 * tokens * (heads + 2 * kv + heads) * hd * ring / cp_bw;
        cp_ring = cp_exposed = 3 * a2a_s;
        fwd += a2a_s;
        bwd += 2 * a2a_s;
      } else if (l.cp_comm == CpComm::p2p) {
        const double grad_s = blocks * l.cp * packed / cp_bw;
        cp_ring = 2 * kv_s + grad_s;
        const double exposed_f = std::max(0.0, kv_s - attn_s);
        // dK/dV hops travel behind the next step's blocks too; only the home hop shows.
        const double exposed_b =
            std::max(0.0, kv_s + grad_s * (l.cp - 1) / l.cp - 2 * attn_s) + grad_s / l.cp;
        cp_exposed = exposed_f + exposed_b;
        fwd += exposed_f;
        bwd += exposed_b;
      } else {
        cp_ring = cp_exposed = 3 * kv_s;
        fwd += kv_s;
        bwd += 2 * kv_s;
      }
    }
    times.forward.push_back(fwd);
    times.backward.push_back(bwd);
    if (fwd + bwd > p.forward_s + p.backward_s) {
      p.forward_s = fwd;
      p.backward_s = bwd;
      p.tp_comm_s = 2 * tp_each * M;
      p.cp_comm_s = cp_ring * M;
      p.cp_exposed_s = cp_exposed * M;
      p.ep_comm_s = ep_each * M;
    }
  }
  p.compute_s = (p.forward_s + p.backward_s) * M;
  if (l.pp > 1) {
    const double msg = (l.sequence_parallel ? act / l.tp : act) / pp_bw;
    const PipelineSimulation sim =
        simulate_pipeline(l.schedule, {l.pp, M, l.virtual_stages}, times, msg);
    p.pipeline_s = sim.makespan;
    p.bubble = sim.bubble_fraction;
    p.stage_waiting = sim.waiting;
  } else {
    p.pipeline_s = p.compute_s;
  }
  for (const StageComm& c : comm) {
    double outside = 0;
    for (const CommItem& i : c.items)
      if (i.outside_pipeline) outside += i.sent / group_bandwidth(a, l, i.group);
    p.dp_comm_s = std::max(p.dp_comm_s, outside);
  }
  p.step_s = p.pipeline_s + p.dp_comm_s;
  for (double& w : p.stage_waiting) w /= p.step_s;
  const double step_tokens = double(s.global_batch) * m.seq_len;
  p.tokens_per_s = step_tokens / p.step_s;
  p.model_flops = m.train_flops_per_token(m.seq_len) * step_tokens;
  p.mfu = p.model_flops / (p.step_s * l.world() * a.peak_flops);
  return p;
}

}  // namespace llmrun
