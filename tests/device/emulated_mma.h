// The warp-collective tensor-core instruction the kernels use, emulated:
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (D = A B + C, A 16x16 row-major, B 16x8
// column-major, bf16 operands, f32 accumulators), with the fragment layout of the PTX ISA,
// section 9.7.14.5.8 "Matrix Fragments for mma.m16n8k16 with floating point type". With
// groupID = laneid >> 2 and threadID_in_group (tig) = laneid % 4, each lane holds
//   A: four .b32 registers, eight bf16 a0..a7 (low half first): row groupID for a0, a1, a4,
//      a5 and groupID + 8 for a2, a3, a6, a7; col tig*2 + (i & 1), + 8 for i >= 4;
//   B: two .b32 registers, four bf16 b0..b3: row (k) tig*2 + (i & 1), + 8 for i >= 2;
//      col (n) groupID;
//   C, D: four f32 c0..c3: row groupID for c0, c1 and groupID + 8 for c2, c3;
//      col tig*2 + (i & 1).
// Every lane posts its registers to a warp-shared scratch, the warp synchronises (the
// emulation's warp barrier), and each lane computes its own four outputs from the operands
// of the whole warp: products of bf16 values are exact in fp32 and are summed in fp32 over k
// in order, then added to c. The instruction is warp-collective (.aligned): a call that not
// all 32 lanes of the warp make together aborts with a message, as it would hang or compute
// garbage on a GPU. Included by cuda_emulation.h.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace llmrun_emu {

struct MmaSlot {
  uint32_t a[4], b[2];
  unsigned gen;  // the warp barrier generation the lane posted in
};

[[noreturn]] inline void mma_abort(const char* why, int thread) {
  std::fprintf(stderr,
               "emulated mma.sync.m16n8k16 (block %u,%u,%u thread %d): %s; the instruction needs "
               "all 32 lanes of the warp\n",
               block_index.x, block_index.y, block_index.z, thread, why);
  std::abort();
}

// The bf16 in half `hi` (0: bits 0-15, 1: bits 16-31) of a register, as f32.
inline float mma_bf16_half(uint32_t reg, int hi) {
  const uint32_t u = (hi ? reg >> 16 : reg & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// d[0..3] += A B for this lane's fragments (the PTX instruction with C = D).
inline void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  static MmaSlot slots[1024];  // one block runs at a time, at most 1024 threads
  Block& blk = *block;
  const int t = blk.current, w = t / kWarp, lane = t % kWarp;
  if (blk.warp_live[size_t(w)] != kWarp) mma_abort("the warp has fewer than 32 live lanes", t);
  const unsigned gen = blk.warp_gen[size_t(w)];
  MmaSlot& mine = slots[t];
  std::memcpy(mine.a, a, sizeof mine.a);
  std::memcpy(mine.b, b, sizeof mine.b);
  mine.gen = gen;
  barrier(1);
  const MmaSlot* warp = slots + w * kWarp;
  for (int l = 0; l < kWarp; ++l)
    if (warp[l].gen != gen) mma_abort("a lane of the warp is at another warp-wide operation", t);
  // Element (row, k) of A and (k, col) of B, read from the lane and register holding it.
  auto A = [&](int row, int k) {
    const int reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    return mma_bf16_half(warp[(row % 8) * 4 + (k % 8) / 2].a[reg], k & 1);
  };
  auto B = [&](int k, int col) {
    return mma_bf16_half(warp[col * 4 + (k % 8) / 2].b[k >= 8 ? 1 : 0], k & 1);
  };
  const int group = lane >> 2, tig = lane % 4;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = group + (i >= 2 ? 8 : 0), col = tig * 2 + (i & 1);
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k) sum += A(row, k) * B(k, col);
    out[i] = d[i] + sum;
  }
  barrier(1);  // nobody posts the next operands before every lane has read these
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

}  // namespace llmrun_emu
