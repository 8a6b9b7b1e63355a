// GPTQ / AWQ unpacking and the exact requantization into ggml blocks (layouts in the header).
#include "quant/packed_int_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/error.h"

namespace llmrun::quant {

namespace {

int32_t word_at(const void* base, int64_t index) {
  int32_t w;
  std::memcpy(&w, static_cast<const uint8_t*>(base) + index * 4, 4);
  return w;
}

uint16_t half_at(const void* base, int64_t index) {
  uint16_t h;
  std::memcpy(&h, static_cast<const uint8_t*>(base) + index * 2, 2);
  return h;
}

// Value k of a packed word.
int field(int32_t word, int bits, int k) {
  return int((uint32_t(word) >> (bits * k)) & ((1u << bits) - 1));
}

// AWQ's interleave: nibble k of a word holds output 8w + kAwqOrder[k], so output 8w + j sits
// in nibble kAwqSlot[j].
constexpr int kAwqSlot[8] = {0, 4, 1, 5, 2, 6, 3, 7};

int64_t groups_of(int64_t in, int64_t group_size) { return (in + group_size - 1) / group_size; }

}  // namespace

PackedShapes packed_shapes(PackedFormat f, int bits, int64_t in, int64_t out, int64_t group_size) {
  const int64_t per = 32 / bits, groups = groups_of(in, group_size);
  if (f == PackedFormat::awq) return {{in, out / per}, {groups, out / per}, {groups, out}};
  return {{in / per, out}, {groups, out / per}, {groups, out}};
}

GroupedInts unpack_packed_linear(const PackedLinear& p) {
  const std::string& n = p.name;
  const int64_t per = 32 / p.bits, groups = groups_of(p.in, p.group_size);
  if (p.in % 32 || p.in % per || p.out % per)
    throw UserError(n + ": " + std::to_string(p.out) + " x " + std::to_string(p.in) +
                    " is not whole blocks of 32 inputs and whole packed words");
  std::vector<int64_t> group(size_t(p.in));
  for (int64_t i = 0; i < p.in; ++i) {
    group[size_t(i)] = p.g_idx ? word_at(p.g_idx, i) : i / p.group_size;
    if (group[size_t(i)] < 0 || group[size_t(i)] >= groups)
      throw UserError(n + ".g_idx[" + std::to_string(i) + "] is " +
                      std::to_string(group[size_t(i)]) + ", not a group below " +
                      std::to_string(groups));
  }
  GroupedInts g;
  g.out = p.out;
  g.inputs = p.in;
  // The stored columns: the inputs in order when each block of 32 lies in one group (also
  // act-order that moves whole blocks), else act-order's rearrangement (header).
  bool whole_blocks = true;
  for (int64_t i = 0; i < p.in && whole_blocks; ++i)
    whole_blocks = group[size_t(i)] == group[size_t(i - i % 32)];
  std::vector<int64_t> col_group;  // the group of each stored column
  if (whole_blocks) {
    col_group = group;
  } else {
    std::vector<std::vector<int32_t>> members(static_cast<size_t>(groups));
    for (int64_t i = 0; i < p.in; ++i) members[size_t(group[size_t(i)])].push_back(int32_t(i));
    for (int64_t gi = 0; gi < groups; ++gi) {
      const std::vector<int32_t>& m = members[size_t(gi)];
      g.gather.insert(g.gather.end(), m.begin(), m.end());
      g.gather.resize((g.gather.size() + 31) / 32 * 32, -1);
      col_group.resize(g.gather.size(), gi);
    }
  }
  g.in = int64_t(col_group.size());
  const int64_t blocks = g.in / 32;
  g.q.resize(size_t(p.out * g.in));
  g.zero.resize(size_t(p.out * blocks));
  g.scale.resize(size_t(p.out * blocks));

  const int64_t words_per_row = p.out / per;  // qzeros (both) and AWQ's qweight
  const int max_q = (1 << p.bits) - 1;
  for (int64_t c = 0; c < p.out; ++c) {
    const int slot = p.format == PackedFormat::awq ? kAwqSlot[c % 8] : int(c % per);
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t gi = col_group[size_t(b * 32)];
      const int stored = field(word_at(p.qzeros, gi * words_per_row + c / per), p.bits, slot);
      g.zero[size_t(c * blocks + b)] =
          int16_t(p.format == PackedFormat::gptq ? stored + 1 : stored);  // GPTQ v1: zero - 1
      g.scale[size_t(c * blocks + b)] = half_at(p.scales, gi * p.out + c);
    }
    uint8_t* qrow = g.q.data() + c * g.in;
    for (int64_t j = 0; j < g.in; ++j) {
      const int64_t i = g.gather.empty() ? j : g.gather[size_t(j)];
      if (i < 0) {  // a pad: its group's zero point, so its weight is (about) 0
        qrow[j] = uint8_t(std::min<int>(g.zero[size_t(c * blocks + j / 32)], max_q));
        continue;
      }
      qrow[j] =
          p.format == PackedFormat::awq
              ? uint8_t(field(word_at(p.qweight, i * words_per_row + c / per), p.bits, slot))
              : uint8_t(field(word_at(p.qweight, (i / per) * p.out + c), p.bits, int(i % per)));
    }
  }
  return g;
}

QType requant_block_type(const GroupedInts& g, int bits) {
  if (bits == 4) {
    bool all_eight = true;
    for (int16_t z : g.zero) all_eight = all_eight && z == 8;
    return all_eight ? QType::q4_0 : QType::q4_1;
  }
  const int64_t blocks = g.in / 32;
  for (int64_t c = 0; c < g.out; ++c)
    for (int64_t i = 0; i < g.in; ++i) {
      const int v = int(g.q[size_t(c * g.in + i)]) - g.zero[size_t(c * blocks + i / 32)];
      if (v < -128 || v > 127) return QType::f32;
    }
  return QType::q8_0;
}

std::vector<uint8_t> to_block_rows(const GroupedInts& g, QType t) {
  const size_t rb = row_bytes(t, g.in);
  std::vector<uint8_t> out(rb * size_t(g.out));
  const int64_t blocks = g.in / 32;
  if (t == QType::f32) {  // s (q - z) per stored column (a pad's q - z is 0 or near it)
    for (int64_t c = 0; c < g.out; ++c)
      for (int64_t j = 0; j < g.in; ++j) {
        const size_t k = size_t(c * blocks + j / 32);
        const float v = from_f16(g.scale[k]) * float(int(g.q[size_t(c * g.in + j)]) - g.zero[k]);
        std::memcpy(out.data() + size_t(c) * rb + size_t(j) * 4, &v, 4);
      }
    return out;
  }
  LLMRUN_CHECK(t == QType::q4_0 || t == QType::q4_1 || t == QType::q8_0,
               "to_block_rows: Q4_0, Q4_1, Q8_0 or F32");
  for (int64_t c = 0; c < g.out; ++c) {
    const uint8_t* q = g.q.data() + c * g.in;
    for (int64_t b = 0; b < blocks; ++b, q += 32) {
      uint8_t* blk = out.data() + size_t(c) * rb + size_t(b) * block_bytes(t);
      const uint16_t d = g.scale[size_t(c * blocks + b)];
      const int z = g.zero[size_t(c * blocks + b)];
      std::memcpy(blk, &d, 2);
      if (t == QType::q4_1) {  // d q + m, m = -d z (in f16); nibbles as Q4_0's
        for (int j = 0; j < 32; ++j) LLMRUN_CHECK(q[j] < 16, "Q4_1 holds 4-bit values only");
        const uint16_t m = to_f16(-from_f16(d) * float(z));
        std::memcpy(blk + 2, &m, 2);
        for (int j = 0; j < 16; ++j) blk[4 + j] = uint8_t(q[j] | (q[j + 16] << 4));
      } else if (t == QType::q4_0) {  // element j low nibble of qs[j], j + 16 its high nibble
        LLMRUN_CHECK(z == 8, "Q4_0 holds zero point 8 only");
        for (int j = 0; j < 16; ++j) blk[2 + j] = uint8_t(q[j] | (q[j + 16] << 4));
      } else {
        for (int j = 0; j < 32; ++j) {
          const int v = int(q[j]) - z;
          LLMRUN_CHECK(v >= -128 && v <= 127, "Q8_0 holds int8 values only");
          blk[2 + j] = uint8_t(int8_t(v));
        }
      }
    }
  }
  return out;
}

double requant_error_bound(const GroupedInts& g, QType t) {
  if (t != QType::q4_1) return 0;
  double worst = 0;  // half an f16 ulp of the largest |s z| (2^-25 in the subnormal range)
  for (size_t k = 0; k < g.zero.size(); ++k)
    worst = std::max(worst, std::fabs(double(from_f16(g.scale[k])) * g.zero[k]));
  return std::max(worst * std::ldexp(1.0, -11), std::ldexp(1.0, -25));
}

void dequantize_grouped(const GroupedInts& g, float* w) {
  const int64_t blocks = g.in / 32;
  for (int64_t c = 0; c < g.out; ++c)
    for (int64_t j = 0; j < g.in; ++j) {
      const int64_t i = g.gather.empty() ? j : g.gather[size_t(j)];
      if (i < 0) continue;  // a pad
      const size_t k = size_t(c * blocks + j / 32);
      w[c * g.inputs + i] =
          from_f16(g.scale[k]) * float(int(g.q[size_t(c * g.in + j)]) - g.zero[k]);
    }
}

}  // namespace llmrun::quant
