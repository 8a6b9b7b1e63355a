#include "comm/topology.h"

#include "comm/mpi_communicator.h"
#include "util/error.h"

namespace llmrun {

Topology Topology::single() {
  Topology t;
  t.world_ = make_self_communicator("world");
  t.tp_ = make_self_communicator("tp");
  t.pp_ = make_self_communicator("pp");
  t.dp_ = make_self_communicator("dp");
  return t;
}

Topology Topology::build(std::unique_ptr<Communicator> world, const ParallelLayout& layout) {
  LLMRUN_CHECK(world->size() == layout.world(), "world size does not match the layout");
  if (world->size() == 1) return single();
  Topology t;
  t.layout_ = layout;
  const int r = world->rank();
  const int tp_rank = r % layout.tp, pp_rank = (r / layout.tp) % layout.pp,
            dp_rank = r / (layout.tp * layout.pp);
  // Members of one group share every other coordinate; the color encodes those.
  t.tp_ = split_mpi(*world, pp_rank + layout.pp * dp_rank, tp_rank, "tp");
  t.pp_ = split_mpi(*world, tp_rank + layout.tp * dp_rank, pp_rank, "pp");
  t.dp_ = split_mpi(*world, tp_rank + layout.tp * pp_rank, dp_rank, "dp");
  t.world_ = std::move(world);
  return t;
}

void Topology::wrap_groups(
    const std::function<std::unique_ptr<Communicator>(std::unique_ptr<Communicator>)>& wrap) {
  tp_ = wrap(std::move(tp_));
  pp_ = wrap(std::move(pp_));
  dp_ = wrap(std::move(dp_));
}

}  // namespace llmrun
