#include "bench/kernel_bench.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "backend/fp8_gemm.h"
#include "train/peak_flops.h"
#include "util/terminal_progress.h"

namespace llmrun {

namespace {

// Median seconds of `repeat` calls after one untimed call (first-touch, thread start-up).
double time_median(Backend& be, int repeat, const std::function<void()>& call) {
  call();
  be.synchronize();
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    be.synchronize();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t.size() % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]);
}

Tensor filled(Backend& be, std::vector<Buffer>& keep, std::initializer_list<int64_t> dims,
              float value) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  keep.push_back(be.allocate(size_t(n) * 4));
  Tensor t = keep.back().as(DType::f32, dims);
  be.fill(t, value);
  return t;
}

struct Projection {
  const char* name;
  int64_t out, in;  // weight [out, in]
};

}  // namespace

nlohmann::json run_kernel_bench(Backend& be, const ModelConfig& cfg, const KernelBenchOptions& o) {
  const PeakFlops peak = measured_peak_flops(be);
  const int64_t M = int64_t(o.micro_batch) * cfg.seq_len, d = cfg.d_model, hd = cfg.head_dim();
  const int64_t q_cols = int64_t(cfg.heads) * hd,
                qkv_cols = int64_t(cfg.heads + 2 * cfg.kv_heads) * hd;
  const int64_t up_cols =
      cfg.arch == Arch::gpt2 ? cfg.ffn : 2 * int64_t(cfg.ffn);  // Llama: gate and up in one
  std::vector<Projection> projections = {{"qkv", qkv_cols, d}, {"out", d, q_cols}};
  const MoeConfig& moe = cfg.moe;
  if (!moe.enabled() || moe.every > 1) {  // some layer keeps its dense MLP
    projections.push_back({"up", up_cols, d});
    projections.push_back({"down", d, cfg.ffn});
  }
  projections.push_back({"lm_head", cfg.vocab, d});
  // A MoE layer's expert GEMMs: each of E experts gets M * top_k / E rows (an even routing,
  // what the load-balancing loss aims at), one GEMM per expert as the model runs them.
  std::vector<Projection> experts;
  if (moe.enabled()) {
    experts.push_back({"experts up", 2 * int64_t(moe.expert_ffn), d});
    experts.push_back({"experts down", d, moe.expert_ffn});
  }
  const int64_t expert_rows = moe.enabled() ? (M * moe.top_k + moe.experts - 1) / moe.experts : 0;

  nlohmann::json rows = nlohmann::json::array();
  TerminalProgress progress("bench kernels", double(3 * (projections.size() + experts.size()) + 2),
                            "kernels");
  auto record = [&](const std::string& name, const std::string& shape, double flops,
                    double seconds) {
    progress.advance(1);
    rows.push_back({{"kernel", name},
                    {"shape", shape},
                    {"flops", flops},
                    {"median_ms", seconds * 1e3},
                    {"gflops", flops / seconds / 1e9},
                    {"peak_fraction", flops / seconds / peak.flops}});
  };
  auto mnk = [](int64_t m, int64_t n, int64_t k) {
    return "M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k);
  };

  for (const Projection& p : projections) {
    std::vector<Buffer> keep;
    const Tensor x = filled(be, keep, {M, p.in}, 0.01f), w = filled(be, keep, {p.out, p.in}, 0.02f);
    const Tensor y = filled(be, keep, {M, p.out}, 0.0f), dy = filled(be, keep, {M, p.out}, 0.01f);
    const Tensor dx = filled(be, keep, {M, p.in}, 0.0f), dw = filled(be, keep, {p.out, p.in}, 0.0f);
    const double flops = 2.0 * double(M) * double(p.out) * double(p.in);
    const std::string name = p.name;
    // The same calls as the model: y = x W^T, dx = dy W, dW += dy^T x.
    record(name + " fwd", mnk(M, p.out, p.in), flops,
           time_median(be, o.repeat, [&] { be.matmul(y, x, w, false, true); }));
    record(name + " bwd dx", mnk(M, p.in, p.out), flops,
           time_median(be, o.repeat, [&] { be.matmul(dx, dy, w, false, false); }));
    record(name + " bwd dW", mnk(p.out, p.in, M), flops,
           time_median(be, o.repeat, [&] { be.matmul(dw, dy, x, true, false, 1.0f, 1.0f); }));
  }

  for (const Projection& p : experts) {
    const int64_t E = moe.experts, m = expert_rows;
    std::vector<Buffer> keep;
    std::vector<Tensor> x, w, y, dy, dx, dw;
    for (int64_t e = 0; e < E; ++e) {
      x.push_back(filled(be, keep, {m, p.in}, 0.01f));
      w.push_back(filled(be, keep, {p.out, p.in}, 0.02f));
      y.push_back(filled(be, keep, {m, p.out}, 0.0f));
      dy.push_back(filled(be, keep, {m, p.out}, 0.01f));
      dx.push_back(filled(be, keep, {m, p.in}, 0.0f));
      dw.push_back(filled(be, keep, {p.out, p.in}, 0.0f));
    }
    const double flops = double(E) * 2.0 * double(m) * double(p.out) * double(p.in);
    const std::string name = p.name;
    auto shape = [&](int64_t mm, int64_t n, int64_t k) {
      return "E=" + std::to_string(E) + " " + mnk(mm, n, k);
    };
    record(name + " fwd", shape(m, p.out, p.in), flops, time_median(be, o.repeat, [&] {
             for (size_t e = 0; e < x.size(); ++e) be.matmul(y[e], x[e], w[e], false, true);
           }));
    record(name + " bwd dx", shape(m, p.in, p.out), flops, time_median(be, o.repeat, [&] {
             for (size_t e = 0; e < x.size(); ++e) be.matmul(dx[e], dy[e], w[e], false, false);
           }));
    record(name + " bwd dW", shape(p.out, p.in, m), flops, time_median(be, o.repeat, [&] {
             for (size_t e = 0; e < x.size(); ++e)
               be.matmul(dw[e], dy[e], x[e], true, false, 1.0f, 1.0f);
           }));
  }

  // FP8 GEMMs (E4M3 x E4M3, f32 output, fp32 accumulation) at the same forward shapes, on a
  // device that has them: the GEMM-only speedup over the rows above.
  Fp8GemmOps* fp8 = fp8_gemm_ops(be);
  if (fp8 && fp8->fp8_unsupported().empty())
    for (const Projection& p : projections) {
      if (!fp8->fp8_shape_supported(M, p.out, p.in)) continue;
      std::vector<Buffer> keep;
      const Tensor x = filled(be, keep, {M, p.in}, 0.01f),
                   w = filled(be, keep, {p.out, p.in}, 0.02f);
      const Tensor y = filled(be, keep, {M, p.out}, 0.0f), one = filled(be, keep, {1}, 1.0f);
      keep.push_back(be.allocate(size_t(M * p.in)));
      const Tensor xq = keep.back().as(DType::fp8_e4m3, {M, p.in});
      keep.push_back(be.allocate(size_t(p.out * p.in)));
      const Tensor wq = keep.back().as(DType::fp8_e4m3, {p.out, p.in});
      fp8->fp8_cast_transpose(xq, Tensor(), Tensor(), Tensor(), x, one, DType::fp8_e4m3);
      fp8->fp8_cast_transpose(wq, Tensor(), Tensor(), Tensor(), w, one, DType::fp8_e4m3);
      record(std::string(p.name) + " fp8 fwd", mnk(M, p.out, p.in),
             2.0 * double(M) * double(p.out) * double(p.in), time_median(be, o.repeat, [&] {
               fp8->fp8_matmul(y, xq, wq, one, one, 0.0f, nullptr);
             }));
    }

  {
    std::vector<Buffer> keep;
    AttentionShape s;
    s.batch = o.micro_batch;
    s.seq = cfg.seq_len;
    s.heads = cfg.heads;
    s.kv_heads = cfg.kv_heads;
    s.head_dim = int(hd);
    const Tensor qkv = filled(be, keep, {M, qkv_cols}, 0.01f),
                 out = filled(be, keep, {M, q_cols}, 0.0f);
    const Tensor lse = filled(be, keep, {s.batch, s.heads, s.seq}, 0.0f);
    const Tensor dout = filled(be, keep, {M, q_cols}, 0.01f),
                 dqkv = filled(be, keep, {M, qkv_cols}, 0.0f);
    const double fwd = 4.0 * s.batch * s.heads * double(s.seq) * s.seq * s.head_dim / 2;
    const std::string shape = "B=" + std::to_string(s.batch) + " H=" + std::to_string(s.heads) +
                              " KV=" + std::to_string(s.kv_heads) + " S=" + std::to_string(s.seq) +
                              " D=" + std::to_string(s.head_dim);
    record("attention fwd", shape, fwd,
           time_median(be, o.repeat, [&] { be.attention_fwd(out, lse, qkv, s); }));
    record("attention bwd", shape, 2.5 * fwd,
           time_median(be, o.repeat, [&] { be.attention_bwd(dqkv, dout, qkv, out, lse, s); }));
  }

  return {{"backend", be.name()},
          {"threads", be.threads()},
          {"peak_flops", peak.flops},
          {"peak_source", peak.source},
          {"tokens", M},
          {"repeat", o.repeat},
          {"kernels", rows}};
}

std::string format_kernel_bench(const nlohmann::json& r) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "backend %s, %d threads; peak %.1f GFLOP/s (%s); %lld tokens; median of %d\n\n",
                r["backend"].get<std::string>().c_str(), r["threads"].get<int>(),
                r["peak_flops"].get<double>() / 1e9, r["peak_source"].get<std::string>().c_str(),
                r["tokens"].get<long long>(), r["repeat"].get<int>());
  std::string s = buf;
  std::snprintf(buf, sizeof buf, "%-20s %-32s %12s %10s %8s\n", "kernel", "shape", "median ms",
                "GFLOP/s", "of peak");
  s += buf;
  for (const auto& k : r["kernels"]) {
    std::snprintf(buf, sizeof buf, "%-20s %-32s %12.3f %10.1f %7.1f%%\n",
                  k["kernel"].get<std::string>().c_str(), k["shape"].get<std::string>().c_str(),
                  k["median_ms"].get<double>(), k["gflops"].get<double>(),
                  100 * k["peak_fraction"].get<double>());
    s += buf;
  }
  return s;
}

}  // namespace llmrun
