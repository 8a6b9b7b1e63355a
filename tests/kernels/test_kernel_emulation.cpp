// The CUDA kernels of kernels/ (all families but attention, which has its own emulation tests,
// and cuBLASLt GEMMs) run on the CPU through tests/device/cuda_emulation.h, behind a Backend
// whose ops call the launchers on host memory the way src/backend/cuda/ does on the device.
// backend_check then compares every op with the CPU backend: random inputs, shapes that are
// not multiples of the block sizes, NaN-poisoned outputs. On a machine without a GPU this is
// how the kernels' indexing, guards, block reductions and accumulate flags get checked.
//
// Its own executable: the emulated launchers have the real launchers' names, so they must not
// share a binary with the CUDA backend (which would call them on device pointers).
#define LLMRUN_KERNEL_EMULATION 1
#include <cstdint>
#include <cstring>

#include "../device/cuda_emulation.h"

// Shared memory: one block runs at a time, so a function-static array is that block's.
#undef __shared__
#define __shared__ static

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../../kernels/adamw.cu"
#include "../../kernels/elementwise.cu"
#include "../../kernels/embedding.cu"
#include "../../kernels/linear_rows.cu"
#include "../../kernels/loss.cu"
#include "../../kernels/norms.cu"
#include "../../kernels/reduce.cu"
#include "../../kernels/rope.cu"
#include "backend/backend.h"
#include "backend/backend_check.h"

using namespace llmrun;

namespace {

namespace k = llmrun::kernels;

float* F(const Tensor& t) { return static_cast<float*>(t.data); }
int32_t* I(const Tensor& t) { return static_cast<int32_t*>(t.data); }

// The CUDA backend's op bodies with host memory and the emulated launchers. GEMMs through
// cuBLASLt, attention (tests/unit/test_attention_emulation.cpp) and plain copies go to the CPU.
class EmulatedKernels final : public Backend {
 public:
  EmulatedKernels() : cpu_(make_cpu_backend(1)) {}
  std::string name() const override { return "emulated-cuda-kernels"; }
  Device device() const override { return Device::cpu; }
  int threads() const override { return 1; }
  Buffer allocate(size_t bytes) override { return cpu_->allocate(bytes); }
  void copy(Tensor d, const Tensor& s) override { cpu_->copy(d, s); }
  void copy_cols(Tensor d, const Tensor& s, int64_t c) override { cpu_->copy_cols(d, s, c); }
  void copy_into_cols(Tensor d, const Tensor& s, int64_t c) override {
    cpu_->copy_into_cols(d, s, c);
  }
  void fill(Tensor x, float v) override {
    if (x.dtype == DType::i32)
      k::fill_32(x.data, x.numel(), uint32_t(int32_t(v)), nullptr);
    else {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      k::fill_32(x.data, x.numel(), bits, nullptr);
    }
  }
  void cast(Tensor d, const Tensor& s, float scale) override {
    const auto kind = [](DType t) {
      return t == DType::bf16 ? k::HalfKind::bf16 : k::HalfKind::f16;
    };
    if (d.dtype == DType::f32 && s.dtype == DType::f32)
      k::cast_f32_f32(F(d), F(s), d.numel(), scale, nullptr);
    else if (s.dtype == DType::f32)
      k::cast_f32_half(static_cast<uint16_t*>(d.data), F(s), d.numel(), scale, kind(d.dtype),
                       nullptr);
    else
      k::cast_half_f32(F(d), static_cast<const uint16_t*>(s.data), d.numel(), scale, kind(s.dtype),
                       nullptr);
  }
  void matmul(Tensor o, const Tensor& a, const Tensor& b, bool ta, bool tb, float al, float be,
              const Tensor* bias) override {
    cpu_->matmul(o, a, b, ta, tb, al, be, bias);
  }
  void linear_rows(Tensor y, const Tensor& x, const Tensor& w, const Tensor* b, bool acc) override {
    k::linear_rows(F(y), F(x), F(w), b ? F(*b) : nullptr, x.rows(), w.rows(), x.cols(), acc,
                   gemm_dtype() == DType::bf16, nullptr);
  }
  void sum_rows(Tensor o, const Tensor& x, bool acc) override {
    std::vector<double> ws(k::column_reduce_workspace_bytes(x.rows(), x.cols(), 1) /
                           sizeof(double));
    k::sum_rows(F(o), F(x), x.rows(), x.cols(), acc, ws.data(), nullptr);
  }
  void add(Tensor o, const Tensor& a, const Tensor& b) override {
    k::add(F(o), F(a), F(b), o.numel(), nullptr);
  }
  void scale(Tensor x, float a) override { k::scale(F(x), a, x.numel(), nullptr); }
  void gelu_fwd(Tensor o, const Tensor& x) override { k::gelu_fwd(F(o), F(x), x.numel(), nullptr); }
  void gelu_bwd(Tensor dx, const Tensor& dy, const Tensor& x) override {
    k::gelu_bwd(F(dx), F(dy), F(x), x.numel(), nullptr);
  }
  void swiglu_fwd(Tensor o, const Tensor& gu) override {
    k::swiglu_fwd(F(o), F(gu), gu.rows(), gu.cols() / 2, nullptr);
  }
  void swiglu_bwd(Tensor d, const Tensor& o, const Tensor& gu) override {
    k::swiglu_bwd(F(d), F(o), F(gu), gu.rows(), gu.cols() / 2, nullptr);
  }
  void layernorm_fwd(Tensor o, Tensor m, Tensor r, const Tensor& x, const Tensor& w,
                     const Tensor& b, float e) override {
    k::layernorm_fwd(F(o), F(m), F(r), F(x), F(w), F(b), x.rows(), x.cols(), e, nullptr);
  }
  void layernorm_bwd(Tensor dx, Tensor dw, Tensor db, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const Tensor& m, const Tensor& r, bool acc) override {
    std::vector<double> ws(k::column_reduce_workspace_bytes(x.rows(), x.cols(), 2) /
                           sizeof(double));
    k::layernorm_bwd(F(dx), F(dw), F(db), F(dy), F(x), F(w), F(m), F(r), x.rows(), x.cols(), acc,
                     ws.data(), nullptr);
  }
  void rmsnorm_fwd(Tensor o, Tensor r, const Tensor& x, const Tensor& w, float e) override {
    k::rmsnorm_fwd(F(o), F(r), F(x), F(w), x.rows(), x.cols(), e, nullptr);
  }
  void rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                   const Tensor& r, bool acc) override {
    std::vector<double> ws(k::column_reduce_workspace_bytes(x.rows(), x.cols(), 1) /
                           sizeof(double));
    k::rmsnorm_bwd(F(dx), F(dw), F(dy), F(x), F(w), F(r), x.rows(), x.cols(), acc, ws.data(),
                   nullptr);
  }
  void rope(Tensor x, const Tensor& p, int rh, int hd, float th, const RopeScaling& s,
            bool inv) override {
    const std::vector<float> inv_freq = rope_inv_freq(th, hd, s);
    k::rope(F(x), I(p), inv_freq.data(), x.rows(), x.cols(), rh, hd, inv, nullptr);
  }
  // (bf16 compute rounds attention's operands: the CPU op under the same GEMM dtype.)
  void attention_fwd(Tensor o, Tensor l, const Tensor& q, const AttentionShape& s) override {
    cpu_->set_gemm_dtype(gemm_dtype());
    cpu_->attention_fwd(o, l, q, s);
  }
  void attention_bwd(Tensor d, const Tensor& dout, const Tensor& q, const Tensor& o,
                     const Tensor& l, const AttentionShape& s) override {
    cpu_->set_gemm_dtype(gemm_dtype());
    cpu_->attention_bwd(d, dout, q, o, l, s);
  }
  void attention_cached(Tensor o, const Tensor& q, const Tensor& kc, const Tensor& vc, int sp,
                        int h, int kv, int hd) override {
    cpu_->attention_cached(o, q, kc, vc, sp, h, kv, hd);
  }
  void paged_attention(Tensor o, const Tensor& q, const Tensor& kp, const Tensor& vp,
                       const Tensor& bt, const Tensor& qs, const Tensor& cl, int bs, int h, int kv,
                       int hd) override {
    cpu_->paged_attention(o, q, kp, vp, bt, qs, cl, bs, h, kv, hd);
  }
  // Context parallelism's blocks: tests/kernels/test_attention_block_emulation.cpp.
  void attention_block_fwd(Tensor o, Tensor l, const Tensor& q, const Tensor& k, const Tensor& v,
                           int nk, bool causal, const AttentionShape& s) override {
    cpu_->attention_block_fwd(o, l, q, k, v, nk, causal, s);
  }
  void attention_lse_merge(Tensor o, Tensor l, const Tensor& bo, const Tensor& bl,
                           const AttentionShape& s) override {
    cpu_->attention_lse_merge(o, l, bo, bl, s);
  }
  void attention_block_bwd(Tensor dq, Tensor dk, Tensor dv, const Tensor& g, const Tensor& o,
                           const Tensor& l, const Tensor& q, const Tensor& k, const Tensor& v,
                           int nk, bool causal, const AttentionShape& s) override {
    cpu_->attention_block_bwd(dq, dk, dv, g, o, l, q, k, v, nk, causal, s);
  }
  void scatter_rows(Tensor d, const Tensor& s, const Tensor& sl, int64_t c) override {
    k::scatter_rows(F(d), F(s), I(sl), s.rows(), d.cols(), s.cols(), c, d.rows(), nullptr);
  }
  void embedding_fwd(Tensor o, const Tensor& i, const Tensor& t, bool acc) override {
    k::embedding_fwd(F(o), I(i), F(t), i.numel(), t.cols(), t.rows(), acc, nullptr);
  }
  void embedding_bwd(Tensor d, const Tensor& o, const Tensor& i) override {
    k::embedding_bwd(F(d), F(o), I(i), i.numel(), d.cols(), d.rows(), nullptr);
  }
  void softmax_xent(Tensor l, Tensor g, const Tensor& t, float s) override {
    k::softmax_xent(F(l), F(g), I(t), g.rows(), g.cols(), s, nullptr);
  }
  void xent_row_max(Tensor m, const Tensor& l) override {
    k::xent_row_max(F(m), F(l), l.rows(), l.cols(), nullptr);
  }
  void xent_partials(Tensor s, const Tensor& l, const Tensor& m, const Tensor& t) override {
    k::xent_partials(F(s), F(l), F(m), I(t), l.rows(), l.cols(), nullptr);
  }
  void xent_finish(Tensor l, Tensor g, const Tensor& m, const Tensor& s, const Tensor& t,
                   float sc) override {
    k::xent_finish(F(l), F(g), F(m), F(s), I(t), g.rows(), g.cols(), sc, nullptr);
  }
  void adamw(Tensor p, const Tensor& g, Tensor m, Tensor v, const AdamWParams& hp) override {
    // The scalars as src/backend/cuda/cuda_adamw.cpp computes them.
    const double b1 = hp.beta1, b2 = hp.beta2, lr = hp.lr;
    const double bc1 = 1.0 - std::pow(b1, double(hp.step)),
                 bc2 = 1.0 - std::pow(b2, double(hp.step));
    k::AdamWScalars s{};
    s.decay = float(1.0 - lr * hp.weight_decay);
    s.w1 = float(1.0 - b1);
    s.beta2 = float(b2);
    s.w2 = float(1.0 - b2);
    s.neg_step = float(-(lr / bc1));
    s.bc2_sqrt = float(std::sqrt(bc2));
    s.eps = hp.eps;
    s.lerp_low = s.w1 < 0.5f;
    k::adamw(F(p), F(g), F(m), F(v), p.numel(), s, nullptr);
  }
  double reduce(k::ReduceOp op, const Tensor& x) {
    std::vector<double> ws(k::kReduceBlocks);
    double out = -1;
    k::reduce(op, F(x), x.numel(), &out, nullptr, ws.data(), nullptr);
    return out;
  }
  double sum_squares(const Tensor& x) override { return reduce(k::ReduceOp::sum_squares, x); }
  double sum(const Tensor& x) override { return reduce(k::ReduceOp::sum, x); }
  float amax(const Tensor& x) override { return float(reduce(k::ReduceOp::amax, x)); }
  void sum_squares_into(Tensor o, const Tensor& x) override {
    std::vector<double> ws(k::kReduceBlocks);
    k::reduce(k::ReduceOp::sum_squares, F(x), x.numel(), nullptr, F(o), ws.data(), nullptr);
  }
  void amax_into(Tensor o, const Tensor& x) override {
    std::vector<double> ws(k::kReduceBlocks);
    k::reduce(k::ReduceOp::amax, F(x), x.numel(), nullptr, F(o), ws.data(), nullptr);
  }
  void argmax_rows(Tensor i, const Tensor& x) override {
    k::argmax_rows(I(i), F(x), x.rows(), x.cols(), nullptr);
  }

 private:
  std::unique_ptr<Backend> cpu_;
};

TEST(KernelEmulation, EveryKernelMatchesTheCpuBackend) {
  EmulatedKernels emu;
  auto ref = make_cpu_backend(1);
  const std::vector<OpCheck> rows = check_backend(emu, *ref, 11);
  EXPECT_GE(rows.size(), 40u);
  for (const OpCheck& r : rows)
    EXPECT_TRUE(r.pass) << r.op << " [" << r.shape << "]: max_rel_err " << r.max_rel_err << " > "
                        << r.tolerance << " " << r.note;
}

// Sizes the backend check does not reach: a norm and a column sum over more rows than one row
// group, and a row longer than a block, so the group and stride loops run more than once.
TEST(KernelEmulation, MultiGroupColumnReductionsAndLongRows) {
  EmulatedKernels emu;
  auto ref = make_cpu_backend(1);
  const int64_t R = k::kRowsPerGroup * 2 + 3, C = k::kRowThreads + 45;
  std::vector<float> x(R * C), dy(R * C), w(C);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::sin(0.37f * float(i)) * 2.0f;
    dy[i] = std::cos(0.11f * float(i));
  }
  for (int64_t c = 0; c < C; ++c) w[c] = 0.5f + 0.01f * float(c);
  auto run = [&](Backend& be, std::vector<float>& dx, std::vector<float>& dw,
                 std::vector<float>& bias) {
    std::vector<float> out(R * C), rstd(R);
    Tensor X(x.data(), DType::f32, {R, C}), DY(dy.data(), DType::f32, {R, C}),
        W(w.data(), DType::f32, {C});
    be.rmsnorm_fwd(Tensor(out.data(), DType::f32, {R, C}), Tensor(rstd.data(), DType::f32, {R}), X,
                   W, 1e-6f);
    be.rmsnorm_bwd(Tensor(dx.data(), DType::f32, {R, C}), Tensor(dw.data(), DType::f32, {C}), DY, X,
                   W, Tensor(rstd.data(), DType::f32, {R}), false);
    be.sum_rows(Tensor(bias.data(), DType::f32, {C}), DY, true);
  };
  std::vector<float> dx1(R * C), dw1(C, 1.0f), b1(C, 2.0f), dx2(R * C), dw2(C, 1.0f), b2(C, 2.0f);
  run(emu, dx1, dw1, b1);
  run(*ref, dx2, dw2, b2);
  for (int64_t i = 0; i < R * C; ++i)
    ASSERT_NEAR(dx1[i], dx2[i], 1e-5 * (std::fabs(dx2[i]) + 0.1)) << i;
  for (int64_t c = 0; c < C; ++c) {
    ASSERT_NEAR(dw1[c], dw2[c], 1e-5 * (std::fabs(dw2[c]) + 0.1)) << c;
    ASSERT_NEAR(b1[c], b2[c], 1e-5 * (std::fabs(b2[c]) + 0.1)) << c;
  }
}

}  // namespace
