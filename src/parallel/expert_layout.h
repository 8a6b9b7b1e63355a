// Expert parallelism's layout rules and sizes (parallel.ep): which layouts can split a
// mixture-of-experts model's experts, how many each rank holds, and how many bytes the token
// all-to-alls move. The rank groups themselves are comm/topology.h's ep and edp.
#pragma once
#include <cstdint>
#include <optional>

#include "parallel/layout_rules.h"

namespace llmrun {

// Why `l.ep` cannot split `m`'s experts, or nothing (always nothing at ep = 1).
std::optional<LayoutProblem> expert_parallel_problem(const ModelConfig& m, const TrainingLayout& l);

// Experts of one MoE layer on each ep rank.
int local_experts(const MoeConfig& m, int ep);

// Bytes one rank sends through the ep group's all-to-alls for one MoE layer and one micro-batch
// of `tokens` tokens, forward and backward: dispatch and combine forward, their two gradients
// backward, each moving the token rows routed to other ranks' experts (uniform routing: a
// fraction (ep - 1) / ep of the tokens x top_k rows of d_model floats).
double expert_all_to_all_bytes(const ModelConfig& m, int ep, int64_t tokens);

}  // namespace llmrun
