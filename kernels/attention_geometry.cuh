// Launch geometry of the attention kernels: tile sizes, grids, dynamic shared memory and
// workspace bytes, and the causal tile ranges the kernels loop over. Plain C++ (no CUDA
// headers) so that tests/unit/test_attention_geometry.cpp checks it on the CPU; under nvcc
// the range helpers are also __device__ and the kernels use these very functions.
#pragma once

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define LLMRUN_ATTN_HD __host__ __device__
#else
#define LLMRUN_ATTN_HD
#endif

namespace llmrun::kernels::attention_geometry {

constexpr int kWarpSize = 32;
// Query rows and key rows per tile: one per lane, so a warp computes a row's scores against a
// whole key tile (or a key's against a whole query tile) with one value per lane.
constexpr int kTile = 32;
// Warps per block of the tiled kernels; each owns kTile / kWarps rows (queries or keys).
constexpr int kWarps = 8;
constexpr int kRowsPerWarp = kTile / kWarps;
constexpr int kThreads = kWarps * kWarpSize;
// Warps per block of the per-row decode kernel (one warp per (query row, head)).
constexpr int kDecodeWarps = 4;
constexpr int kDecodeThreads = kDecodeWarps * kWarpSize;
// Keys a decode warp scores per step: independent dot products in flight.
constexpr int kDecodeChunk = 8;
// attention_cached uses the per-row decode kernel below this many queries, the tiled
// forward kernel from it on (a prompt's prefill).
constexpr int kCachedTiledMinRows = 8;
constexpr int kMaxHeadDim = 256;

static_assert(kTile == kWarpSize, "one tile row per lane");
static_assert(kTile % kWarps == 0, "rows split evenly over warps");

struct Dim3 {
  unsigned x, y, z;
};

inline bool head_dim_supported(int head_dim) { return head_dim > 0 && head_dim <= kMaxHeadDim; }

// Head dims each lane owns in a row (dims lane, lane+32, ...), rounded up to a power of two:
// the kernels are instantiated for 1, 2, 4 and 8 only, and loop over the real head_dim.
inline int dims_per_lane(int head_dim) {
  const int need = (head_dim + kWarpSize - 1) / kWarpSize;
  int b = 1;
  while (b < need) b *= 2;
  return b;
}

// Row stride in shared memory of a tile whose row r is read by lane r at the same column:
// an odd stride puts the 32 lanes on 32 different banks.
LLMRUN_ATTN_HD inline int lane_row_stride(int head_dim) { return head_dim | 1; }

LLMRUN_ATTN_HD inline int tiles(int64_t n) { return static_cast<int>((n + kTile - 1) / kTile); }

// Keys a query tile starting at row q0 (nq rows) sees when query i sits at position
// pos0 + i: [0, pos0 + q0 + nq); the key tiles to visit are [0, key_tiles).
LLMRUN_ATTN_HD inline int64_t query_tile_key_end(int64_t pos0, int64_t q0, int nq) {
  return pos0 + q0 + nq;
}
// Query tiles (of a sequence starting at position 0) that see key tile kt: [kt, tiles(seq)).
LLMRUN_ATTN_HD inline int first_query_tile_for_key_tile(int kt) { return kt; }
// Rows of tile t of n rows (the last tile may be short).
LLMRUN_ATTN_HD inline int tile_rows(int t, int64_t n) {
  const int64_t left = n - static_cast<int64_t>(t) * kTile;
  return static_cast<int>(left < kTile ? left : kTile);
}

// --- forward (also attention_cached from kCachedTiledMinRows rows) --------------------------
// Blocks: x = query tile (launched heaviest = last first), y = head, z = batch.
inline Dim3 fwd_grid(int batch, int n_q, int heads) {
  return {static_cast<unsigned>(tiles(n_q)), static_cast<unsigned>(heads),
          static_cast<unsigned>(batch)};
}
// Q tile (broadcast reads, stride d), K tile (lane-per-row reads), V tile (stride d).
inline size_t fwd_smem_bytes(int head_dim) {
  return sizeof(float) * static_cast<size_t>(kTile) *
         (2 * static_cast<size_t>(head_dim) + lane_row_stride(head_dim));
}

// --- backward ---------------------------------------------------------------------------
// D = rowsum(dout * out) per (batch, head, position): one warp per (row, head).
inline size_t bwd_workspace_bytes(int batch, int seq, int heads) {
  return sizeof(float) * static_cast<size_t>(batch) * heads * seq;
}
inline unsigned bwd_delta_blocks(int batch, int seq, int heads) {
  const int64_t warps = static_cast<int64_t>(batch) * seq * heads;
  return static_cast<unsigned>((warps + kWarps - 1) / kWarps);
}
// dK/dV: x = key tile (the first ones see the most queries: launched first), y = kv head,
// z = batch. K and V tiles are read by broadcast, Q and dO tiles lane-per-row; lse and D of
// the query tile.
inline Dim3 bwd_dkv_grid(int batch, int seq, int kv_heads) {
  return {static_cast<unsigned>(tiles(seq)), static_cast<unsigned>(kv_heads),
          static_cast<unsigned>(batch)};
}
inline size_t bwd_dkv_smem_bytes(int head_dim) {
  return sizeof(float) * static_cast<size_t>(kTile) *
         (2 * static_cast<size_t>(head_dim) + 2 * static_cast<size_t>(lane_row_stride(head_dim)) +
          2);
}
// dQ: x = query tile (heaviest first), y = head, z = batch. Q and dO tiles by broadcast, K and
// V tiles lane-per-row.
inline Dim3 bwd_dq_grid(int batch, int seq, int heads) { return fwd_grid(batch, seq, heads); }
inline size_t bwd_dq_smem_bytes(int head_dim) {
  return sizeof(float) * static_cast<size_t>(kTile) *
         (2 * static_cast<size_t>(head_dim) + 2 * static_cast<size_t>(lane_row_stride(head_dim)));
}

// --- decode / paged ---------------------------------------------------------------------
// x = query row, y = group of kDecodeWarps heads.
inline Dim3 decode_grid(int n_q, int heads) {
  return {static_cast<unsigned>(n_q),
          static_cast<unsigned>((heads + kDecodeWarps - 1) / kDecodeWarps), 1u};
}

// Shared memory a block may use without opting in (cudaFuncAttributeMaxDynamicSharedMemorySize).
constexpr size_t kDefaultSmemLimit = 48 * 1024;
// The opt-in maximum per block of the smallest target (sm_80: 163 KiB); sm_90 allows 227 KiB.
constexpr size_t kSm80SmemLimit = 163 * 1024;

// Position of query `row` of sequence `seq_index` in a paged batch: its context holds
// context_len tokens including its n_new new ones, which are the last.
LLMRUN_ATTN_HD inline int paged_query_pos(int context_len, int query_start, int query_end,
                                          int row) {
  return context_len - (query_end - query_start) + (row - query_start);
}
// The sequence owning flattened query row `row`: the largest s with query_starts[s] <= row
// (empty sequences share their start with the next one, so the largest is the owner).
LLMRUN_ATTN_HD inline int paged_seq_of_row(const int* query_starts, int num_seqs, int row) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_starts[mid] <= row)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}
// Pool row holding key `pos` of a sequence through its block table.
LLMRUN_ATTN_HD inline int64_t paged_slot(const int* table, int block_size, int pos) {
  return static_cast<int64_t>(table[pos / block_size]) * block_size + pos % block_size;
}

}  // namespace llmrun::kernels::attention_geometry
