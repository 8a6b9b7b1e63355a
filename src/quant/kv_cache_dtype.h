// The KV cache's storage type (`--kv-dtype f32|f16|bf16|q8_0`): a paged pool whose rows hold
// each token's keys or values in one of ggml's row formats, written by kv_store_rows (the
// new tokens' k/v, quantized as they enter the pool) and read by kv_paged_attention, which
// dequantizes one head's key or value row at a time into fp32 and runs the same online-softmax
// paged attention as the fp32 backend kernel. f32 pools stay on the backend's own kernels;
// these functions serve the reduced types, in host memory (the CPU backend).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/config.h"
#include "quant/block_formats.h"
#include "tensor/tensor.h"

namespace llmrun::quant {

// "f32", "f16", "bf16" or "q8_0"; anything else is a UserError naming --kv-dtype.
QType parse_kv_dtype(const std::string& name);
const char* kv_dtype_name(QType t);  // the name parse_kv_dtype reads back
// Refuses (UserError) a type whose blocks do not tile one head of head_dim values: the
// attention reads a head's slice of a row on its own.
void check_kv_dtype(QType t, int head_dim);
// Bytes of the cache per token: keys and values of every layer.
int64_t kv_bytes_per_token(const ModelConfig& cfg, QType t);

// The startup info line's figures: "KV cache f16: 4096 bytes per token, 2048 tokens (8.0 MiB)".
std::string kv_cache_summary(const ModelConfig& cfg, QType t, int64_t tokens);

// One layer's k or v pool: rows [num_blocks * block_size] of kv_cols values in `type`.
struct KvPoolView {
  QType type = QType::f32;
  uint8_t* data = nullptr;
  int64_t rows = 0, cols = 0;
  size_t row_bytes() const { return quant::row_bytes(type, cols); }
};

// pool[slots[r]] = src[r, col_begin : col_begin + pool.cols] converted to pool.type, for every
// row r of src (f32 [n, >= col_begin + cols]); slots i32 [n], a slot < 0 skips its row.
void kv_store_rows(const KvPoolView& pool, const Tensor& src, const Tensor& slots,
                   int64_t col_begin);

// Backend::paged_attention (see backend.h for the arguments) over typed pools.
void kv_paged_attention(Tensor out, const Tensor& q, const KvPoolView& k_pool,
                        const KvPoolView& v_pool, const Tensor& block_tables,
                        const Tensor& query_starts, const Tensor& context_lens, int block_size,
                        int heads, int kv_heads, int head_dim);

}  // namespace llmrun::quant
