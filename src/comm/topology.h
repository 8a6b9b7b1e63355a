#pragma once
// Which rank does what: world rank r sits at tp_rank = r % tp, cp_rank = (r / tp) % cp,
// pp_rank = (r / (tp * cp)) % pp, dp_rank = r / (tp * cp * pp) (tensor parallel fastest, then
// context parallel, as Megatron orders ranks, so a tp group shares a node), and one
// communicator per group it belongs to. Gradients of replicated parameters are reduced over
// dp x cp together (dp_cp), as Megatron folds cp into its data-parallel reduction.
//
// Expert parallelism (ep) is carved out of dp, as in Megatron and DeepSpeed: the dp ranks of
// one (tp, cp, pp) position split into dp / ep groups of ep consecutive dp ranks, ep_rank =
// dp_rank % ep. The ep group (one such block) splits a MoE layer's experts and trades tokens
// by all-to-all; the expert-data-parallel group edp (the dp ranks with the same ep_rank,
// edp_rank = dp_rank / ep) holds the same experts and reduces their gradients, while dense
// gradients still reduce over all of dp. Under context parallelism each cp rank trades its own
// tokens with the ep peers at its cp index, and every cp rank holds the same experts, so edp
// spans cp as dp_cp does (Megatron's expert-data-parallel group with cp): the ranks at the same
// (tp, pp, ep_rank), edp rank cp_rank + cp * (dp_rank / ep); edp x ep is then dp_cp.
// ep = 1: the ep group is one rank and edp is dp_cp.
#include <functional>
#include <memory>

#include "comm/communicator.h"

namespace llmrun {

struct ParallelLayout {
  int tp = 1, pp = 1, dp = 1;
  int cp = 1;  // context parallel: each sequence split over cp ranks
  int ep = 1;  // expert parallel: divides dp (not a factor of the world size)
  int world() const { return tp * pp * dp * cp; }
};

// The groups of a Topology, and how build() splits the world into each: ranks with the same
// color form one group, ordered by key (the rank's place in it). Pure, so it is unit-tested.
enum class RankGroup { tp, cp, pp, dp, dp_cp, ep, edp };
struct GroupSplit {
  int color = 0, key = 0;
};
GroupSplit group_split(const ParallelLayout& layout, int world_rank, RankGroup group);

class Topology {
 public:
  // A single process: every group is the group of one.
  static Topology single();
  // Splits `world` (size must equal layout.world()) into the tp, pp and dp groups.
  static Topology build(std::unique_ptr<Communicator> world, const ParallelLayout& layout);

  const ParallelLayout& layout() const { return layout_; }
  Communicator& world() const { return *world_; }
  Communicator& tp() const { return *tp_; }
  Communicator& pp() const { return *pp_; }
  Communicator& dp() const { return *dp_; }
  Communicator& cp() const { return *cp_; }
  Communicator& dp_cp() const { return *dp_cp_; }               // the gradient reduction group
  Communicator& ep() const { return *ep_; }                     // splits the experts, trades tokens
  Communicator& edp() const { return edp_ ? *edp_ : *dp_cp_; }  // reduces expert grads (x cp)
  int rank() const { return world_->rank(); }
  bool is_logger() const { return world_->rank() == 0; }  // prints progress, writes metrics
  // Replaces the tp, pp, dp, cp, dp_cp, ep and edp (when ep > 1) communicators (in that order,
  // on every rank) by wrap(group): device collectives over NCCL (comm/collective_transport.h).
  // The world stays as it is.
  void wrap_groups(
      const std::function<std::unique_ptr<Communicator>(std::unique_ptr<Communicator>)>& wrap);

 private:
  ParallelLayout layout_;
  std::unique_ptr<Communicator> world_, tp_, pp_, dp_, cp_, dp_cp_;
  std::unique_ptr<Communicator> ep_, edp_;  // edp_ null when ep = 1 (then it is dp_cp)
};

}  // namespace llmrun
