// Every Backend op on a backend under test vs a reference backend (see backend_check.h).
#include "backend/backend_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <random>

namespace llmrun {

namespace {

using Dims = std::vector<int64_t>;

Tensor make_tensor(void* data, DType t, const Dims& dims, Device dev) {
  Tensor x;
  x.data = data;
  x.dtype = t;
  x.device = dev;
  x.ndim = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) x.shape[i] = dims[i];
  return x;
}

float round_to_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

class Checker {
 public:
  // One tensor twice: on the reference backend (r) and on the backend under test (t).
  struct Twin {
    Buffer rb, tb;
    Tensor r, t;
  };

  Checker(Backend& test, Backend& ref, uint64_t seed) : test_(test), ref_(ref), rng_(seed) {}

  std::vector<float> uniform(int64_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(rng_);
    return v;
  }

  // Twins live until the end of the current run() (their addresses are stable).
  Twin& upload(const Dims& dims, DType t, const void* host_data) {
    Twin& w = live_.emplace_back();
    const Tensor host = make_tensor(const_cast<void*>(host_data), t, dims, Device::cpu);
    w.rb = ref_.allocate(host.bytes());
    w.tb = test_.allocate(host.bytes());
    w.r = make_tensor(w.rb.data(), t, dims, w.rb.device());
    w.t = make_tensor(w.tb.data(), t, dims, w.tb.device());
    if (host.bytes()) {
      ref_.copy(w.r, host);
      test_.copy(w.t, host);
    }
    return w;
  }
  Twin& f32(const Dims& dims, const std::vector<float>& v) {
    return upload(dims, DType::f32, v.data());
  }
  Twin& random(const Dims& dims, float lo = -1.0f, float hi = 1.0f) {
    return f32(dims, uniform(count(dims), lo, hi));
  }
  // NaN everywhere: an output element the op forgets to write stays NaN and fails.
  Twin& poison(const Dims& dims) {
    return f32(dims,
               std::vector<float>(size_t(count(dims)), std::numeric_limits<float>::quiet_NaN()));
  }
  Twin& i32(const Dims& dims, const std::vector<int32_t>& v) {
    return upload(dims, DType::i32, v.data());
  }

  // Bytes of a tensor on the host, read through its backend's copy.
  std::vector<unsigned char> download(Backend& be, const Tensor& x) {
    std::vector<unsigned char> out(x.bytes());
    if (!out.empty()) {
      Tensor host = x;
      host.data = out.data();
      host.device = Device::cpu;
      be.copy(host, x);
    }
    return out;
  }
  std::vector<float> as_floats(Backend& be, const Tensor& x) {
    const std::vector<unsigned char> raw = download(be, x);
    std::vector<float> v(size_t(x.numel()));
    if (x.dtype == DType::f32) {
      if (!v.empty()) std::memcpy(v.data(), raw.data(), raw.size());
    } else if (x.dtype == DType::i32) {
      for (size_t i = 0; i < v.size(); ++i) {
        int32_t k;
        std::memcpy(&k, raw.data() + 4 * i, 4);
        v[i] = static_cast<float>(k);
      }
    } else {  // bf16 / f16 bit patterns
      for (size_t i = 0; i < v.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        v[i] = x.dtype == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
    }
    return v;
  }

  // Largest relative error of the test outputs against the reference ones (see the header).
  double max_rel_err(const std::vector<const Twin*>& outs) {
    double worst = 0.0;
    for (const Twin* o : outs) {
      const std::vector<float> r = as_floats(ref_, o->r), t = as_floats(test_, o->t);
      double peak = 0.0;
      for (float v : r)
        if (std::isfinite(v)) peak = std::max(peak, double(std::fabs(v)));
      const double floor = std::max(1e-6, 0.01 * peak);
      for (size_t i = 0; i < r.size(); ++i) {
        if (std::isnan(r[i]) && std::isnan(t[i])) continue;
        if (std::isnan(r[i]) != std::isnan(t[i])) return std::numeric_limits<double>::infinity();
        if (r[i] == t[i]) continue;  // equal infinities too
        const double e =
            std::fabs(double(t[i]) - double(r[i])) / std::max(double(std::fabs(r[i])), floor);
        worst = std::max(worst, std::isfinite(e) ? e : std::numeric_limits<double>::infinity());
      }
    }
    return worst;
  }

  // Runs `body` (which calls the op on both backends through `both`) and records a row.
  void run(const std::string& op, const std::string& shape, double tol,
           const std::function<std::vector<const Twin*>()>& body) {
    OpCheck row{op, shape, 0.0, tol, false, ""};
    try {
      const std::vector<const Twin*> outs = body();
      test_.synchronize();
      row.max_rel_err = max_rel_err(outs);
      row.pass = row.max_rel_err <= tol;
    } catch (const std::exception& e) {
      row.max_rel_err = std::numeric_limits<double>::infinity();
      row.note = e.what();
    }
    rows_.push_back(row);
    live_.clear();
  }

  // Calls fn(backend, side) for the reference side then the test side.
  void both(const std::function<void(Backend&, bool)>& fn) {
    fn(ref_, false);
    fn(test_, true);
  }

  static int64_t count(const Dims& d) {
    int64_t n = 1;
    for (int64_t v : d) n *= v;
    return n;
  }

  Backend& test_;
  Backend& ref_;
  std::mt19937_64 rng_;
  std::vector<OpCheck> rows_;
  std::deque<Twin> live_;
};

using Twin = Checker::Twin;
// The side of a twin a backend works on.
inline Tensor& S(Twin& w, bool test) { return test ? w.t : w.r; }
inline const Tensor& S(const Twin& w, bool test) { return test ? w.t : w.r; }

void check_memory_ops(Checker& c) {
  c.run("copy", "37x129 device to device", 0.0, [&] {
    Twin& src = c.random({37, 129});
    Twin& dst = c.poison({37, 129});
    c.both([&](Backend& be, bool t) { be.copy(S(dst, t), S(src, t)); });
    return std::vector<const Twin*>{&dst};
  });
  c.run("fill", "37x129 f32, 17 i32", 0.0, [&] {
    Twin& x = c.poison({37, 129});
    Twin& ids = c.i32({17}, std::vector<int32_t>(17, -5));
    c.both([&](Backend& be, bool t) {
      be.fill(S(x, t), 0.375f);
      be.fill(S(ids, t), 7.0f);
    });
    return std::vector<const Twin*>{&x, &ids};
  });
  c.run("copy_cols", "37x129 -> cols 50..90", 0.0, [&] {
    Twin& src = c.random({37, 129});
    Twin& dst = c.poison({37, 40});
    c.both([&](Backend& be, bool t) { be.copy_cols(S(dst, t), S(src, t), 50); });
    return std::vector<const Twin*>{&dst};
  });
  // The other columns of dst must stay as they were (a chunk's gradient written back into a
  // fused qkv gradient row, context parallelism; OLMoE's q/k norms).
  c.run("copy_into_cols", "37x40 -> cols 50..90 of 37x129", 0.0, [&] {
    Twin& src = c.random({37, 40});
    Twin& dst = c.random({37, 129});
    c.both([&](Backend& be, bool t) { be.copy_into_cols(S(dst, t), S(src, t), 50); });
    return std::vector<const Twin*>{&dst};
  });
  for (DType half : {DType::bf16, DType::f16}) {
    const std::string name = dtype_name(half);
    c.run("cast", "37x129 f32 -> " + name + " (x0.5) -> f32 (x4)", 0.0, [&, half] {
      Twin& src = c.random({37, 129}, -3.0f, 3.0f);
      const std::vector<uint16_t> zeros(37 * 129, 0);
      Twin& mid = c.upload({37, 129}, half, zeros.data());
      Twin& back = c.poison({37, 129});
      c.both([&](Backend& be, bool t) {
        be.cast(S(mid, t), S(src, t), 0.5f);
        be.cast(S(back, t), S(mid, t), 4.0f);
      });
      return std::vector<const Twin*>{&mid, &back};
    });
  }
  c.run("allocate_host_pinned", "4 KiB staging round trip", 0.0, [&] {
    Twin& dst = c.poison({1024});
    const std::vector<float> v = c.uniform(1024);
    c.both([&](Backend& be, bool t) {
      Buffer pinned = be.allocate_host_pinned(1024 * sizeof(float));
      LLMRUN_CHECK(pinned.device() == Device::cpu, "pinned buffers live on the host");
      for (size_t i = 0; i < 1024 * sizeof(float); ++i)
        LLMRUN_CHECK(static_cast<unsigned char*>(pinned.data())[i] == 0,
                     "pinned buffer is not zeroed");
      std::memcpy(pinned.data(), v.data(), v.size() * sizeof(float));
      be.copy(S(dst, t), make_tensor(pinned.data(), DType::f32, {1024}, Device::cpu));
      be.synchronize();
    });
    return std::vector<const Twin*>{&dst};
  });
}

// Runs fn with the backend's GEMM operand type set to dt, restoring the previous one after.
template <class F>
void with_gemm_dtype(Backend& be, DType dt, F fn) {
  const DType before = be.gemm_dtype();
  be.set_gemm_dtype(dt);
  try {
    fn();
  } catch (...) {
    be.set_gemm_dtype(before);
    throw;
  }
  be.set_gemm_dtype(before);
}

void check_gemms(Checker& c) {
  const int64_t M = 37, N = 45, K = 129;
  for (int trans = 0; trans < 4; ++trans) {
    for (int with_bias = 0; with_bias < 2; ++with_bias) {
      const bool ta = trans & 1, tb = trans & 2;
      const std::string shape = std::string(ta ? "129x37^T" : "37x129") + " @ " +
                                (tb ? "45x129^T" : "129x45") + (with_bias ? " +bias" : "") +
                                " alpha 0.7 beta 0.3";
      c.run("matmul", shape, kCheckTolF32Sums, [&, ta, tb, with_bias] {
        Twin& a = ta ? c.random({K, M}) : c.random({M, K});
        Twin& b = tb ? c.random({N, K}) : c.random({K, N});
        Twin& bias = c.random({N});
        Twin& out = c.random({M, N});  // beta != 0 reads it
        c.both([&](Backend& be, bool t) {
          be.matmul(S(out, t), S(a, t), S(b, t), ta, tb, 0.7f, 0.3f,
                    with_bias ? &S(bias, t) : nullptr);
        });
        return std::vector<const Twin*>{&out};
      });
    }
  }
  // bf16 operands: inputs already bf16 values, so both sides multiply the same numbers and
  // the check measures the f32 accumulation, whatever the reference does with gemm_dtype.
  for (int tb = 0; tb < 2; ++tb) {
    c.run("matmul bf16", std::string("37x129 @ ") + (tb ? "45x129^T" : "129x45") + " +bias",
          kCheckTolBf16, [&, tb] {
            auto rounded = [&](int64_t n) {
              std::vector<float> v = c.uniform(n);
              for (float& x : v) x = round_to_bf16(x);
              return v;
            };
            Twin& a = c.f32({M, K}, rounded(M * K));
            Twin& b = tb ? c.f32({N, K}, rounded(N * K)) : c.f32({K, N}, rounded(K * N));
            Twin& bias = c.random({N});
            Twin& out = c.poison({M, N});
            c.both([&](Backend& be, bool t) {
              with_gemm_dtype(be, DType::bf16, [&] {
                be.matmul(S(out, t), S(a, t), S(b, t), false, tb, 1.0f, 0.0f, &S(bias, t));
              });
            });
            return std::vector<const Twin*>{&out};
          });
  }
  // A linear's backward (dy rounded once for both GEMMs on a device), in f32 and with bf16
  // operands; as above, bf16 inputs are bf16 values already, so every backend multiplies the
  // same numbers and the check measures the GEMMs and which operand goes where.
  for (const DType dt : {DType::f32, DType::bf16}) {
    c.run(dt == DType::f32 ? "linear_grads" : "linear_grads bf16", "dy 37x45, x 37x129, W 45x129",
          dt == DType::f32 ? kCheckTolF32Sums : kCheckTolBf16, [&, dt] {
            auto input = [&](std::vector<int64_t> shape) -> Twin& {
              if (dt == DType::f32) return c.random(shape);
              std::vector<float> v = c.uniform(shape[0] * shape[1]);
              for (float& x : v) x = round_to_bf16(x);
              return c.f32(shape, v);
            };
            Twin& dy = input({M, N});
            Twin& x = input({M, K});
            Twin& w = input({N, K});
            Twin& dw = c.random({N, K});  // accumulated into
            Twin& dx = c.poison({M, K});
            c.both([&](Backend& be, bool t) {
              with_gemm_dtype(
                  be, dt, [&] { be.linear_grads(S(dx, t), S(dw, t), S(dy, t), S(x, t), S(w, t)); });
            });
            return std::vector<const Twin*>{&dx, &dw};
          });
  }
  // GPT-2's MLP GEMMs with the GELU fused into cuBLASLt's epilogue on a GPU (GELU_AUX_BIAS
  // forward, DGELU backward); N = 48 keeps the auxiliary matrix's leading dimension a multiple
  // of 8, which the epilogue needs (other shapes take the unfused path).
  const int64_t F = 48;
  c.run("matmul_bias_gelu", "37x129 @ 48x129^T +bias, gelu", kCheckTolF32Sums, [&] {
    Twin& x = c.random({M, K});
    Twin& w = c.random({F, K});
    Twin& bias = c.random({F});
    Twin& pre = c.poison({M, F});
    Twin& act = c.poison({M, F});
    c.both([&](Backend& be, bool t) {
      be.matmul_bias_gelu(S(pre, t), S(act, t), S(x, t), S(w, t), &S(bias, t));
    });
    return std::vector<const Twin*>{&pre, &act};
  });
  c.run("matmul_dgelu", "(37x45 @ 45x48) * gelu'(pre 37x48)", kCheckTolGeluBwd, [&] {
    Twin& dy = c.random({M, N});
    Twin& w = c.random({N, F});
    Twin& pre = c.random({M, F});
    Twin& dx = c.poison({M, F});
    c.both([&](Backend& be, bool t) { be.matmul_dgelu(S(dx, t), S(dy, t), S(w, t), S(pre, t)); });
    return std::vector<const Twin*>{&dx};
  });
  c.run("linear_rows", "37x129 W 45x129 +bias accumulate", kCheckTolF32, [&] {
    Twin& x = c.random({M, K});
    Twin& w = c.random({N, K});
    Twin& bias = c.random({N});
    Twin& y = c.random({M, N});
    c.both(
        [&](Backend& be, bool t) { be.linear_rows(S(y, t), S(x, t), S(w, t), &S(bias, t), true); });
    return std::vector<const Twin*>{&y};
  });
  // The inference linear with bf16 operands (`--dtype bf16`), on bf16-valued inputs as above.
  c.run("linear_rows bf16", "37x129 W 45x129 +bias", kCheckTolBf16, [&] {
    auto rounded = [&](std::vector<int64_t> shape) -> Twin& {
      std::vector<float> v = c.uniform(shape[0] * shape[1]);
      for (float& x : v) x = round_to_bf16(x);
      return c.f32(shape, v);
    };
    Twin& x = rounded({M, K});
    Twin& w = rounded({N, K});
    Twin& bias = c.random({N});
    Twin& y = c.poison({M, N});
    c.both([&](Backend& be, bool t) {
      with_gemm_dtype(be, DType::bf16,
                      [&] { be.linear_rows(S(y, t), S(x, t), S(w, t), &S(bias, t), false); });
    });
    return std::vector<const Twin*>{&y};
  });
  // Batch invariance on the backend under test: each row computed alone is bitwise the row
  // computed in the batch (what continuous batching relies on).
  c.run("linear_rows batch-invariant", "rows of 37x129 alone vs in batch", kCheckTolF32, [&] {
    Twin& x = c.random({M, K});
    Twin& w = c.random({N, K});
    Twin& y_batch = c.poison({M, N});
    Twin& y_alone = c.poison({M, N});
    c.both([&](Backend& be, bool t) {
      be.linear_rows(S(y_batch, t), S(x, t), S(w, t), nullptr, false);
      for (int64_t r = 0; r < M; r += 5) {
        const int64_t e = std::min(M, r + (r % 2 ? 5 : 1));
        Tensor yr = S(y_alone, t).slice(r, e), xr = S(x, t).slice(r, e);
        be.linear_rows(yr, xr, S(w, t), nullptr, false);
      }
    });
    const std::vector<float> a = c.as_floats(c.test_, y_batch.t),
                             b = c.as_floats(c.test_, y_alone.t);
    for (int64_t r = 0; r < M; r += 5) {
      const int64_t e = std::min(M, r + (r % 2 ? 5 : 1));
      for (int64_t i = r * N; i < e * N; ++i)
        LLMRUN_CHECK(std::memcmp(&a[size_t(i)], &b[size_t(i)], sizeof(float)) == 0,
                     "row " + std::to_string(i / N) + " differs alone and in the batch");
    }
    return std::vector<const Twin*>{&y_batch};
  });
  c.run("sum_rows", "37x129 accumulate", kCheckTolF32, [&] {
    Twin& x = c.random({M, K});
    Twin& out = c.random({K});
    c.both([&](Backend& be, bool t) { be.sum_rows(S(out, t), S(x, t), true); });
    return std::vector<const Twin*>{&out};
  });
}

void check_elementwise(Checker& c) {
  c.run("add", "37x129", kCheckTolF32, [&] {
    Twin& a = c.random({37, 129});
    Twin& b = c.random({37, 129});
    Twin& out = c.poison({37, 129});
    c.both([&](Backend& be, bool t) { be.add(S(out, t), S(a, t), S(b, t)); });
    return std::vector<const Twin*>{&out};
  });
  c.run("scale", "37x129", kCheckTolF32, [&] {
    Twin& x = c.random({37, 129});
    c.both([&](Backend& be, bool t) { be.scale(S(x, t), -1.75f); });
    return std::vector<const Twin*>{&x};
  });
  c.run("gelu_fwd", "37x129", kCheckTolF32, [&] {
    Twin& x = c.random({37, 129}, -5.0f, 5.0f);
    Twin& out = c.poison({37, 129});
    c.both([&](Backend& be, bool t) { be.gelu_fwd(S(out, t), S(x, t)); });
    return std::vector<const Twin*>{&out};
  });
  // 1 - tanh^2 cancels in float where tanh nears +-1, so one ulp between two tanh
  // implementations (the CPU's exp-based one, CUDA's tanhf) shows as ~1e-4 here.
  c.run("gelu_bwd", "37x129", kCheckTolGeluBwd, [&] {
    Twin& x = c.random({37, 129}, -5.0f, 5.0f);
    Twin& dy = c.random({37, 129});
    Twin& dx = c.poison({37, 129});
    c.both([&](Backend& be, bool t) { be.gelu_bwd(S(dx, t), S(dy, t), S(x, t)); });
    return std::vector<const Twin*>{&dx};
  });
  c.run("swiglu_fwd", "37x(2x67)", kCheckTolF32, [&] {
    Twin& gu = c.random({37, 134}, -4.0f, 4.0f);
    Twin& out = c.poison({37, 67});
    c.both([&](Backend& be, bool t) { be.swiglu_fwd(S(out, t), S(gu, t)); });
    return std::vector<const Twin*>{&out};
  });
  c.run("swiglu_bwd", "37x(2x67)", kCheckTolF32, [&] {
    Twin& gu = c.random({37, 134}, -4.0f, 4.0f);
    Twin& dout = c.random({37, 67});
    Twin& dgu = c.poison({37, 134});
    c.both([&](Backend& be, bool t) { be.swiglu_bwd(S(dgu, t), S(dout, t), S(gu, t)); });
    return std::vector<const Twin*>{&dgu};
  });
}

void check_norms(Checker& c) {
  const int64_t R = 37, C = 129;
  c.run("layernorm_fwd", "37x129", kCheckTolF32, [&] {
    Twin& x = c.random({R, C}, -2.0f, 3.0f);
    Twin& w = c.random({C});
    Twin& b = c.random({C});
    Twin& out = c.poison({R, C});
    Twin& mean = c.poison({R});
    Twin& rstd = c.poison({R});
    c.both([&](Backend& be, bool t) {
      be.layernorm_fwd(S(out, t), S(mean, t), S(rstd, t), S(x, t), S(w, t), S(b, t), 1e-5f);
    });
    return std::vector<const Twin*>{&out, &mean, &rstd};
  });
  for (int acc = 0; acc < 2; ++acc) {
    c.run("layernorm_bwd", std::string("37x129") + (acc ? " accumulate_dx" : ""), kCheckTolF32,
          [&, acc] {
            Twin& x = c.random({R, C}, -2.0f, 3.0f);
            Twin& w = c.random({C});
            Twin& b = c.random({C});
            Twin& dy = c.random({R, C});
            Twin& out = c.poison({R, C});
            Twin& mean = c.poison({R});
            Twin& rstd = c.poison({R});
            Twin& dx = acc ? c.random({R, C}) : c.poison({R, C});
            Twin& dw = c.random({C});  // parameter gradients accumulate
            Twin& db = c.random({C});
            c.both([&](Backend& be, bool t) {
              be.layernorm_fwd(S(out, t), S(mean, t), S(rstd, t), S(x, t), S(w, t), S(b, t), 1e-5f);
              be.layernorm_bwd(S(dx, t), S(dw, t), S(db, t), S(dy, t), S(x, t), S(w, t), S(mean, t),
                               S(rstd, t), acc != 0);
            });
            return std::vector<const Twin*>{&dx, &dw, &db};
          });
  }
  c.run("rmsnorm_fwd", "37x129", kCheckTolF32, [&] {
    Twin& x = c.random({R, C}, -2.0f, 3.0f);
    Twin& w = c.random({C});
    Twin& out = c.poison({R, C});
    Twin& rstd = c.poison({R});
    c.both([&](Backend& be, bool t) {
      be.rmsnorm_fwd(S(out, t), S(rstd, t), S(x, t), S(w, t), 1e-6f);
    });
    return std::vector<const Twin*>{&out, &rstd};
  });
  for (int acc = 0; acc < 2; ++acc) {
    c.run("rmsnorm_bwd", std::string("37x129") + (acc ? " accumulate_dx" : ""), kCheckTolF32,
          [&, acc] {
            Twin& x = c.random({R, C}, -2.0f, 3.0f);
            Twin& w = c.random({C});
            Twin& dy = c.random({R, C});
            Twin& out = c.poison({R, C});
            Twin& rstd = c.poison({R});
            Twin& dx = acc ? c.random({R, C}) : c.poison({R, C});
            Twin& dw = c.random({C});
            c.both([&](Backend& be, bool t) {
              be.rmsnorm_fwd(S(out, t), S(rstd, t), S(x, t), S(w, t), 1e-6f);
              be.rmsnorm_bwd(S(dx, t), S(dw, t), S(dy, t), S(x, t), S(w, t), S(rstd, t), acc != 0);
            });
            return std::vector<const Twin*>{&dx, &dw};
          });
  }
}

void check_positions_and_attention(Checker& c) {
  for (int inverse = 0; inverse < 2; ++inverse) {
    c.run("rope",
          std::string("37x(5x16), 4 heads rotated, llama3 scaling") + (inverse ? ", inverse" : ""),
          kCheckTolF32, [&, inverse] {
            Twin& x = c.random({37, 80});
            std::vector<int32_t> p(37);
            for (int i = 0; i < 37; ++i) p[size_t(i)] = (i * 977) % 9000;
            Twin& pos = c.i32({37}, p);
            RopeScaling s;
            s.type = RopeScaling::Type::llama3;
            s.factor = 8.0f;
            s.original_max_positions = 1024;
            c.both([&](Backend& be, bool t) {
              be.rope(S(x, t), S(pos, t), 4, 16, 10000.0f, s, inverse != 0);
            });
            return std::vector<const Twin*>{&x};
          });
  }
  AttentionShape s;
  s.batch = 2;
  s.seq = 19;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 16;
  const int64_t hd = int64_t(s.heads) * s.head_dim;
  // fp32, and precision.compute: bf16 at the tensor-core kernels' shapes (head_dim 64; 70 rows:
  // a full and a partial 64-row tile, the diagonal masked in both): both sides round the matmul
  // operands to bf16 (backend.h), so they differ by fp32 summation order and by the rare
  // element that rounds to the neighbouring bf16 value (kCheckTolBf16Attention).
  AttentionShape s16 = s;
  s16.seq = 70;
  s16.head_dim = 64;
  struct AttentionCase {
    const char* suffix;
    AttentionShape shape;
    std::string text;
    DType dtype;
    double tol;
  };
  const AttentionCase cases[] = {
      {"", s, "batch 2, seq 19, 4 heads, 2 kv heads, head_dim 16", DType::f32, kCheckTolF32Sums},
      {" bf16", s16, "bf16 operands, batch 2, seq 70, 4 heads, 2 kv heads, head_dim 64",
       DType::bf16, kCheckTolBf16Attention}};
  for (const AttentionCase& a : cases) {
    const AttentionShape& as = a.shape;
    const int64_t ar = int64_t(as.batch) * as.seq, ahd = int64_t(as.heads) * as.head_dim;
    c.run(std::string("attention_fwd") + a.suffix, a.text, a.tol, [&] {
      Twin& qkv = c.random({ar, as.qkv_cols()}, -2.0f, 2.0f);
      Twin& out = c.poison({ar, ahd});
      Twin& lse = c.poison({as.batch, as.heads, as.seq});
      c.both([&](Backend& be, bool t) {
        with_gemm_dtype(be, a.dtype,
                        [&] { be.attention_fwd(S(out, t), S(lse, t), S(qkv, t), as); });
      });
      return std::vector<const Twin*>{&out, &lse};
    });
    c.run(std::string("attention_bwd") + a.suffix, a.text, a.tol, [&] {
      Twin& qkv = c.random({ar, as.qkv_cols()}, -2.0f, 2.0f);
      Twin& out = c.poison({ar, ahd});
      Twin& lse = c.poison({as.batch, as.heads, as.seq});
      Twin& dout = c.random({ar, ahd});
      Twin& dqkv = c.poison({ar, as.qkv_cols()});
      c.both([&](Backend& be, bool t) {
        with_gemm_dtype(be, a.dtype, [&] {
          be.attention_fwd(S(out, t), S(lse, t), S(qkv, t), as);
          be.attention_bwd(S(dqkv, t), S(dout, t), S(qkv, t), S(out, t), S(lse, t), as);
        });
      });
      return std::vector<const Twin*>{&dqkv};
    });
  }
  c.run("attention_cached",
        "3 queries at position 14, cache 21 rows, 4 heads, 2 kv heads, head_dim 16",
        kCheckTolF32Sums, [&] {
          Twin& q = c.random({3, hd});
          Twin& k = c.random({21, 2 * 16});
          Twin& v = c.random({21, 2 * 16});
          Twin& out = c.poison({3, hd});
          c.both([&](Backend& be, bool t) {
            be.attention_cached(S(out, t), S(q, t), S(k, t), S(v, t), 14, 4, 2, 16);
          });
          return std::vector<const Twin*>{&out};
        });
  // Paged: 3 sequences (a prefill chunk of 5, two decodes), block_size 4, blocks scattered.
  c.run("scatter_rows + paged_attention",
        "3 sequences, block size 4, 4 heads, 2 kv heads, head_dim 16", kCheckTolF32Sums, [&] {
          const int bs = 4, pool_blocks = 12, kvd = 32, max_blocks = 4;
          const std::vector<int32_t> ctx = {13, 6, 9};
          const std::vector<int32_t> qs = {0, 5, 6, 7};
          const std::vector<int32_t> bt = {3, 0, 7, 10, 5, 1, -1, -1, 2, 9, 11, -1};
          Twin& k_pool = c.random({pool_blocks * bs, kvd});
          Twin& v_pool = c.random({pool_blocks * bs, kvd});
          Twin& tables = c.i32({3, max_blocks}, bt);
          Twin& starts = c.i32({4}, qs);
          Twin& lens = c.i32({3}, ctx);
          // New tokens' k and v go to their slots (position p of sequence s: block bt[s][p/bs]).
          std::vector<int32_t> sl;
          for (int seq = 0; seq < 3; ++seq)
            for (int i = qs[size_t(seq)]; i < qs[size_t(seq) + 1]; ++i) {
              const int pos = ctx[size_t(seq)] - (qs[size_t(seq) + 1] - qs[size_t(seq)]) +
                              (i - qs[size_t(seq)]);
              sl.push_back(bt[size_t(seq * max_blocks + pos / bs)] * bs + pos % bs);
            }
          sl.push_back(-1);  // a skipped row
          Twin& slots = c.i32({8}, sl);
          Twin& qkv_new = c.random({8, hd + 2 * kvd});
          Twin& q = c.poison({7, hd});
          Twin& out = c.poison({7, hd});
          c.both([&](Backend& be, bool t) {
            be.scatter_rows(S(k_pool, t), S(qkv_new, t), S(slots, t), hd);
            be.scatter_rows(S(v_pool, t), S(qkv_new, t), S(slots, t), hd + kvd);
            be.copy_cols(S(q, t), S(qkv_new, t).slice(0, 7), 0);
            be.paged_attention(S(out, t), S(q, t), S(k_pool, t), S(v_pool, t), S(tables, t),
                               S(starts, t), S(lens, t), bs, 4, 2, 16);
          });
          return std::vector<const Twin*>{&k_pool, &v_pool, &out};
        });
}

// Context parallelism's ring attention blocks: a chunk of queries against the causal diagonal
// block and against full blocks with more and with fewer keys, the log-sum-exp merge with rows
// that have no keys yet (lse -inf) on either side, and the backward, which ADDS to gradients
// that already hold other blocks' shares.
void check_block_attention(Checker& c) {
  AttentionShape s;
  s.batch = 2;
  s.seq = 19;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 16;
  const int64_t rows = int64_t(s.batch) * s.seq, hd = int64_t(s.heads) * s.head_dim;
  const int64_t kvd = int64_t(s.kv_heads) * s.head_dim;
  const std::string heads = "4 heads, 2 kv heads, head_dim 16";
  for (const int nk : {19, 41, 7})
    for (const bool bwd : {false, true}) {
      const bool causal = nk == s.seq;
      const std::string shape = "batch 2, 19 queries, " + std::to_string(nk) + " keys" +
                                (causal ? " (causal)" : "") + ", " + heads +
                                (bwd ? ", accumulate" : "");
      c.run(bwd ? "attention_block_bwd" : "attention_block_fwd", shape, kCheckTolF32Sums,
            [&, nk, bwd, causal] {
              Twin& q = c.random({rows, hd}, -2.0f, 2.0f);
              Twin& k = c.random({int64_t(s.batch) * nk, kvd}, -2.0f, 2.0f);
              Twin& v = c.random({int64_t(s.batch) * nk, kvd});
              if (!bwd) {
                Twin& out = c.poison({rows, hd});
                Twin& lse = c.poison({s.batch, s.heads, s.seq});
                c.both([&](Backend& be, bool t) {
                  be.attention_block_fwd(S(out, t), S(lse, t), S(q, t), S(k, t), S(v, t), nk,
                                         causal, s);
                });
                return std::vector<const Twin*>{&out, &lse};
              }
              // The final out and lse of the queries cover other blocks' keys too: random.
              Twin& out = c.random({rows, hd});
              Twin& lse = c.random({s.batch, s.heads, s.seq}, 2.0f, 4.0f);
              Twin& dout = c.random({rows, hd});
              Twin& dq = c.random({rows, hd});
              Twin& dk = c.random({int64_t(s.batch) * nk, kvd});
              Twin& dv = c.random({int64_t(s.batch) * nk, kvd});
              c.both([&](Backend& be, bool t) {
                be.attention_block_bwd(S(dq, t), S(dk, t), S(dv, t), S(dout, t), S(out, t),
                                       S(lse, t), S(q, t), S(k, t), S(v, t), nk, causal, s);
              });
              return std::vector<const Twin*>{&dq, &dk, &dv};
            });
    }
  c.run("attention_lse_merge", "batch 2, 19 queries, " + heads + ", lse -inf on either side",
        kCheckTolF32, [&] {
          const int64_t n = int64_t(s.batch) * s.heads * s.seq;
          std::vector<float> lse = c.uniform(n, -3.0f, 3.0f), blse = c.uniform(n, -3.0f, 3.0f);
          std::vector<float> out = c.uniform(rows * hd);
          const float inf = std::numeric_limits<float>::infinity();
          for (int64_t i = 0; i < n; ++i) {
            // 0: neither side has keys, 1: only the block, 2: only the running result.
            if (i % 5 == 0 || i % 5 == 1) {
              lse[size_t(i)] = -inf;
              const int64_t b = i / (s.heads * s.seq), h = i / s.seq % s.heads, t = i % s.seq;
              for (int e = 0; e < s.head_dim; ++e)
                out[size_t((b * s.seq + t) * hd + h * s.head_dim + e)] = 0.0f;  // as filled
            }
            if (i % 5 == 0 || i % 5 == 2) blse[size_t(i)] = -inf;
          }
          Twin& o = c.f32({rows, hd}, out);
          Twin& l = c.f32({s.batch, s.heads, s.seq}, lse);
          Twin& bo = c.random({rows, hd});
          Twin& bl = c.f32({s.batch, s.heads, s.seq}, blse);
          c.both([&](Backend& be, bool t) {
            be.attention_lse_merge(S(o, t), S(l, t), S(bo, t), S(bl, t), s);
          });
          return std::vector<const Twin*>{&o, &l};
        });
}

void check_embedding_and_loss(Checker& c) {
  const int64_t V = 53, D = 67, N = 37;
  std::vector<int32_t> ids(N);
  for (int64_t i = 0; i < N; ++i) ids[size_t(i)] = i % 9 == 4 ? -1 : int32_t((i * 31) % V);
  for (int acc = 0; acc < 2; ++acc) {
    c.run("embedding_fwd", std::string("37 ids (some -1) into 53x67") + (acc ? " accumulate" : ""),
          kCheckTolF32, [&, acc] {
            Twin& table = c.random({V, D});
            Twin& id = c.i32({N}, ids);
            Twin& out = acc ? c.random({N, D}) : c.poison({N, D});
            c.both([&](Backend& be, bool t) {
              be.embedding_fwd(S(out, t), S(id, t), S(table, t), acc != 0);
            });
            return std::vector<const Twin*>{&out};
          });
  }
  c.run("embedding_bwd", "37 ids (repeats, some -1) into 53x67", kCheckTolF32, [&] {
    Twin& dtable = c.random({V, D});
    Twin& id = c.i32({N}, ids);
    Twin& dout = c.random({N, D});
    c.both([&](Backend& be, bool t) { be.embedding_bwd(S(dtable, t), S(dout, t), S(id, t)); });
    return std::vector<const Twin*>{&dtable};
  });
  const int64_t Vx = 129;
  std::vector<int32_t> targets(N), local(N);
  for (int64_t i = 0; i < N; ++i) {
    targets[size_t(i)] = i % 7 == 3 ? -1 : int32_t((i * 13) % Vx);
    local[size_t(i)] = i % 7 == 3 ? -1 : (i % 5 == 1 ? -2 : int32_t((i * 13) % Vx));
  }
  c.run("softmax_xent", "37x129, some targets -1, grad_scale 1/37", kCheckTolF32, [&] {
    Twin& logits = c.random({N, Vx}, -6.0f, 6.0f);
    Twin& tgt = c.i32({N}, targets);
    Twin& losses = c.poison({N});
    c.both([&](Backend& be, bool t) {
      be.softmax_xent(S(losses, t), S(logits, t), S(tgt, t), 1.0f / 37);
    });
    return std::vector<const Twin*>{&losses, &logits};
  });
  c.run("xent_row_max + xent_partials + xent_finish", "37x129, targets -1 and -2", kCheckTolF32,
        [&] {
          Twin& logits = c.random({N, Vx}, -6.0f, 6.0f);
          Twin& tgt = c.i32({N}, local);
          Twin& losses = c.poison({N});
          Twin& row_max = c.poison({N});
          Twin& sums = c.poison({2, N});
          c.both([&](Backend& be, bool t) {
            be.xent_row_max(S(row_max, t), S(logits, t));
            be.xent_partials(S(sums, t), S(logits, t), S(row_max, t), S(tgt, t));
            be.xent_finish(S(losses, t), S(logits, t), S(row_max, t), S(sums, t), S(tgt, t), 0.5f);
          });
          return std::vector<const Twin*>{&row_max, &sums, &losses, &logits};
        });
}

void check_optimizer_and_reductions(Checker& c) {
  c.run("adamw", "4999 elements, step 3, weight decay 0.1", kCheckTolF32, [&] {
    Twin& p = c.random({4999});
    Twin& g = c.random({4999});
    Twin& m = c.random({4999}, -0.1f, 0.1f);
    Twin& v = c.random({4999}, 0.0f, 0.01f);
    AdamWParams hp;
    hp.lr = 1e-3f;
    hp.weight_decay = 0.1f;
    hp.step = 3;
    c.both([&](Backend& be, bool t) { be.adamw(S(p, t), S(g, t), S(m, t), S(v, t), hp); });
    return std::vector<const Twin*>{&p, &m, &v};
  });
  c.run("sum, sum_squares, amax", "100003 elements", kCheckTolF32, [&] {
    Twin& x = c.random({100003}, -2.0f, 1.0f);
    std::vector<float> got[2];
    c.both([&](Backend& be, bool t) {
      got[t] = {static_cast<float>(be.sum(S(x, t))), static_cast<float>(be.sum_squares(S(x, t))),
                be.amax(S(x, t))};
    });
    // Results come back to the host; put them side by side in a twin to compare.
    Twin& res = c.f32({3}, got[0]);
    const Tensor host = make_tensor(got[1].data(), DType::f32, {3}, Device::cpu);
    c.test_.copy(res.t, host);
    return std::vector<const Twin*>{&res};
  });
  c.run("sum_squares_into, amax_into", "100003 elements into running scalars", kCheckTolF32, [&] {
    Twin& x = c.random({100003}, -2.0f, 1.0f);
    Twin& y = c.random({4097}, -3.0f, 3.0f);
    Twin& ss = c.f32({1}, {0.25f});
    Twin& am = c.f32({1}, {0.5f});
    c.both([&](Backend& be, bool t) {
      be.sum_squares_into(S(ss, t), S(x, t));
      be.sum_squares_into(S(ss, t), S(y, t));
      be.amax_into(S(am, t), S(x, t));
      be.amax_into(S(am, t), S(y, t));
    });
    return std::vector<const Twin*>{&ss, &am};
  });
  c.run("amax_into NaN", "a NaN in 4097 elements propagates", 0.0, [&] {
    std::vector<float> v = c.uniform(4097);
    v[2345] = std::numeric_limits<float>::quiet_NaN();
    Twin& x = c.f32({4097}, v);
    Twin& am = c.f32({1}, {0.0f});
    c.both([&](Backend& be, bool t) { be.amax_into(S(am, t), S(x, t)); });
    return std::vector<const Twin*>{&am};
  });
  c.run("argmax_rows", "37x129 with ties", 0.0, [&] {
    std::vector<float> v = c.uniform(37 * 129);
    for (int r = 0; r < 37; r += 3)
      v[size_t(r * 129 + 100)] = v[size_t(r * 129 + 7)] = 5.0f;  // tie: 7 wins
    Twin& x = c.f32({37, 129}, v);
    Twin& ids = c.i32({37}, std::vector<int32_t>(37, -9));
    c.both([&](Backend& be, bool t) { be.argmax_rows(S(ids, t), S(x, t)); });
    return std::vector<const Twin*>{&ids};
  });
}

}  // namespace

std::vector<OpCheck> check_backend(Backend& test, Backend& ref, uint64_t seed) {
  Checker c(test, ref, seed);
  check_memory_ops(c);
  check_gemms(c);
  check_elementwise(c);
  check_norms(c);
  check_positions_and_attention(c);
  check_block_attention(c);
  check_embedding_and_loss(c);
  check_optimizer_and_reductions(c);
  return c.rows_;
}

}  // namespace llmrun
