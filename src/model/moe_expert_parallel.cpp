#include "model/moe_expert_parallel.h"

#include <vector>

#include "util/error.h"

namespace llmrun {

namespace {

// Where rows go and come from: rows sent to and received from each ep rank, and the received
// rows' (local expert, first row, end row) blocks in arrival order.
struct ExpertExchange {
  std::vector<int64_t> send, recv;  // in elements (rows x d_model)
  struct Block {
    int expert;  // local index into MoeTensors::gate_up / down
    int64_t begin, end;
  };
  std::vector<Block> blocks;
  int64_t received = 0;  // rows
};

ExpertExchange exchange_of(const MoeRouting& r, int P, int q, int64_t d) {
  const int E = r.experts, local = E / P;
  ExpertExchange x;
  for (int p = 0; p < P; ++p) {
    x.send.push_back((r.offsets[size_t((p + 1) * local)] - r.offsets[size_t(p * local)]) * d);
    int64_t from_p = 0;
    for (int j = 0; j < local; ++j) {
      const int64_t rows = r.ep_counts[size_t(p) * E + size_t(q * local + j)];
      if (rows > 0) x.blocks.push_back({j, x.received, x.received + rows});
      x.received += rows;
      from_p += rows;
    }
    x.recv.push_back(from_p * d);
  }
  return x;
}

// y = x W^T as moe.cpp runs it: batch-invariant rows for inference, the plain GEMM otherwise.
void linear(Backend& be, bool inference, Tensor y, const Tensor& x, const Tensor& W) {
  if (inference)
    be.linear_rows(y, x, W, nullptr, false);
  else
    be.matmul(y, x, W, false, true);
}

}  // namespace

void expert_parallel_forward(Backend& be, const MoeConfig& cfg, const MoeTensors& w,
                             MoeActivations& a, bool inference, Communicator& ep) {
  MoeRouting& r = *a.routing;
  const int P = ep.size(), E = cfg.experts;
  LLMRUN_CHECK(E % P == 0 && int(w.gate_up.size()) == E / P,
               "expert parallelism: the layer must hold experts / ep experts");
  const int64_t d = a.x_perm.cols();
  // Every rank's rows per expert: the receivers' block boundaries.
  std::vector<int32_t> mine(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e)
    mine[size_t(e)] = int32_t(r.offsets[size_t(e) + 1] - r.offsets[size_t(e)]);
  r.ep_counts.assign(size_t(P) * E, 0);
  ep.all_gather(Tensor(mine.data(), DType::i32, {E}),
                Tensor(r.ep_counts.data(), DType::i32, {int64_t(P) * E}));
  const ExpertExchange x = exchange_of(r, P, ep.rank(), d);
  LLMRUN_CHECK(x.received <= a.x_recv.rows(),
               "expert parallelism: more rows arrived than the routed buffers hold");

  ep.all_to_allv(a.x_perm, x.send, a.x_recv, x.recv);
  for (const auto& b : x.blocks)
    linear(be, inference, a.up.slice(b.begin, b.end), a.x_recv.slice(b.begin, b.end),
           w.gate_up[size_t(b.expert)]);
  if (x.received > 0) be.swiglu_fwd(a.act.slice(0, x.received), a.up.slice(0, x.received));
  for (const auto& b : x.blocks)
    linear(be, inference, a.out_recv.slice(b.begin, b.end), a.act.slice(b.begin, b.end),
           w.down[size_t(b.expert)]);
  ep.all_to_allv(a.out_recv, x.recv, a.out, x.send);  // combine: back to the senders' order
}

void expert_parallel_backward(Backend& be, const MoeConfig& cfg, const MoeTensors& w,
                              const MoeTensors& g, const MoeActivations& a, const MoeScratch& s,
                              Communicator& ep) {
  (void)cfg;
  const MoeRouting& r = *a.routing;
  const int64_t d = a.x_perm.cols();
  const ExpertExchange x = exchange_of(r, ep.size(), ep.rank(), d);
  ep.all_to_allv(s.d_out, x.send, s.d_out_recv, x.recv);
  for (const auto& b : x.blocks) {
    const Tensor d_out = s.d_out_recv.slice(b.begin, b.end);
    be.matmul(s.d_act.slice(b.begin, b.end), d_out, w.down[size_t(b.expert)], false, false);
    be.matmul(g.down[size_t(b.expert)], d_out, a.act.slice(b.begin, b.end), true, false, 1.0f,
              1.0f);
  }
  if (x.received > 0)
    be.swiglu_bwd(s.d_up.slice(0, x.received), s.d_act.slice(0, x.received),
                  a.up.slice(0, x.received));
  for (const auto& b : x.blocks) {
    const Tensor d_up = s.d_up.slice(b.begin, b.end);
    be.matmul(s.d_x_recv.slice(b.begin, b.end), d_up, w.gate_up[size_t(b.expert)], false, false);
    be.matmul(g.gate_up[size_t(b.expert)], d_up, a.x_recv.slice(b.begin, b.end), true, false, 1.0f,
              1.0f);
  }
  ep.all_to_allv(s.d_x_recv, x.recv, s.d_x, x.send);  // dL/d(x_perm) back to the senders
}

}  // namespace llmrun
