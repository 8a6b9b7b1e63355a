#pragma once
// GPTQ and AWQ linears (Hugging Face dirs with `quantization_config`) turned into ggml blocks
// that hold the same values exactly, so they run on the existing kernels.
//
// Packed layouts (int32 words, little-endian; value k of a word at bits [b*k, b*k + b)):
//   GPTQ (AutoGPTQ / transformers, checkpoint format "gptq", bits b = 4 or 8, p = 32/b):
//     qweight [in/p, out]   word (r, c) holds inputs r*p .. r*p+p-1 of output c, in order
//     qzeros  [groups, out/p]   word (g, w) holds the zero points of outputs w*p .. w*p+p-1,
//                               stored minus one ("v1": zero = stored + 1, so 0..2^b)
//     scales  f16 [groups, out]
//     g_idx   int32 [in]    the group of each input (i / group_size unless desc_act)
//   AWQ (AutoAWQ "gemm", 4 bits):
//     qweight [in, out/8]   word (i, w) holds outputs w*8 .. w*8+7 of input i, in the
//                           interleaved order 0 2 4 6 1 3 5 7 (nibble k holds output
//                           w*8 + order[k])
//     qzeros  [groups, out/8] the same interleave, zero = stored
//     scales  f16 [groups, out]; the group of input i is i / group_size
//   Both: w[out c, in i] = scale[g(i), c] * (q[i, c] - zero[g(i), c]).
//
// Act-order (desc_act): g_idx may give a block of 32 inputs more than one group. Such a
// linear is stored with its inputs reordered, as exllama does: sorted by group (stably), each
// group's run padded with zero weights to whole blocks of 32, and GroupedInts::gather maps
// each stored column back to its input (-1 for a pad). The runner gathers the activation row
// through it (quant/quantized_linear.h), so x W^T is unchanged; any g_idx loads this way.
//
// Requantization: every stored block of 32 columns lies in one group, so a block has one f16
// scale s and one integer zero z, and the values s * (q - z) are held by
//   Q4_0 (d = s, nibble = q) when b = 4 and every z = 8 (symmetric GPTQ): exactly;
//   Q4_1 (d = s, nibble = q, m = f16(-s * z)) otherwise at b = 4 (AWQ, asymmetric GPTQ: 5
//        bits a weight instead of Q8_0's 8.5). d q is exact; m rounds to f16, so each weight
//        is off by at most |s z| 2^-11 (half an f16 ulp; 2^-25 absolute below f16's normal
//        range), i.e. under 15 * 2^-11 < 0.74% of one quantization step s. vLLM's AWQ
//        kernels round (q - z) * s to fp16 as well, a comparable error;
//   Q8_0 (d = s, int8 = q - z) at b = 8 when q - z fits int8 (symmetric 8-bit GPTQ): exactly;
//   F32 rows otherwise (asymmetric 8-bit GPTQ, whose q - z can leave int8): exactly.
// f16 * (a 9-bit integer) is exact in fp32, so dequantize() equals the formats' formula.
#include <cstdint>
#include <string>
#include <vector>

#include "quant/block_formats.h"

namespace llmrun::quant {

enum class PackedFormat { gptq, awq };

// One packed linear as its safetensors hold it; pointers into the mapped files (unaligned).
struct PackedLinear {
  std::string name;  // the linear's prefix ("model.layers.0.self_attn.q_proj"), for messages
  PackedFormat format = PackedFormat::gptq;
  int bits = 4;
  int64_t in = 0, out = 0;  // W is [out, in]: y = x W^T
  int64_t group_size = 0;   // inputs per group (in, for a config's -1)
  const void* qweight = nullptr;
  const void* qzeros = nullptr;
  const void* scales = nullptr;  // f16 bits
  const void* g_idx = nullptr;   // int32 [in], GPTQ only; null: i / group_size
};

// The shapes PackedLinear's tensors must have: {qweight, qzeros, scales} as Hugging Face
// stores them.
struct PackedShapes {
  std::vector<int64_t> qweight, qzeros, scales;
};
PackedShapes packed_shapes(PackedFormat f, int bits, int64_t in, int64_t out, int64_t group_size);

// The integer form: q per weight, and per (output, block of 32 stored columns) one f16 scale
// and one zero point. The stored columns are the linear's inputs in order, or, when gather is
// not empty, the act-order arrangement above (a pad's q is its group's zero point, clamped to
// the bit width: its weight is 0 or near it, and it only ever meets a gathered 0).
struct GroupedInts {
  int64_t out = 0;
  int64_t in = 0;               // stored columns, whole blocks of 32
  int64_t inputs = 0;           // the linear's inputs (in, unless gathered and padded)
  std::vector<int32_t> gather;  // empty, or [in]: the input stored column j holds, -1 for a pad
  std::vector<uint8_t> q;       // [out, in]
  std::vector<int16_t> zero;    // [out, in / 32]
  std::vector<uint16_t> scale;  // [out, in / 32], f16 bits
};

// UserError naming the linear when a g_idx entry is out of range, or the linear is not whole
// blocks of 32 inputs and whole packed words.
GroupedInts unpack_packed_linear(const PackedLinear& p);

// Q4_0, Q4_1, Q8_0 or F32: the type above that holds g's values (exactly but for Q4_1's m).
QType requant_block_type(const GroupedInts& g, int bits);
// The largest |block value - s (q - z)| of g held as t: 0 but for Q4_1 (the f16 m).
double requant_error_bound(const GroupedInts& g, QType t);
// Rows of `out` blocks of type t over the stored columns (requant_block_type's, or one it
// allows: Q4_1 for any 4-bit g, Q8_0 where q - z fits int8, F32 always).
std::vector<uint8_t> to_block_rows(const GroupedInts& g, QType t);
// w [out, inputs] in fp32, in the linear's own input order (pads dropped).
void dequantize_grouped(const GroupedInts& g, float* w);

}  // namespace llmrun::quant
