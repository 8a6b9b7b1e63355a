#include "plan/comm_model.h"

#include "parallel/expert_layout.h"
#include "plan/memory_model.h"

namespace llmrun {

double StageComm::sent(const std::string& group) const {
  double t = 0;
  for (const CommItem& i : items)
    if (i.group == group) t += i.sent;
  return t;
}

double StageComm::sent_outside_pipeline() const {
  double t = 0;
  for (const CommItem& i : items)
    if (i.outside_pipeline) t += i.sent;
  return t;
}

double StageComm::sent_total() const {
  double t = 0;
  for (const CommItem& i : items) t += i.sent;
  return t;
}

std::vector<StageComm> plan_communication(const TrainingShape& s, const TrainingLayout& l) {
  const std::vector<StageMemory> mem = plan_memory(s, l);
  const ModelConfig& m = s.model;
  const int M = micro_batches_per_step(s, l);
  // Tokens per micro-batch on this rank (context parallelism: its share of each sequence).
  const double n = double(s.micro_batch) * m.seq_len / l.cp;
  const double act = 4.0 * n * m.d_model;  // one [tokens, d] fp32 tensor
  const double param_bytes = 4;  // gradients and ZeRO-3 gathers move fp32 under bf16 compute too
  auto ring = [](int ranks) { return ranks > 1 ? double(ranks - 1) / ranks : 0.0; };
  const double D = ring(l.dp * l.cp), T = ring(l.tp);  // gradients reduce over dp x cp
  std::vector<StageComm> out;
  for (const StageMemory& st : mem) {
    StageComm c;
    c.stage = st.stage;
    auto add = [&](const std::string& group, const std::string& what, double payload, double factor,
                   bool outside_pipeline = false) {
      if (payload > 0 && factor > 0)
        c.items.push_back({group, what, payload, payload * factor, outside_pipeline});
    };
    // Data parallel: ZeRO decides what moves and how often.
    double g = 4.0 * double(st.param_elements);
    const double w = param_bytes * double(st.param_elements);
    // Expert parallel: the experts' gradients reduce over the dp x cp / ep ranks that hold them
    // (at ZeRO 1-3 reduce-scatter and all-gather, about an all-reduce's bytes); the token rows
    // cross the ep group by all-to-all, four times per MoE layer.
    if (l.ep > 1) {
      double expert = 0, a2a = 0;
      for (int b : st.blocks)
        if (m.moe.layer_is_moe(b)) {
          expert += 4.0 * local_experts(m.moe, l.ep) * 3.0 * m.d_model * m.moe.expert_ffn;
          a2a += expert_all_to_all_bytes(m, l.ep, int64_t(n)) * M;
        }
      g -= expert;
      add("dp", "all-reduce expert gradients over the dp x cp / ep ranks holding them", expert,
          2 * ring(l.dp * l.cp / l.ep), true);
      add("ep", "all-to-all of routed token rows (dispatch, combine, both gradients)", a2a, 1.0);
    }
    if (l.dp * l.cp > 1) {
      switch (l.zero) {
        case 0:
          add("dp", "all-reduce gradients (once per step)", g, 2 * D, true);
          break;
        case 1:
          add("dp", "reduce-scatter gradients (once per step)", g, D, true);
          add("dp", "all-gather updated parameters (once per step)", w, D, true);
          break;
        case 2:
          add("dp", "reduce-scatter gradients (every micro-batch)", g * M, D, true);
          add("dp", "all-gather updated parameters (once per step)", w, D, true);
          break;
        default:
          add("dp", "all-gather parameters (forward and backward of every micro-batch)", 2 * w * M,
              D, true);
          add("dp", "reduce-scatter gradients (every micro-batch)", g * M, D, true);
      }
    }
    // Tensor parallel: two all-reduces of [tokens, d] per block in each direction (after the
    // row-parallel out and down projections forward, before the column-parallel qkv and up
    // backward); sequence parallelism replaces each by a reduce-scatter + all-gather pair,
    // which moves the same bytes.
    if (l.tp > 1) {
      const double blocks = double(st.blocks.size());
      const std::string kind = l.sequence_parallel ? "reduce-scatter + all-gather" : "all-reduce";
      add("tp", kind + " of [tokens, d], 2 per block forward and 2 backward", 4 * blocks * act * M,
          2 * T);
      if (st.embedding) add("tp", kind + " of the vocab-parallel embedding output", act * M, 2 * T);
      if (st.head) {
        if (l.sequence_parallel)
          add("tp", "all-gather of the head input and reduce-scatter of its gradient", 2 * act * M,
              T);
        // Vocab-parallel cross-entropy: max, sum of exponentials and target logit per token.
        add("tp", "all-reduce of the cross-entropy's max, sum and target logit", 3 * 4.0 * n * M,
            2 * T);
      }
    }
    // Context parallel, per block and micro-batch: p2p sends this rank's packed keys and
    // values cp-1 hops forward and again backward, plus cp hops of their gradients;
    // all_gather gathers them forward and backward and reduce-scatters the gradients.
    if (l.cp > 1 && !st.blocks.empty()) {
      const double kv = double(std::max(m.kv_heads / l.tp, 1)) * m.head_dim();
      const double packed = 4.0 * 2.0 * n * kv;
      const double per = double(st.blocks.size()) * M * packed;
      if (l.cp_comm == CpComm::a2a) {
        // Ulysses: each all-to-all keeps 1/cp of a tensor and sends the rest; q|k|v and the
        // output forward, and in the backward q|k|v, the output, its gradient and dq|dk|dv.
        const double qkv = 4.0 * n * double(m.heads / l.tp + 2 * std::max(m.kv_heads / l.tp, 1)) *
                           m.head_dim() * double(st.blocks.size()) * M;
        const double out =
            4.0 * n * double(m.heads / l.tp) * m.head_dim() * double(st.blocks.size()) * M;
        add("cp", "all-to-all of q, k, v (forward, backward) and dq, dk, dv", 3 * qkv, ring(l.cp));
        add("cp", "all-to-all of the attention output and its gradient", 3 * out, ring(l.cp));
      } else if (l.cp_comm == CpComm::p2p) {
        add("cp", "ring: keys and values, cp-1 hops forward and backward", 2 * per, l.cp - 1);
        add("cp", "ring: their gradients, cp hops backward", per, l.cp);
      } else {
        add("cp", "all-gather keys and values (forward and backward)", 2 * per * l.cp, ring(l.cp));
        add("cp", "reduce-scatter their gradients", per * l.cp, ring(l.cp));
      }
    }
    // Pipeline: [tokens, d] (a sequence-parallel shard of it) per send in the op list.
    if (l.pp > 1) {
      const PipelineShape pipe{l.pp, M, l.virtual_stages};
      int sends = 0;
      for (const PipeOp& op : pipeline_ops(l.schedule, pipe, st.stage))
        sends += op.kind == PipeOpKind::send_forward || op.kind == PipeOpKind::send_backward;
      const double msg = l.sequence_parallel ? act / l.tp : act;
      add("pp", "send activations and gradients (" + std::to_string(sends) + " messages)",
          msg * sends, 1.0);
      // The two copies of a tied token table sum their gradients once per step.
      if (m.tie_embeddings && (st.embedding || st.head)) {
        const double table = 4.0 * double(vocab_rows(m.vocab, l.tp, 0)) * m.d_model;
        add("pp", "all-reduce of the tied token table's gradient (first and last stage)", table,
            1.0, true);
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace llmrun
