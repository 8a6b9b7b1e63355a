// The context-parallel block kernels (kernels/attention_block.cu), run on the CPU through
// tests/device/cuda_emulation.h, against the CPU backend's ops of the same names: the block
// forward (causal diagonal and full blocks) into poisoned outputs, the merge with rows that
// have no keys yet on either side, and the backward, which must ADD to gradients that already
// hold other blocks' shares. Shapes are not multiples of the 32-row tiles; head_dims cover
// every instantiated bucket (1, 2, 4 and 8 dims per lane); GQA and full blocks with more and
// fewer keys than queries.
#define LLMRUN_ATTENTION_EMULATION 1
#include "../device/cuda_emulation.h"
// (The standard headers the kernels include come first, so that inside the namespace below
// their include guards make them no-ops.)
#include <math.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

// The kernels land in namespace block_emu: a CUDA build has the real launchers under the same
// names in namespace llmrun::kernels.
namespace block_emu {
// One block runs at a time, so all emulated kernels share one dynamic shared-memory array.
namespace llmrun::kernels::attention_detail {
namespace {
float smem[llmrun_emu::kSmemFloats];
}
}  // namespace llmrun::kernels::attention_detail
#include "../../kernels/attention_block.cu"
}  // namespace block_emu

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../unit/attention_test_util.h"
#include "backend/backend.h"

using namespace llmrun;
using namespace llmrun::attention_test;
namespace emu = block_emu::llmrun::kernels;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Shape {
  int batch, seq, nk, heads, kv_heads, head_dim;
  bool causal;
};
std::string shape_name(const Shape& p) {
  return std::string(p.causal ? "causal" : "full") + "_b" + std::to_string(p.batch) + "_seq" +
         std::to_string(p.seq) + "_nk" + std::to_string(p.nk) + "_h" + std::to_string(p.heads) +
         "_kv" + std::to_string(p.kv_heads) + "_d" + std::to_string(p.head_dim);
}
// gtest would print the struct's bytes, padding included: test names would vary by build.
void PrintTo(const Shape& p, std::ostream* os) { *os << shape_name(p); }

class AttentionBlockEmulation : public ::testing::TestWithParam<Shape> {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend(2);
  std::mt19937 rng{4242};
};

TEST_P(AttentionBlockEmulation, ForwardMergeAndBackwardMatchTheCpuBackend) {
  const Shape p = GetParam();
  const AttentionShape s{p.batch, p.seq, p.heads, p.kv_heads, p.head_dim};
  const int64_t qrows = int64_t(p.batch) * p.seq, krows = int64_t(p.batch) * p.nk;
  const int64_t hd = int64_t(p.heads) * p.head_dim, kvd = int64_t(p.kv_heads) * p.head_dim;
  const size_t lse_n = size_t(p.batch) * p.heads * p.seq;
  std::vector<float> q = randn(size_t(qrows * hd), rng), k = randn(size_t(krows * kvd), rng),
                     v = randn(size_t(krows * kvd), rng), dout = randn(q.size(), rng);

  // Forward of the block into poisoned outputs.
  std::vector<float> bout_cpu(q.size()), blse_cpu(lse_n);
  be->attention_block_fwd(t2(bout_cpu, qrows, hd), t1(blse_cpu), t2(q, qrows, hd),
                          t2(k, krows, kvd), t2(v, krows, kvd), p.nk, p.causal, s);
  std::vector<float> bout = poisoned(q.size()), blse = poisoned(lse_n);
  emu::attention_block_fwd(bout.data(), blse.data(), q.data(), k.data(), v.data(), p.batch, p.seq,
                           p.nk, p.heads, p.kv_heads, p.head_dim, p.causal, nullptr);
  expect_close(bout, bout_cpu, 1e-5, 1e-6, "block out");
  expect_close(blse, blse_cpu, 1e-5, 1e-6, "block lse");

  // Merge into a running result: some rows have no keys yet (lse -inf, out 0), some blocks
  // rows none (lse -inf: their out must not leak in), some neither.
  std::vector<float> out = randn(q.size(), rng), lse = randn(lse_n, rng, 2.0f);
  for (size_t li = 0; li < lse_n; ++li) {
    if (li % 4 == 0 || li % 4 == 1) {
      lse[li] = -kInf;
      const size_t b = li / (size_t(p.heads) * p.seq), h = li / size_t(p.seq) % size_t(p.heads),
                   t = li % size_t(p.seq);
      for (int c = 0; c < p.head_dim; ++c)
        out[(b * size_t(p.seq) + t) * size_t(hd) + h * size_t(p.head_dim) + size_t(c)] = 0.0f;
    }
    if (li % 4 == 0 || li % 4 == 2) blse_cpu[li] = -kInf;
  }
  std::vector<float> out_cpu = out, lse_cpu = lse;
  be->attention_lse_merge(t2(out_cpu, qrows, hd), t1(lse_cpu), t2(bout_cpu, qrows, hd),
                          t1(blse_cpu), s);
  emu::attention_lse_merge(out.data(), lse.data(), bout_cpu.data(), blse_cpu.data(), p.batch, p.seq,
                           p.heads, p.head_dim, nullptr);
  expect_close(out, out_cpu, 1e-6, 1e-7, "merged out");
  expect_close(lse, lse_cpu, 1e-6, 1e-7, "merged lse");

  // Backward from a final (out, lse) that is not this block's alone, adding to gradients that
  // already hold other shares.
  std::vector<float> fin = randn(q.size(), rng), fin_lse = blse;
  std::uniform_real_distribution<float> more(0.0f, 1.0f);
  for (float& x : fin_lse) x += more(rng);
  std::vector<float> dq = randn(q.size(), rng), dk = randn(k.size(), rng),
                     dv = randn(v.size(), rng);
  std::vector<float> dq_cpu = dq, dk_cpu = dk, dv_cpu = dv;
  be->attention_block_bwd(t2(dq_cpu, qrows, hd), t2(dk_cpu, krows, kvd), t2(dv_cpu, krows, kvd),
                          t2(dout, qrows, hd), t2(fin, qrows, hd), t1(fin_lse), t2(q, qrows, hd),
                          t2(k, krows, kvd), t2(v, krows, kvd), p.nk, p.causal, s);
  std::vector<float> workspace =
      poisoned(emu::attention_block_bwd_workspace_bytes(p.batch, p.seq, p.heads) / sizeof(float));
  emu::attention_block_bwd(dq.data(), dk.data(), dv.data(), dout.data(), fin.data(), fin_lse.data(),
                           q.data(), k.data(), v.data(), p.batch, p.seq, p.nk, p.heads, p.kv_heads,
                           p.head_dim, p.causal, workspace.data(), nullptr);
  // Sums over up to seq * group terms in another order than the CPU's 64-row tiles.
  expect_close(dq, dq_cpu, 1e-4, 1e-5, "dq");
  expect_close(dk, dk_cpu, 1e-4, 1e-5, "dk");
  expect_close(dv, dv_cpu, 1e-4, 1e-5, "dv");
}

// Causal GQA over 2 tiles, 1 dim per lane; a full block with more keys than queries, 2 dims per
// lane (d 40); a full block with fewer keys (one short tile), 4 x 32 dims (d 80); a causal
// multi-head block shorter than a tile with 8 x 32 dims (d 200).
INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionBlockEmulation,
    ::testing::Values(Shape{2, 37, 37, 4, 2, 16, true}, Shape{1, 21, 70, 2, 1, 40, false},
                      Shape{2, 40, 9, 2, 2, 80, false}, Shape{1, 5, 5, 3, 3, 200, true}),
    [](const ::testing::TestParamInfo<Shape>& i) { return shape_name(i.param); });

// A ring of three chunks on one "rank" of the emulation: every query chunk merges the blocks of
// all chunks at or before it (its own causal block first, as a ring delivers them), then the
// backward of every block; the result must be the CPU backend's one-chunk attention_fwd/bwd.
TEST(AttentionBlockEmulationRing, BlocksComposeToTheFullCausalAttention) {
  auto be = make_cpu_backend(2);
  std::mt19937 rng(77);
  const int n = 3, C = 23, heads = 4, kv = 2, d = 16, S = n * C;
  const AttentionShape full{1, S, heads, kv, d};
  const int64_t cols = full.qkv_cols(), hd = heads * d, kvd = kv * d;
  std::vector<float> qkv = randn(size_t(S * cols), rng), dout = randn(size_t(S * hd), rng);
  std::vector<float> want_out(size_t(S * hd)), want_lse(size_t(heads * S)), want_dqkv(qkv.size());
  be->attention_fwd(t2(want_out, S, hd), t1(want_lse), t2(qkv, S, cols), full);
  be->attention_bwd(t2(want_dqkv, S, cols), t2(dout, S, hd), t2(qkv, S, cols), t2(want_out, S, hd),
                    t1(want_lse), full);
  auto part = [&](const std::vector<float>& x, int64_t width, int chunk, int64_t from, int64_t w) {
    std::vector<float> y(size_t(C * w));
    for (int r = 0; r < C; ++r)
      for (int64_t c = 0; c < w; ++c)
        y[size_t(r * w + c)] = x[size_t((chunk * C + r) * width + from + c)];
    return y;
  };
  std::vector<std::vector<float>> q(n), k(n), v(n), g(n), o(n), l(n), dq(n), dk(n), dv(n);
  for (int i = 0; i < n; ++i) {
    q[size_t(i)] = part(qkv, cols, i, 0, hd);
    k[size_t(i)] = part(qkv, cols, i, hd, kvd);
    v[size_t(i)] = part(qkv, cols, i, hd + kvd, kvd);
    g[size_t(i)] = part(dout, hd, i, 0, hd);
    o[size_t(i)].assign(size_t(C * hd), 0.0f);
    l[size_t(i)].assign(size_t(heads * C), -kInf);
    dq[size_t(i)].assign(size_t(C * hd), 0.0f);
    dk[size_t(i)].assign(size_t(C * kvd), 0.0f);
    dv[size_t(i)].assign(size_t(C * kvd), 0.0f);
  }
  std::vector<float> bo = poisoned(size_t(C * hd)), bl = poisoned(size_t(heads * C));
  std::vector<float> ws =
      poisoned(emu::attention_block_bwd_workspace_bytes(1, C, heads) / sizeof(float));
  for (int i = 0; i < n; ++i)
    for (int step = 0; step <= i; ++step) {
      const int j = i - step;
      emu::attention_block_fwd(bo.data(), bl.data(), q[size_t(i)].data(), k[size_t(j)].data(),
                               v[size_t(j)].data(), 1, C, C, heads, kv, d, j == i, nullptr);
      emu::attention_lse_merge(o[size_t(i)].data(), l[size_t(i)].data(), bo.data(), bl.data(), 1, C,
                               heads, d, nullptr);
    }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j)
      emu::attention_block_bwd(dq[size_t(i)].data(), dk[size_t(j)].data(), dv[size_t(j)].data(),
                               g[size_t(i)].data(), o[size_t(i)].data(), l[size_t(i)].data(),
                               q[size_t(i)].data(), k[size_t(j)].data(), v[size_t(j)].data(), 1, C,
                               C, heads, kv, d, j == i, ws.data(), nullptr);
  for (int i = 0; i < n; ++i) {
    expect_close(o[size_t(i)], part(want_out, hd, i, 0, hd), 1e-5, 2e-6, "merged out");
    std::vector<float> lse_i(size_t(heads * C));
    for (int h = 0; h < heads; ++h)
      for (int t = 0; t < C; ++t) lse_i[size_t(h * C + t)] = want_lse[size_t(h * S + i * C + t)];
    expect_close(l[size_t(i)], lse_i, 1e-5, 2e-6, "merged lse");
    expect_close(dq[size_t(i)], part(want_dqkv, cols, i, 0, hd), 1e-4, 2e-5, "dq");
    expect_close(dk[size_t(i)], part(want_dqkv, cols, i, hd, kvd), 1e-4, 2e-5, "dk");
    expect_close(dv[size_t(i)], part(want_dqkv, cols, i, hd + kvd, kvd), 1e-4, 2e-5, "dv");
  }
}

}  // namespace
