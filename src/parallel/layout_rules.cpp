#include "parallel/layout_rules.h"

#include "parallel/cp_chunks.h"
#include "parallel/expert_layout.h"
#include "parallel/stage_layers.h"
#include "util/error.h"

namespace llmrun {

std::string TrainingLayout::describe() const {
  std::string s = "tp" + std::to_string(tp) + " pp" + std::to_string(pp) + " dp" +
                  std::to_string(dp) + " zero" + std::to_string(zero);
  if (pp > 1) {
    s += std::string(" ") + schedule_name(schedule);
    if (schedule == PipelineSchedule::interleaved) s += " V" + std::to_string(virtual_stages);
  }
  if (sequence_parallel) s += " sp";
  if (cp > 1) s += " cp" + std::to_string(cp);
  if (ep > 1) s += " ep" + std::to_string(ep);
  return s + " recompute " + recompute_name(recompute);
}

int micro_batches_per_step(const TrainingShape& s, const TrainingLayout& l) {
  return s.global_batch / (s.micro_batch * l.dp);
}

std::optional<LayoutProblem> layout_problem(const TrainingShape& s, const TrainingLayout& l) {
  const ModelConfig& m = s.model;
  const std::string tp = "tp=" + std::to_string(l.tp);
  if (m.heads % l.tp != 0)
    return LayoutProblem{"parallel.tp", "model.heads=" + std::to_string(m.heads) +
                                            " is not divisible by " + tp +
                                            " (each rank needs whole query heads)"};
  if (m.kv_heads % l.tp != 0 && l.tp % m.kv_heads != 0)
    return LayoutProblem{"parallel.tp",
                         "model.kv_heads=" + std::to_string(m.kv_heads) + " and " + tp +
                             ": tp must divide the key/value heads or be a multiple of them "
                             "(they are split, or replicated when tp > kv_heads)"};
  if (m.phi3 && m.kv_heads < l.tp)
    return LayoutProblem{"parallel.tp",
                         "Phi-3 keeps q, k and v in one tensor, whose key/value heads cannot be "
                         "replicated: " +
                             tp + " must not exceed model.kv_heads=" + std::to_string(m.kv_heads)};
  // Under tp an MoE layer runs whole on every tp rank (attention is split; the router and the
  // experts are replicated, their gradients whole on each): the norm output it reads must be
  // whole too, which sequence parallelism would shard.
  if (m.moe.enabled() && l.tp > 1 && l.sequence_parallel)
    return LayoutProblem{"parallel.sequence_parallel",
                         "mixture-of-experts layers run whole on every tensor-parallel rank and "
                         "need every token's rows: use sequence_parallel: false with model.moe"};
  // OLMoE's q/k norms take the root mean square over all heads' columns, which tp splits.
  if (m.qk_norm && l.tp > 1)
    return LayoutProblem{"parallel.tp", "OLMoE's q/k norms span all attention heads, which " + tp +
                                            " would split: use tp: 1 (ep and dp work)"};
  if (m.ffn % l.tp != 0)
    return LayoutProblem{"parallel.tp",
                         "model.ffn=" + std::to_string(m.ffn) + " is not divisible by " + tp};
  if (m.vocab < l.tp)
    return LayoutProblem{"parallel.tp", tp + " exceeds model.vocab=" + std::to_string(m.vocab) +
                                            " (each rank holds a slice of the vocabulary)"};
  if (const auto problem = expert_parallel_problem(m, l)) return problem;
  // Context parallelism takes the router's losses over the whole micro-batch (moe.h), but a
  // capacity limit keeps each expert's first slots in the order of all its tokens, which cp
  // scatters over ranks: a rank-local cut would drop other slots than one rank does.
  if (m.moe.enabled() && m.moe.capacity_factor > 0 && l.cp > 1)
    return LayoutProblem{"parallel.cp",
                         "cp=" + std::to_string(l.cp) +
                             " with model.moe.capacity_factor: a capacity limit drops slots in "
                             "the order of the whole micro-batch's tokens, which cp splits over "
                             "ranks; use capacity_factor: null (dropless routing) with cp > 1"};
  if (const auto problem = cp_split_problem(m.seq_len, l.cp))
    return LayoutProblem{"parallel.cp", *problem};
  if (l.cp_comm == CpComm::a2a)
    if (const auto problem = cp_heads_problem(m.heads, m.kv_heads, l.tp, l.cp))
      return LayoutProblem{"parallel.cp_comm", *problem};
  if (l.zero >= 2 && l.pp > 1)
    return LayoutProblem{"parallel.zero",
                         "ZeRO-2/3 shard gradients across micro-batches, which pipeline "
                         "parallelism keeps in flight: use zero 0 or 1 with pp > 1"};
  if (l.sequence_parallel && l.tp == 1)
    return LayoutProblem{"parallel.sequence_parallel",
                         "needs parallel.tp > 1 (it shards along tensor-parallel ranks)"};
  if (l.sequence_parallel && (int64_t(s.micro_batch) * m.seq_len) % l.tp != 0)
    return LayoutProblem{
        "parallel.sequence_parallel",
        "micro_batch x seq_len = " + std::to_string(int64_t(s.micro_batch) * m.seq_len) +
            " tokens do not split evenly over " + tp};
  if (s.global_batch % (s.micro_batch * l.dp) != 0)
    return LayoutProblem{"train.global_batch",
                         std::to_string(s.global_batch) +
                             " is not a multiple of train.micro_batch x dp = " +
                             std::to_string(s.micro_batch * l.dp)};
  try {
    virtual_stage_layers(m.layers, l.pp, l.virtual_stages, l.pp_layers);
  } catch (const UserError& e) {
    return LayoutProblem{l.pp_layers.empty() ? "parallel.pp" : "parallel.pp_layers", e.what()};
  }
  try {
    // One stage runs no schedule; only the interleaved one needs a pipeline to interleave.
    if (l.pp > 1 || l.schedule == PipelineSchedule::interleaved)
      check_pipeline_shape(l.schedule, {l.pp, micro_batches_per_step(s, l), l.virtual_stages});
    else if (l.virtual_stages != 1)
      return LayoutProblem{"parallel.virtual_stages",
                           "needs parallel.pp_schedule=interleaved and pp >= 2"};
  } catch (const UserError& e) {
    return LayoutProblem{l.virtual_stages != 1 ? "parallel.virtual_stages" : "parallel.pp_schedule",
                         e.what()};
  }
  return std::nullopt;
}

}  // namespace llmrun
