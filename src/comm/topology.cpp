#include "comm/topology.h"

#include "comm/mpi_communicator.h"
#include "util/error.h"

namespace llmrun {

GroupSplit group_split(const ParallelLayout& layout, int r, RankGroup group) {
  const int tp = layout.tp, cp = layout.cp, pp = layout.pp, ep = layout.ep;
  const int tp_rank = r % tp, cp_rank = (r / tp) % cp, pp_rank = (r / (tp * cp)) % pp,
            dp_rank = r / (tp * cp * pp);
  const int ep_rank = dp_rank % ep, edp_rank = dp_rank / ep;
  const int place = tp_rank + tp * (cp_rank + cp * pp_rank);  // tp, cp, pp coordinates
  const int places = tp * cp * pp;
  // Members of one group share every other coordinate; the color encodes those.
  switch (group) {
    case RankGroup::tp:
      return {cp_rank + cp * (pp_rank + pp * dp_rank), tp_rank};
    case RankGroup::cp:
      return {tp_rank + tp * (pp_rank + pp * dp_rank), cp_rank};
    case RankGroup::pp:
      return {tp_rank + tp * (cp_rank + cp * dp_rank), pp_rank};
    case RankGroup::dp:
      return {place, dp_rank};
    case RankGroup::dp_cp:
      return {tp_rank + tp * pp_rank, cp_rank + cp * dp_rank};
    case RankGroup::ep:
      return {place + places * edp_rank, ep_rank};
    // Every cp rank holds the same experts too: edp spans cp as dp_cp does (ordered alike).
    case RankGroup::edp:
      return {tp_rank + tp * (pp_rank + pp * ep_rank), cp_rank + cp * edp_rank};
  }
  return {};
}

Topology Topology::single() {
  Topology t;
  t.world_ = make_self_communicator("world");
  t.tp_ = make_self_communicator("tp");
  t.pp_ = make_self_communicator("pp");
  t.dp_ = make_self_communicator("dp");
  t.cp_ = make_self_communicator("cp");
  t.dp_cp_ = make_self_communicator("dp_cp");
  t.ep_ = make_self_communicator("ep");
  return t;
}

Topology Topology::build(std::unique_ptr<Communicator> world, const ParallelLayout& layout) {
  LLMRUN_CHECK(world->size() == layout.world(), "world size does not match the layout");
  if (world->size() == 1) return single();
  Topology t;
  t.layout_ = layout;
  const int ep = layout.ep;
  LLMRUN_CHECK(ep >= 1 && layout.dp % ep == 0, "parallel.ep must divide dp");
  auto split = [&](RankGroup g, const char* name) {
    const GroupSplit s = group_split(layout, world->rank(), g);
    return split_mpi(*world, s.color, s.key, name);
  };
  const bool cp = layout.cp > 1;
  t.tp_ = split(RankGroup::tp, "tp");
  t.cp_ = split(RankGroup::cp, "cp");
  t.pp_ = split(RankGroup::pp, "pp");
  t.dp_ = split(RankGroup::dp, "dp");
  t.dp_cp_ = split(RankGroup::dp_cp, cp ? "dp_cp" : "dp");  // named as users know it without cp
  if (ep > 1) {
    t.ep_ = split(RankGroup::ep, "ep");
    t.edp_ = split(RankGroup::edp, cp ? "edp_cp" : "edp");
  } else {
    t.ep_ = make_self_communicator("ep");
  }
  t.world_ = std::move(world);
  return t;
}

void Topology::wrap_groups(
    const std::function<std::unique_ptr<Communicator>(std::unique_ptr<Communicator>)>& wrap) {
  tp_ = wrap(std::move(tp_));
  pp_ = wrap(std::move(pp_));
  dp_ = wrap(std::move(dp_));
  cp_ = wrap(std::move(cp_));
  dp_cp_ = wrap(std::move(dp_cp_));        // the gradient reduction (dp x cp)
  ep_ = wrap(std::move(ep_));              // expert parallelism's token all-to-alls
  if (edp_) edp_ = wrap(std::move(edp_));  // and its expert gradients (ep > 1 only)
}

}  // namespace llmrun
