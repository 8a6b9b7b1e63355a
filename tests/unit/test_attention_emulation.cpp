// The CUDA attention kernels (kernels/attention_*.cu), run on the CPU through
// tests/device/cuda_emulation.h, against the CPU backend's ops of the same names: the
// forward with its log-sum-exp, the backward (dq, dk, dv into a poisoned dqkv), the cached
// attention on both of its paths, and paged attention with batch-invariant rows. Shapes are
// not multiples of the 32-row tiles; head_dims cover every instantiated bucket.
#define LLMRUN_ATTENTION_EMULATION 1
#include "../device/cuda_emulation.h"
// (The standard headers the kernels include come first, so that inside the namespace below
// their include guards make them no-ops.)
#include <cmath>
#include <cstddef>
#include <cstdint>

// The kernels land in namespace attn_emu: a CUDA build links the real ones, with the same
// names in namespace llmrun::kernels, into this binary too.
namespace attn_emu {
// One block runs at a time, so all emulated kernels share one dynamic shared-memory array.
namespace llmrun::kernels::attention_detail {
namespace {
float smem[llmrun_emu::kSmemFloats];
}
}  // namespace llmrun::kernels::attention_detail
#include "../../kernels/attention_bwd.cu"
#include "../../kernels/attention_decode.cu"
#include "../../kernels/attention_fwd.cu"
}  // namespace attn_emu

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "backend/backend.h"

using namespace llmrun;
using namespace llmrun::attention_test;

namespace {

struct Shape {
  int batch, seq, heads, kv_heads, head_dim;
};

class AttentionEmulation : public ::testing::TestWithParam<Shape> {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend(2);
  std::mt19937 rng{99};
};

TEST_P(AttentionEmulation, ForwardAndBackwardMatchTheCpuBackend) {
  const Shape p = GetParam();
  const AttentionShape s{p.batch, p.seq, p.heads, p.kv_heads, p.head_dim};
  const int64_t rows = int64_t(p.batch) * p.seq, cols = s.qkv_cols(),
                hd = int64_t(p.heads) * p.head_dim;
  std::vector<float> qkv = randn(size_t(rows * cols), rng), dout = randn(size_t(rows * hd), rng);
  std::vector<float> out_cpu(size_t(rows * hd)), lse_cpu(size_t(p.batch) * p.heads * p.seq);
  be->attention_fwd(t2(out_cpu, rows, hd),
                    Tensor(lse_cpu.data(), DType::f32, {int64_t(lse_cpu.size())}),
                    t2(qkv, rows, cols), s);
  std::vector<float> out = poisoned(out_cpu.size()), lse = poisoned(lse_cpu.size());
  attn_emu::llmrun::kernels::attention_fwd(out.data(), lse.data(), qkv.data(), p.batch, p.seq,
                                           p.heads, p.kv_heads, p.head_dim, nullptr);
  // atol 2e-6: the CPU reference sums with OpenBLAS's sgemm, whose kernel depends on the CPU
  // (under OPENBLAS_CORETYPE=Haswell one element of d80 is 1.06e-6 away).
  expect_close(out, out_cpu, 1e-5, 2e-6, "out");
  expect_close(lse, lse_cpu, 1e-5, 1e-6, "lse");

  std::vector<float> dqkv_cpu(qkv.size());
  be->attention_bwd(t2(dqkv_cpu, rows, cols), t2(dout, rows, hd), t2(qkv, rows, cols),
                    t2(out_cpu, rows, hd),
                    Tensor(lse_cpu.data(), DType::f32, {int64_t(lse_cpu.size())}), s);
  const size_t ws = attn_emu::llmrun::kernels::attention_bwd_workspace_bytes(
      p.batch, p.seq, p.heads, p.kv_heads, p.head_dim);
  std::vector<float> workspace = poisoned(ws / sizeof(float)), dqkv = poisoned(qkv.size());
  attn_emu::llmrun::kernels::attention_bwd(dqkv.data(), dout.data(), qkv.data(), out_cpu.data(),
                                           lse_cpu.data(), p.batch, p.seq, p.heads, p.kv_heads,
                                           p.head_dim, workspace.data(), nullptr);
  // Sums over up to seq * group terms in another order than the CPU's tiles.
  expect_close(dqkv, dqkv_cpu, 1e-4, 1e-5, "dqkv");
}

// GQA over 2 tiles with 1 dim per lane; 3 tiles with 80 of 4x32 dims; MHA shorter than a
// tile; 200 of 8x32 dims with a one-row second tile.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionEmulation,
                         ::testing::Values(Shape{2, 37, 2, 1, 16}, Shape{1, 70, 2, 1, 80},
                                           Shape{1, 5, 3, 3, 64}, Shape{1, 33, 2, 1, 200}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           const Shape& p = i.param;
                           char name[64];
                           std::snprintf(name, sizeof name, "b%d_seq%d_h%d_kv%d_d%d", p.batch,
                                         p.seq, p.heads, p.kv_heads, p.head_dim);
                           return std::string(name);
                         });

TEST(AttentionEmulationCached, BothPathsMatchTheCpuBackend) {
  auto be = make_cpu_backend(2);
  std::mt19937 rng(5);
  const int heads = 4, kv_heads = 2, d = 48, start = 9;
  const int64_t hd = heads * d, kvd = kv_heads * d;
  for (int n_q : {1, 3, 20}) {  // decode kernel below kCachedTiledMinRows, tiled forward above
    const int64_t ctx = start + n_q + 4;  // rows past start + n_q are never read
    std::vector<float> q = randn(size_t(n_q * hd), rng), k = randn(size_t(ctx * kvd), rng),
                       v = randn(size_t(ctx * kvd), rng), want(size_t(n_q * hd));
    be->attention_cached(t2(want, n_q, hd), t2(q, n_q, hd), t2(k, ctx, kvd), t2(v, ctx, kvd), start,
                         heads, kv_heads, d);
    std::vector<float> got = poisoned(want.size());
    attn_emu::llmrun::kernels::attention_cached(got.data(), q.data(), k.data(), v.data(), n_q,
                                                start, heads, kv_heads, d, nullptr);
    expect_close(got, want, 1e-5, 1e-6, "attention_cached n_q=" + std::to_string(n_q));
  }
}

TEST(AttentionEmulationPaged, MatchesTheCpuBackendAndRowsDoNotDependOnTheBatch) {
  auto be = make_cpu_backend(2);
  std::mt19937 rng(17);
  const int heads = 4, kv_heads = 1, d = 24, block = 8, pool_blocks = 16, max_blocks = 6;
  const int64_t hd = heads * d, kvd = kv_heads * d;
  // A decode row, a prefill chunk, a sequence with nothing new, a chunk deep into its context.
  const std::vector<int> n_new = {1, 5, 0, 2}, context = {13, 5, 4, 40};
  const std::vector<int> tables = {3,  7, 0,  0, 0,  0,   //
                                   12, 0, 0,  0, 0,  0,   //
                                   1,  0, 0,  0, 0,  0,   //
                                   9,  2, 14, 5, 11, 0};  // 40 keys in 5 blocks, out of order
  std::vector<int> starts = {0};
  for (int n : n_new) starts.push_back(starts.back() + n);
  const int total = starts.back();
  std::vector<float> q = randn(size_t(total * hd), rng),
                     kp = randn(size_t(pool_blocks * block * kvd), rng),
                     vp = randn(size_t(pool_blocks * block * kvd), rng), want(size_t(total * hd));
  // The CPU op takes i32 tensors.
  std::vector<int32_t> bt_i(tables.begin(), tables.end()), qs_i(starts.begin(), starts.end()),
      cl_i(context.begin(), context.end());
  be->paged_attention(t2(want, total, hd), t2(q, total, hd), t2(kp, pool_blocks * block, kvd),
                      t2(vp, pool_blocks * block, kvd),
                      Tensor(bt_i.data(), DType::i32, {4, max_blocks}),
                      Tensor(qs_i.data(), DType::i32, {5}), Tensor(cl_i.data(), DType::i32, {4}),
                      block, heads, kv_heads, d);
  std::vector<float> got = poisoned(want.size());
  attn_emu::llmrun::kernels::paged_attention(got.data(), q.data(), kp.data(), vp.data(),
                                             bt_i.data(), qs_i.data(), cl_i.data(), 4, max_blocks,
                                             total, 5, block, heads, kv_heads, d, nullptr);
  expect_close(got, want, 1e-5, 1e-6, "paged_attention");

  // Sequence 3 alone: its rows are bitwise the rows it got inside the batch.
  const int first = starts[3];
  std::vector<int32_t> alone_starts = {0, 2}, alone_ctx = {40};
  std::vector<float> alone = poisoned(size_t(2 * hd));
  attn_emu::llmrun::kernels::paged_attention(alone.data(), q.data() + first * hd, kp.data(),
                                             vp.data(), bt_i.data() + 3 * max_blocks,
                                             alone_starts.data(), alone_ctx.data(), 1, max_blocks,
                                             2, 2, block, heads, kv_heads, d, nullptr);
  for (int64_t i = 0; i < 2 * hd; ++i)
    ASSERT_EQ(alone[size_t(i)], got[size_t(first * hd + i)])
        << "element " << i << " differs from the batched run";
}

}  // namespace
