// Typed KV pools (--kv-dtype): rows written by kv_store_rows come back within the format's
// block error, and kv_paged_attention over f16/bf16/q8_0 pools equals the CPU backend's fp32
// paged attention over the same rows dequantized (so the only difference a reduced type makes
// is the rounding of the stored values), with blocks at shuffled pool positions and poisoned
// spare blocks. Names, sizes and refusals too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend_factory.h"
#include "quant/kv_cache_dtype.h"
#include "util/error.h"

using namespace llmrun;
using namespace llmrun::quant;

namespace {

struct Case {
  int context, n_new;
};

void check_type(QType type, int heads, int kv_heads, int d, int block_size,
                const std::vector<Case>& cases) {
  SCOPED_TRACE(kv_dtype_name(type));
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int kvd = kv_heads * d, hd = heads * d, S = int(cases.size());
  int total_blocks = 0, max_blocks = 1, tokens = 0;
  for (const Case& c : cases) {
    const int nb = (c.context + block_size - 1) / block_size;
    total_blocks += nb;
    max_blocks = std::max(max_blocks, nb);
    tokens += c.n_new;
  }
  const int pool_blocks = total_blocks + 2;
  const int64_t pool_rows = int64_t(pool_blocks) * block_size;
  std::vector<int> order(static_cast<size_t>(pool_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);

  // Every cached row of every sequence as the model's qkv rows would carry it: [q | k | v].
  const int qkv_cols = hd + 2 * kvd;
  std::vector<float> qkv;
  std::vector<int32_t> slots, tables(size_t(S) * max_blocks, 0), starts(size_t(S) + 1, 0),
      lens(static_cast<size_t>(S));
  int next = 0;
  for (int s = 0; s < S; ++s) {
    lens[size_t(s)] = cases[size_t(s)].context;
    starts[size_t(s) + 1] = starts[size_t(s)] + cases[size_t(s)].n_new;
    for (int b = 0; b * block_size < cases[size_t(s)].context; ++b)
      tables[size_t(s) * max_blocks + b] = order[size_t(next++)];
    for (int p = 0; p < cases[size_t(s)].context; ++p) {
      for (int c = 0; c < qkv_cols; ++c) qkv.push_back(nd(rng) * (c % 7 == 0 ? 4.0f : 1.0f));
      slots.push_back(tables[size_t(s) * max_blocks + p / block_size] * block_size +
                      p % block_size);
    }
  }
  const int64_t rows = int64_t(slots.size());
  const size_t rb = row_bytes(type, kvd);
  // Poison: a spare block read as keys or values would show in the output.
  std::vector<uint8_t> kp(size_t(pool_rows) * rb), vp(kp.size());
  std::vector<float> poison(size_t(kvd), 900.0f);
  for (int64_t r = 0; r < pool_rows; ++r) {
    quantize_row(type, poison.data(), kp.data() + r * rb, kvd);
    quantize_row(type, poison.data(), vp.data() + r * rb, kvd);
  }
  const KvPoolView kview{type, kp.data(), pool_rows, kvd}, vview{type, vp.data(), pool_rows, kvd};
  const Tensor src(qkv.data(), DType::f32, {rows, qkv_cols});
  const Tensor slot_t(slots.data(), DType::i32, {rows});
  kv_store_rows(kview, src, slot_t, hd);
  kv_store_rows(vview, src, slot_t, hd + kvd);

  // The fp32 pools the reference runs on: the typed rows dequantized, each within the format's
  // block error of the value written.
  std::vector<float> kf(size_t(pool_rows) * kvd), vf(kf.size());
  for (int64_t r = 0; r < pool_rows; ++r) {
    dequantize_row(type, kp.data() + r * rb, kf.data() + r * kvd, kvd);
    dequantize_row(type, vp.data() + r * rb, vf.data() + r * kvd, kvd);
  }
  const int bv = int(block_values(type));
  for (int64_t r = 0; r < rows; ++r)
    for (int part = 0; part < 2; ++part) {
      const float* want = qkv.data() + r * qkv_cols + hd + part * kvd;
      const float* got = (part ? vf.data() : kf.data()) + int64_t(slots[size_t(r)]) * kvd;
      for (int b0 = 0; b0 < kvd; b0 += bv) {
        double amax = 0;
        for (int c = b0; c < b0 + bv; ++c) amax = std::max(amax, double(std::fabs(want[c])));
        const double tol = max_block_error(type, amax);
        for (int c = b0; c < b0 + bv; ++c) ASSERT_LE(std::fabs(got[c] - want[c]), tol);
      }
    }

  // The queries: each sequence's new rows are its last n_new cached positions.
  std::vector<float> q;
  int64_t at = 0;
  for (int s = 0; s < S; ++s) {
    const Case& c = cases[size_t(s)];
    for (int p = c.context - c.n_new; p < c.context; ++p)
      q.insert(q.end(), qkv.begin() + (at + p) * qkv_cols, qkv.begin() + (at + p) * qkv_cols + hd);
    at += c.context;
  }
  std::vector<float> out(size_t(tokens) * hd), ref(out.size());
  const Tensor qt(q.data(), DType::f32, {tokens, hd}),
      bt(tables.data(), DType::i32, {S, max_blocks}), st(starts.data(), DType::i32, {S + 1}),
      lt(lens.data(), DType::i32, {S});
  kv_paged_attention(Tensor(out.data(), DType::f32, {tokens, hd}), qt, kview, vview, bt, st, lt,
                     block_size, heads, kv_heads, d);
  auto be = make_backend(BackendKind::cpu, 2);
  be->paged_attention(Tensor(ref.data(), DType::f32, {tokens, hd}), qt,
                      Tensor(kf.data(), DType::f32, {pool_rows, kvd}),
                      Tensor(vf.data(), DType::f32, {pool_rows, kvd}), bt, st, lt, block_size,
                      heads, kv_heads, d);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 2e-5) << "at " << i;
}

const std::vector<Case> kCases = {{37, 37}, {1, 1}, {50, 1}, {33, 5}};

}  // namespace

TEST(KvCacheDtype, F16MatchesFp32KernelOnRoundedRows) {
  check_type(QType::f16, 4, 2, 64, 16, kCases);
}
TEST(KvCacheDtype, Bf16MatchesFp32KernelOnRoundedRows) {
  check_type(QType::bf16, 4, 4, 32, 8, kCases);
}
TEST(KvCacheDtype, Q8_0MatchesFp32KernelOnRoundedRows) {
  check_type(QType::q8_0, 6, 2, 64, 16, kCases);
}
TEST(KvCacheDtype, F32IsExact) { check_type(QType::f32, 4, 2, 16, 4, kCases); }

TEST(KvCacheDtype, NamesSizesAndRefusals) {
  for (const char* n : {"f32", "f16", "bf16", "q8_0"})
    EXPECT_STREQ(kv_dtype_name(parse_kv_dtype(n)), n);
  EXPECT_THROW(parse_kv_dtype("q4_0"), UserError);
  EXPECT_THROW(parse_kv_dtype("fp16"), UserError);
  EXPECT_THROW(check_kv_dtype(QType::q8_0, 48), UserError);  // 48 values: not whole Q8_0 blocks
  EXPECT_NO_THROW(check_kv_dtype(QType::q8_0, 64));
  EXPECT_THROW(check_kv_dtype(QType::q4_k, 256), UserError);
  ModelConfig c;
  c.layers = 3;
  c.d_model = 256;
  c.heads = 4;
  c.kv_heads = 2;  // kv_cols 128
  EXPECT_EQ(kv_bytes_per_token(c, QType::f32), 2 * 3 * 128 * 4);
  EXPECT_EQ(kv_bytes_per_token(c, QType::f16), 2 * 3 * 128 * 2);
  EXPECT_EQ(kv_bytes_per_token(c, QType::bf16), 2 * 3 * 128 * 2);
  EXPECT_EQ(kv_bytes_per_token(c, QType::q8_0), 2 * 3 * 4 * 34);
  EXPECT_EQ(kv_cache_summary(c, QType::f16, 1024),
            "KV cache f16: 1536 bytes per token, 1024 tokens (1.5 MiB)");
}
