// Token routing of one mixture-of-experts layer, on the host: softmax over the router logits,
// top-k choice, optional capacity limit, the permutation of token slots into contiguous
// per-expert blocks, and the router's losses (load balancing, z-loss) with their gradients.
//
// Ties in the top-k choice go to the lower expert index (a stable descending sort), so a
// routing is a pure function of the logits. Under a capacity limit an expert keeps its first
// `capacity` slots in token order (token t before t + 1, slot k before k + 1) and drops the
// rest; a dropped slot contributes nothing to its token's output.
//
// Losses, for N tokens, E experts, top-k K, p = softmax(logits) per token:
//   aux = aux_loss * E * sum_e f_e * P_e,  f_e = (slots routed to e before any drop) / (N K),
//         P_e = mean over tokens of p_e (Switch Transformer; Megatron's top-k normalisation,
//         so that a perfectly balanced router gives aux_loss)
//   z   = z_loss * mean over tokens of logsumexp(logits)^2 (ST-MoE)
//
// Context parallelism splits a micro-batch's tokens over the cp ranks: f_e, P_e and the z mean
// are then taken over the whole group's tokens (router_sums, all-gathered, then
// set_router_totals), so every rank has the one-rank losses and its tokens their one-rank
// gradients (Megatron reduces the tokens-per-expert statistics over the cp group likewise).
#pragma once
#include <cstdint>
#include <vector>

#include "model/moe_config.h"

namespace llmrun {

struct MoeRouting {
  int tokens = 0, experts = 0, top_k = 0;
  std::vector<float> probs;        // [N, E] softmax of the logits
  std::vector<float> lse;          // [N] logsumexp of the logits
  std::vector<int32_t> choice;     // [N, K] chosen experts, most probable first
  std::vector<float> weight;       // [N, K] combine weights
  std::vector<int32_t> row;        // [N, K] row of the slot in the permuted block, -1 dropped
  std::vector<int32_t> src_token;  // [R] token of each permuted row, expert-major
  std::vector<int64_t> offsets;    // [E + 1] first permuted row of each expert
  std::vector<int64_t> routed;     // [E] slots routed to each expert before the capacity cut
  int64_t dropped = 0;             // slots cut by the capacity limit
  // Expert parallelism: the rows every ep rank sent to each expert, [ep, E] (moe_forward).
  std::vector<int32_t> ep_counts;
  double aux = 0, z = 0;  // the losses above, coefficients applied
  // The routing group's tokens and slots per expert (before any drop): this routing's own
  // unless context parallelism spreads the micro-batch over ranks (set_router_totals).
  int64_t group_tokens = 0;
  std::vector<int64_t> group_routed;  // [E]

  int64_t rows() const { return offsets.empty() ? 0 : offsets.back(); }
};

// Routes n tokens given their router logits [n, E]. `capacity` applies cfg.capacity_factor
// (training); inference always routes dropless, so a sequence's output never depends on the
// other sequences in its batch.
MoeRouting route_tokens(const float* logits, int n, const MoeConfig& cfg, bool capacity);

// The sums the losses take over tokens, [2 E + 2]: slots routed to each expert, each expert's
// summed probability, the summed squared logsumexp, and the token count.
std::vector<double> router_sums(const MoeRouting& r);
// Sets aux, z, group_tokens and group_routed from the sums over the routing group's tokens
// (router_sums added up over its ranks; route_tokens applies this rank's own).
void set_router_totals(MoeRouting& r, const MoeConfig& cfg, const std::vector<double>& sums);

// d_logits [N, E] = dL/dlogits given d_weight [N, K] = dL/d(combine weight) (0 for dropped
// slots), plus loss_scale times the gradients of aux and z. loss_scale weighs this rank's N
// tokens; the losses' means over the group's tokens are weighted by all of them.
void router_backward(const MoeRouting& r, const MoeConfig& cfg, const float* d_weight,
                     float loss_scale, float* d_logits);

// Router statistics over a training step: summed over layers and micro-batches.
struct MoeStats {
  double aux = 0, z = 0;  // summed losses
  int64_t dropped = 0, slots = 0;
  float min_share = 1, max_share = 0;  // extreme share of one expert's slots in one layer
  int routings = 0;                    // layer x micro-batch routings counted
  void add(const MoeRouting& r);
  void merge(const MoeStats& o);
};

}  // namespace llmrun
