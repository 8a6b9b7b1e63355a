// Expert parallelism for one MoE layer (model/moe.h): the token all-to-alls over the ep group
// and the expert GEMMs over the rows this rank's experts received.
//
// Rank q of P holds experts [q E/P, (q+1) E/P). A routing's permuted rows are expert-major, so
// the rows for rank p's experts are one contiguous range: dispatch sends each range to its
// rank. The receiver gets, from each source rank in rank order, that rank's rows for each of
// its experts in expert order; the per-expert counts of every rank (one all-gather, kept in
// MoeRouting::ep_counts for the backward) say where each (source, expert) block starts. The
// expert GEMMs run block by block in that order, with no further permutation.
#pragma once
#include "backend/backend.h"
#include "comm/communicator.h"
#include "model/moe.h"

namespace llmrun {

// a.x_perm[0, R) holds the routed rows (a.routing set): fills a.out[0, R) with the experts'
// outputs in the same order, running this rank's experts w for every rank's rows.
void expert_parallel_forward(Backend& be, const MoeConfig& cfg, const MoeTensors& w,
                             MoeActivations& a, bool inference, Communicator& ep);

// s.d_out[0, R) holds dL/d(out) of the routed rows: accumulates this rank's experts' weight
// gradients into g and fills s.d_x[0, R) with dL/d(x_perm).
void expert_parallel_backward(Backend& be, const MoeConfig& cfg, const MoeTensors& w,
                              const MoeTensors& g, const MoeActivations& a, const MoeScratch& s,
                              Communicator& ep);

}  // namespace llmrun
