#include "model/moe.h"

#include <cmath>

#include "model/moe_expert_parallel.h"

namespace llmrun {

namespace {

// A tensor's f32 elements on the host: the tensor itself when it lives there, else a staged
// copy (loaded when asked, written back by store()).
class HostF32 {
 public:
  HostF32(Backend& be, Tensor t, bool load) : be_(be), t_(t) {
    if (t.numel() == 0) return;
    if (t.device == Device::cpu) {
      p_ = t.f32();
      return;
    }
    copy_.resize(size_t(t.numel()));
    p_ = copy_.data();
    if (load) be.copy(host_view(), t.view({t.numel()}));
  }
  float* data() const { return p_; }
  void store() {
    if (!copy_.empty()) be_.copy(t_.view({t_.numel()}), host_view());
  }

 private:
  Tensor host_view() { return Tensor(copy_.data(), DType::f32, {int64_t(copy_.size())}); }
  Backend& be_;
  Tensor t_;
  std::vector<float> copy_;
  float* p_ = nullptr;
};

void upload(Backend& be, Tensor dst, const void* host, DType t) {
  if (dst.numel() == 0) return;
  be.copy(dst.view({dst.numel()}), Tensor(const_cast<void*>(host), t, {dst.numel()}));
}

// y = x W^T: batch-invariant rows for inference, the plain GEMM for training.
void linear(Backend& be, bool inference, Tensor y, const Tensor& x, const Tensor& W) {
  if (inference)
    be.linear_rows(y, x, W, nullptr, false);
  else
    be.matmul(y, x, W, false, true);
}

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

float dot(const float* a, const float* b, int64_t d) {
  float s = 0;
  for (int64_t c = 0; c < d; ++c) s += a[c] * b[c];
  return s;
}

}  // namespace

MoeActivations MoeActivations::first_rows(int64_t n) const {
  if (empty()) return *this;
  const int64_t top_k = src_token.numel() / logits.rows();
  const int64_t ep = up.rows() / src_token.numel();  // the expert side holds ep ranks' rows
  MoeActivations a = *this;
  a.logits = logits.slice(0, n);
  a.src_token = src_token.slice(0, n * top_k);
  a.x_perm = x_perm.slice(0, n * top_k);
  a.up = up.slice(0, n * top_k * ep);
  a.act = act.slice(0, n * top_k * ep);
  a.out = out.slice(0, n * top_k);
  if (!x_recv.empty()) {
    a.x_recv = x_recv.slice(0, n * top_k * ep);
    a.out_recv = out_recv.slice(0, n * top_k * ep);
  }
  if (!shared_up.empty()) {
    a.shared_up = shared_up.slice(0, n);
    a.shared_act = shared_act.slice(0, n);
    a.shared_out = shared_out.slice(0, n);
    a.shared_logit = shared_logit.slice(0, n);
  }
  return a;
}

MoeActivations allocate_moe_activations(const ModelConfig& cfg, int64_t n,
                                        const MoeAllocator& alloc) {
  const MoeConfig& m = cfg.moe;
  MoeActivations a;
  if (!m.enabled()) return a;
  const int64_t d = cfg.d_model, f = m.expert_ffn, rows = n * m.top_k, fs = m.shared_width();
  const int64_t expert_rows = rows * m.ep;  // dropless: every rank may route here
  a.logits = alloc(DType::f32, {n, m.experts});
  a.src_token = alloc(DType::i32, {rows});
  a.x_perm = alloc(DType::f32, {rows, d});
  a.up = alloc(DType::f32, {expert_rows, 2 * f});
  a.act = alloc(DType::f32, {expert_rows, f});
  a.out = alloc(DType::f32, {rows, d});
  if (m.ep > 1) {
    a.x_recv = alloc(DType::f32, {expert_rows, d});
    a.out_recv = alloc(DType::f32, {expert_rows, d});
  }
  if (fs > 0) {
    a.shared_up = alloc(DType::f32, {n, 2 * fs});
    a.shared_act = alloc(DType::f32, {n, fs});
    a.shared_out = alloc(DType::f32, {n, d});
    a.shared_logit = alloc(DType::f32, {n, 1});
  }
  a.routing = std::make_shared<MoeRouting>();
  return a;
}

MoeScratch allocate_moe_scratch(const ModelConfig& cfg, int64_t n, const MoeAllocator& alloc) {
  const MoeConfig& m = cfg.moe;
  MoeScratch s;
  if (!m.enabled()) return s;
  const int64_t d = cfg.d_model, f = m.expert_ffn, rows = n * m.top_k, fs = m.shared_width();
  const int64_t expert_rows = rows * m.ep;
  s.d_out = alloc(DType::f32, {rows, d});
  s.d_act = alloc(DType::f32, {expert_rows, f});
  s.d_up = alloc(DType::f32, {expert_rows, 2 * f});
  s.d_x = alloc(DType::f32, {rows, d});
  if (m.ep > 1) {
    s.d_out_recv = alloc(DType::f32, {expert_rows, d});
    s.d_x_recv = alloc(DType::f32, {expert_rows, d});
  }
  s.d_logits = alloc(DType::f32, {n, m.experts});
  if (fs > 0) {
    s.d_shared_out = alloc(DType::f32, {n, d});
    s.d_shared_act = alloc(DType::f32, {n, fs});
    s.d_shared_up = alloc(DType::f32, {n, 2 * fs});
    s.d_shared_logit = alloc(DType::f32, {n, 1});
  }
  return s;
}

namespace {
// Context parallelism: the router losses' sums over every cp rank's tokens of the micro-batch.
// Gathered as raw doubles and added in rank order, so every rank holds the same totals to the
// bit (an f32 all-reduce would round them).
void share_router_totals(Communicator& group, const MoeConfig& cfg, MoeRouting& r) {
  std::vector<double> mine = router_sums(r);
  const size_t m = mine.size();
  const int64_t words = int64_t(m * sizeof(double) / sizeof(int32_t));
  std::vector<double> all(m * size_t(group.size()));
  group.all_gather(Tensor(mine.data(), DType::i32, {words}),
                   Tensor(all.data(), DType::i32, {words * group.size()}));
  std::vector<double> total(m, 0.0);
  for (int p = 0; p < group.size(); ++p)
    for (size_t i = 0; i < m; ++i) total[i] += all[size_t(p) * m + i];
  set_router_totals(r, cfg, total);
}
}  // namespace

void moe_forward(Backend& be, const MoeConfig& cfg, const MoeTensors& w, MoeActivations& a,
                 const Tensor& x, const Tensor& residual, Tensor output, bool inference,
                 Communicator* ep, Communicator* tokens) {
  const int64_t n = x.rows(), d = x.cols();
  const int K = cfg.top_k;
  const Tensor logits = a.logits.slice(0, n);
  linear(be, inference, logits, x, w.router);
  {
    HostF32 host_logits(be, logits, true);
    *a.routing = route_tokens(host_logits.data(), int(n), cfg, !inference);
  }
  if (tokens != nullptr && tokens->size() > 1) share_router_totals(*tokens, cfg, *a.routing);
  const MoeRouting& r = *a.routing;
  const int64_t R = r.rows();

  // Dispatch: gather the routed rows into per-expert blocks, then one GEMM pair per expert
  // (under expert parallelism on the ranks that hold them, which every rank joins).
  if (ep != nullptr && ep->size() > 1) {
    if (R > 0) {
      upload(be, a.src_token.slice(0, R), r.src_token.data(), DType::i32);
      be.embedding_fwd(a.x_perm.slice(0, R), a.src_token.slice(0, R), x, false);
    }
    expert_parallel_forward(be, cfg, w, a, inference, *ep);
  } else if (R > 0) {
    upload(be, a.src_token.slice(0, R), r.src_token.data(), DType::i32);
    be.embedding_fwd(a.x_perm.slice(0, R), a.src_token.slice(0, R), x, false);
    for (int e = 0; e < cfg.experts; ++e) {
      const int64_t b = r.offsets[size_t(e)], end = r.offsets[size_t(e) + 1];
      if (end > b) linear(be, inference, a.up.slice(b, end), a.x_perm.slice(b, end), w.gate_up[e]);
    }
    be.swiglu_fwd(a.act.slice(0, R), a.up.slice(0, R));
    for (int e = 0; e < cfg.experts; ++e) {
      const int64_t b = r.offsets[size_t(e)], end = r.offsets[size_t(e) + 1];
      if (end > b) linear(be, inference, a.out.slice(b, end), a.act.slice(b, end), w.down[e]);
    }
  }
  const bool shared = !w.shared_gate_up.empty();
  if (shared) {
    linear(be, inference, a.shared_up.slice(0, n), x, w.shared_gate_up);
    be.swiglu_fwd(a.shared_act.slice(0, n), a.shared_up.slice(0, n));
    linear(be, inference, a.shared_out.slice(0, n), a.shared_act.slice(0, n), w.shared_down);
    linear(be, inference, a.shared_logit.slice(0, n), x, w.shared_gate);
  }

  // Combine: each token's slots in order k = 0..K-1, then the gated shared expert.
  HostF32 y(be, output, false), res(be, residual, true);
  HostF32 out(be, a.out.slice(0, R), true);
  HostF32 so(be, shared ? a.shared_out.slice(0, n) : Tensor(), shared);
  HostF32 sl(be, shared ? a.shared_logit.slice(0, n) : Tensor(), shared);
  float *yp = y.data(), *rp = res.data(), *op = out.data(), *sop = so.data(), *slp = sl.data();
#pragma omp parallel for if (n * d > 1 << 16)
  for (int64_t t = 0; t < n; ++t) {
    float* yt = yp + t * d;
    const float* rt = rp + t * d;
    for (int64_t c = 0; c < d; ++c) yt[c] = rt[c];
    for (int k = 0; k < K; ++k) {
      const int32_t row = r.row[size_t(t) * K + k];
      if (row < 0) continue;
      const float wk = r.weight[size_t(t) * K + k];
      const float* o = op + int64_t(row) * d;
      for (int64_t c = 0; c < d; ++c) yt[c] += wk * o[c];
    }
    if (shared) {
      const float g = sigmoid(slp[t]);
      const float* s = sop + t * d;
      for (int64_t c = 0; c < d; ++c) yt[c] += g * s[c];
    }
  }
  y.store();
}

void moe_backward(Backend& be, const MoeConfig& cfg, const MoeTensors& w, const MoeTensors& g,
                  const MoeActivations& a, const MoeScratch& s, const Tensor& dy, const Tensor& x,
                  Tensor dx, Communicator* ep) {
  const MoeRouting& r = *a.routing;
  const int64_t n = x.rows(), d = x.cols(), R = r.rows();
  const int K = cfg.top_k, E = cfg.experts;
  const bool shared = !w.shared_gate_up.empty();

  // Combine's backward on the host: the permuted rows' output gradients, the combine weights'
  // gradients, and the shared expert's.
  std::vector<float> d_weight(size_t(n) * K, 0.0f);
  {
    HostF32 hdy(be, dy, true), out(be, a.out.slice(0, R), true);
    HostF32 d_out(be, s.d_out.slice(0, R), false);
    HostF32 so(be, shared ? a.shared_out.slice(0, n) : Tensor(), shared);
    HostF32 sl(be, shared ? a.shared_logit.slice(0, n) : Tensor(), shared);
    HostF32 d_so(be, shared ? s.d_shared_out.slice(0, n) : Tensor(), false);
    HostF32 d_sl(be, shared ? s.d_shared_logit.slice(0, n) : Tensor(), false);
    const float *dyp = hdy.data(), *op = out.data(), *sop = so.data(), *slp = sl.data();
    float *dop = d_out.data(), *dsop = d_so.data(), *dslp = d_sl.data();
#pragma omp parallel for if (n * d > 1 << 16)
    for (int64_t t = 0; t < n; ++t) {
      const float* gt = dyp + t * d;
      for (int k = 0; k < K; ++k) {
        const int32_t row = r.row[size_t(t) * K + k];
        if (row < 0) continue;
        const float wk = r.weight[size_t(t) * K + k];
        d_weight[size_t(t) * K + k] = dot(gt, op + int64_t(row) * d, d);
        float* dst = dop + int64_t(row) * d;
        for (int64_t c = 0; c < d; ++c) dst[c] = wk * gt[c];
      }
      if (shared) {
        const float sg = sigmoid(slp[t]);
        dslp[t] = dot(gt, sop + t * d, d) * sg * (1.0f - sg);
        for (int64_t c = 0; c < d; ++c) dsop[t * d + c] = sg * gt[c];
      }
    }
    d_out.store();
    d_so.store();
    d_sl.store();
  }
  std::vector<float> d_logits(size_t(n) * E);
  router_backward(r, cfg, d_weight.data(), s.loss_scale, d_logits.data());
  const Tensor dl = s.d_logits.slice(0, n);
  upload(be, dl, d_logits.data(), DType::f32);

  // dx: the shared expert (or zeros), the router, then the routed rows scattered back.
  if (shared) {
    const Tensor d_so = s.d_shared_out.slice(0, n), d_sa = s.d_shared_act.slice(0, n);
    const Tensor d_su = s.d_shared_up.slice(0, n), d_sl = s.d_shared_logit.slice(0, n);
    be.matmul(d_sa, d_so, w.shared_down, false, false);
    be.matmul(g.shared_down, d_so, a.shared_act.slice(0, n), true, false, 1.0f, 1.0f);
    be.swiglu_bwd(d_su, d_sa, a.shared_up.slice(0, n));
    be.matmul(dx, d_su, w.shared_gate_up, false, false);
    be.matmul(g.shared_gate_up, d_su, x, true, false, 1.0f, 1.0f);
    be.matmul(g.shared_gate, d_sl, x, true, false, 1.0f, 1.0f);
    be.matmul(dx, d_sl, w.shared_gate, false, false, 1.0f, 1.0f);
  } else {
    be.fill(dx, 0.0f);
  }
  be.matmul(g.router, dl, x, true, false, 1.0f, 1.0f);
  be.matmul(dx, dl, w.router, false, false, 1.0f, 1.0f);
  if (ep != nullptr && ep->size() > 1) {  // every rank joins, whether it routed rows or not
    expert_parallel_backward(be, cfg, w, g, a, s, *ep);
    if (R > 0) be.embedding_bwd(dx, s.d_x.slice(0, R), a.src_token.slice(0, R));
    return;
  }
  if (R == 0) return;
  for (int e = 0; e < E; ++e) {
    const int64_t b = r.offsets[size_t(e)], end = r.offsets[size_t(e) + 1];
    if (end == b) continue;
    be.matmul(s.d_act.slice(b, end), s.d_out.slice(b, end), w.down[e], false, false);
    be.matmul(g.down[e], s.d_out.slice(b, end), a.act.slice(b, end), true, false, 1.0f, 1.0f);
  }
  be.swiglu_bwd(s.d_up.slice(0, R), s.d_act.slice(0, R), a.up.slice(0, R));
  for (int e = 0; e < E; ++e) {
    const int64_t b = r.offsets[size_t(e)], end = r.offsets[size_t(e) + 1];
    if (end == b) continue;
    be.matmul(s.d_x.slice(b, end), s.d_up.slice(b, end), w.gate_up[e], false, false);
    be.matmul(g.gate_up[e], s.d_up.slice(b, end), a.x_perm.slice(b, end), true, false, 1.0f, 1.0f);
  }
  be.embedding_bwd(dx, s.d_x.slice(0, R), a.src_token.slice(0, R));
}

}  // namespace llmrun
