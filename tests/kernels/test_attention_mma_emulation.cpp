// The tensor-core attention kernels (kernels/attention_mma.cu), run on the CPU through
// tests/device/cuda_emulation.h with its emulated mma.sync (tests/device/emulated_mma.h),
// against the CPU backend under `precision.compute: bf16` (gemm dtype bf16, whose attention
// rounds the same operands to bf16: backend.h). First the emulated mma itself: a 16x8x16
// product from fragments laid out as the PTX ISA documents them, against a naive product, and
// a loud failure when fewer than 32 lanes take part. Then forward (out, lse) and backward
// (dq, dk, dv into a poisoned dqkv) over shapes that are not multiples of the 64-row tiles,
// GQA, and head_dims 64 and 128 (the two instantiations) and 16 and 80 (smaller dims in each).
#define LLMRUN_ATTENTION_EMULATION 1
#include "../device/cuda_emulation.h"
// (The standard headers the kernels include come first, so that inside the namespace below
// their include guards make them no-ops.)
#include <math.h>
#include <string.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

// The kernels land in namespace mma_emu: a CUDA build has the real launchers under the same
// names in namespace llmrun::kernels.
namespace mma_emu {
// One block runs at a time, so all emulated kernels share one dynamic shared-memory array.
namespace llmrun::kernels::attention_detail {
namespace {
float smem[llmrun_emu::kSmemFloats];
}
}  // namespace llmrun::kernels::attention_detail
#include "../../kernels/attention_mma.cu"
}  // namespace mma_emu

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../unit/attention_test_util.h"
#include "backend/backend.h"

using namespace llmrun;
using namespace llmrun::attention_test;

namespace {

uint16_t bf16_of(float x) {  // x must be a bf16 value
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return uint16_t(u >> 16);
}
float bf16_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One warp's mma: A [16][16], B [16][8] (bf16 values), C [16][8] in; D [16][8] out. Each lane
// gathers its fragments by the PTX ISA's formulas (9.7.14.5.8), written out here once more.
struct MmaCase {
  float A[16][16], B[16][8], C[16][8], D[16][8];
};
MmaCase* g_cases = nullptr;  // one per warp of the launch

void mma_case_kernel() {
  const int lane = int(threadIdx.x) % 32, group = lane >> 2, tig = lane % 4;
  MmaCase& c = g_cases[threadIdx.x / 32];
  uint32_t a[4], b[2];
  float d[4];
  for (int r = 0; r < 4; ++r) {  // a_i for i = 2r, 2r + 1
    uint32_t reg = 0;
    for (int e = 0; e < 2; ++e) {
      const int i = 2 * r + e;
      const int row = (i < 2 || (i >= 4 && i < 6)) ? group : group + 8;
      const int col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      reg |= uint32_t(bf16_of(c.A[row][col])) << (16 * e);
    }
    a[r] = reg;
  }
  for (int r = 0; r < 2; ++r) {
    uint32_t reg = 0;
    for (int e = 0; e < 2; ++e) {
      const int i = 2 * r + e;
      const int row = tig * 2 + (i & 1) + (i >= 2 ? 8 : 0), col = group;
      reg |= uint32_t(bf16_of(c.B[row][col])) << (16 * e);
    }
    b[r] = reg;
  }
  for (int i = 0; i < 4; ++i) d[i] = c.C[group + (i >= 2 ? 8 : 0)][tig * 2 + (i & 1)];
  llmrun_emu::mma_m16n8k16_bf16(d, a, b);
  for (int i = 0; i < 4; ++i) c.D[group + (i >= 2 ? 8 : 0)][tig * 2 + (i & 1)] = d[i];
}

TEST(EmulatedMma, M16n8k16MatchesANaiveProductWithThePtxFragmentLayout) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  // Two warps in one block, each with its own operands: each computes its own product from
  // its own lanes' registers.
  MmaCase cases[2]{};
  for (MmaCase& c : cases) {
    for (auto& row : c.A)
      for (float& x : row) x = bf16_round(nd(rng));
    for (auto& row : c.B)
      for (float& x : row) x = bf16_round(nd(rng));
    for (auto& row : c.C)
      for (float& x : row) x = nd(rng);
    for (auto& row : c.D)
      for (float& x : row) x = std::numeric_limits<float>::quiet_NaN();
  }
  g_cases = cases;
  llmrun_emu::launch(mma_case_kernel, dim3(1), 64, 0, nullptr)();
  for (const MmaCase& c : cases)
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 8; ++j) {
        double want = c.C[i][j];
        for (int k = 0; k < 16; ++k) want += double(c.A[i][k]) * c.B[k][j];
        // fp32 accumulation of exact products: a few ulps of the largest partial sum.
        EXPECT_NEAR(c.D[i][j], want, 1e-5 * 16) << "D[" << i << "][" << j << "]";
      }
}

TEST(EmulatedMmaDeathTest, FewerThan32LanesFailLoudly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  MmaCase c{};
  g_cases = &c;
  EXPECT_DEATH(llmrun_emu::launch(mma_case_kernel, dim3(1), 16, 0, nullptr)(),
               "fewer than 32 live lanes");
}

struct Shape {
  int batch, seq, heads, kv_heads, head_dim;
};

// Errors relative to the tensor's scale (max |want|): the largest, and the root mean square.
// The kernel and the CPU round the same operands and differ by fp32 summation order, except
// for the rare probability (or dS) element within an fp32 ulp or two of a bf16 rounding
// boundary, which the two exps (host expf, the CPU's fast_exp; a GPU's expf likewise) can
// round to neighbouring bf16 values: one term of one sum moves by 2^-8 relative. Such a flip
// shows in the max (up to ~4e-3 when the row's weight sits on few keys) but not in the RMS; an
// operand the kernel forgets to round moves every element, the RMS too.
struct Errors {
  double max, rms;
};
Errors scaled_errors(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, sq = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(double(got[i]) - want[i]);
    err = std::isnan(got[i]) ? INFINITY : std::max(err, e);
    sq += e * e;
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return {err / scale, std::sqrt(sq / double(got.size())) / scale};
}

class AttentionMmaEmulation : public ::testing::TestWithParam<Shape> {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend(2);
  std::mt19937 rng{11};
};

TEST_P(AttentionMmaEmulation, ForwardAndBackwardMatchTheCpuBackendInBf16) {
  const Shape p = GetParam();
  const AttentionShape s{p.batch, p.seq, p.heads, p.kv_heads, p.head_dim};
  const int64_t rows = int64_t(p.batch) * p.seq, cols = s.qkv_cols(),
                hd = int64_t(p.heads) * p.head_dim;
  // Scores of order 1-3: softmax rows neither flat nor one-hot.
  std::vector<float> qkv = randn(size_t(rows * cols), rng, 1.5f),
                     dout = randn(size_t(rows * hd), rng);
  auto lse_tensor = [&](std::vector<float>& v) {
    return Tensor(v.data(), DType::f32, {int64_t(v.size())});
  };
  // The references: the CPU under bf16 compute, and under fp32 (to show bf16 is being tested).
  std::vector<float> out_cpu(size_t(rows * hd)), lse_cpu(size_t(p.batch) * p.heads * p.seq);
  std::vector<float> out_f32(out_cpu.size()), lse_f32(lse_cpu.size());
  be->attention_fwd(t2(out_f32, rows, hd), lse_tensor(lse_f32), t2(qkv, rows, cols), s);
  be->set_gemm_dtype(DType::bf16);
  be->attention_fwd(t2(out_cpu, rows, hd), lse_tensor(lse_cpu), t2(qkv, rows, cols), s);

  std::vector<float> out = poisoned(out_cpu.size()), lse = poisoned(lse_cpu.size());
  mma_emu::llmrun::kernels::attention_fwd_bf16(out.data(), lse.data(), qkv.data(), p.batch, p.seq,
                                               p.heads, p.kv_heads, p.head_dim, nullptr);
  const Errors out_err = scaled_errors(out, out_cpu), lse_err = scaled_errors(lse, lse_cpu);
  const Errors out_bf16_vs_f32 = scaled_errors(out_cpu, out_f32);
  std::printf("  out err max %.2e rms %.2e (bf16 vs fp32 reference: rms %.2e), lse err %.2e\n",
              out_err.max, out_err.rms, out_bf16_vs_f32.rms, lse_err.max);
  EXPECT_LT(out_err.max, 5e-3);
  EXPECT_LT(out_err.rms, 1e-4);
  EXPECT_LT(lse_err.max, 1e-5);
  if (p.seq > 1) {  // bf16 rounding is what is being compared
    EXPECT_GT(out_bf16_vs_f32.rms, 10 * out_err.rms) << "the bf16 reference is not bf16";
  }

  std::vector<float> dqkv_cpu(qkv.size()), dqkv_f32(qkv.size());
  be->attention_bwd(t2(dqkv_cpu, rows, cols), t2(dout, rows, hd), t2(qkv, rows, cols),
                    t2(out_cpu, rows, hd), lse_tensor(lse_cpu), s);
  be->set_gemm_dtype(DType::f32);
  be->attention_bwd(t2(dqkv_f32, rows, cols), t2(dout, rows, hd), t2(qkv, rows, cols),
                    t2(out_cpu, rows, hd), lse_tensor(lse_cpu), s);
  const size_t ws = mma_emu::llmrun::kernels::attention_bwd_bf16_workspace_bytes(
      p.batch, p.seq, p.heads, p.kv_heads, p.head_dim);
  std::vector<float> workspace = poisoned(ws / sizeof(float)), dqkv = poisoned(qkv.size());
  mma_emu::llmrun::kernels::attention_bwd_bf16(dqkv.data(), dout.data(), qkv.data(), out_cpu.data(),
                                               lse_cpu.data(), p.batch, p.seq, p.heads, p.kv_heads,
                                               p.head_dim, workspace.data(), nullptr);
  // dq, dk, dv separately: each has its own scale.
  const char* names[3] = {"dq", "dk", "dv"};
  const int64_t begin[4] = {0, int64_t(p.heads) * p.head_dim,
                            int64_t(p.heads + p.kv_heads) * p.head_dim, cols};
  for (int part = 0; part < 3; ++part) {
    std::vector<float> got, want, f32;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = begin[part]; c < begin[part + 1]; ++c) {
        got.push_back(dqkv[size_t(r * cols + c)]);
        want.push_back(dqkv_cpu[size_t(r * cols + c)]);
        f32.push_back(dqkv_f32[size_t(r * cols + c)]);
      }
    const Errors err = scaled_errors(got, want), bf16_vs_f32 = scaled_errors(want, f32);
    std::printf("  %s err max %.2e rms %.2e (bf16 vs fp32 reference: rms %.2e)\n", names[part],
                err.max, err.rms, bf16_vs_f32.rms);
    EXPECT_LT(err.max, 5e-3) << names[part];
    EXPECT_LT(err.rms, 1e-4) << names[part];
    if (p.seq > 1) {
      EXPECT_GT(bf16_vs_f32.rms, 10 * err.rms) << names[part] << ": the reference is not bf16";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionMmaEmulation,
                         ::testing::Values(Shape{2, 1, 4, 2, 64}, Shape{2, 17, 4, 1, 128},
                                           Shape{2, 70, 4, 2, 64}, Shape{1, 130, 4, 1, 128},
                                           Shape{2, 130, 2, 2, 64}, Shape{1, 70, 2, 1, 80},
                                           Shape{1, 37, 3, 3, 16}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           const Shape& p = i.param;
                           char name[64];
                           std::snprintf(name, sizeof name, "b%d_seq%d_h%d_kv%d_d%d", p.batch,
                                         p.seq, p.heads, p.kv_heads, p.head_dim);
                           return std::string(name);
                         });

}  // namespace
