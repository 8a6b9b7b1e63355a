#pragma once
// The CPU kernel of multi-LoRA serving's delta y[rows] += (x[rows] A^T) (scale B)^T for one
// adapter's row group, with the adapter packed once for it (LoraHostSite):
//  - one A product per fused GEMM input (q|k|v or gate|up share x): u = x A^T, A stored
//    transposed [in, width] so the product runs along u's columns (no horizontal sums);
//  - one B product per target into its own columns of y (no block-diagonal zeros), B stored
//    transposed and scaled [rank, cols], again along y's columns.
// Every y element is the same fixed-order sum whichever rows share the call (rows are tiled by
// up to kTileRows, each row's arithmetic independent of its tile), so a sequence gets bitwise
// the same output alone or in any batch. Plain host code: no OpenMP regions, no allocations.
#include <cstdint>
#include <vector>

namespace llmrun {

// Columns are padded to this (one 16-float vector) in the packed tensors.
inline constexpr int64_t kLoraLanes = 16;
// Rows per register tile: the u scratch of one call holds this many rows.
inline constexpr int64_t kLoraTileRows = 4;

inline int64_t lora_pad(int64_t n) { return (n + kLoraLanes - 1) / kLoraLanes * kLoraLanes; }

struct LoraHostTarget {
  int64_t col_begin = 0, cols = 0;  // y columns this target adds to
  int64_t u_begin = 0;              // its rank-r slice of u
  std::vector<float> bt;            // [rank, lora_pad(cols)]: scale * B^T, zero-padded
};

struct LoraHostSite {
  int64_t in = 0, width = 0, rank = 0;  // x columns; u columns (targets * rank)
  std::vector<float> at;                // [in, lora_pad(width)]: A^T, zero-padded
  std::vector<LoraHostTarget> targets;
  bool empty() const { return targets.empty(); }
  // Multiply-adds per row: the A product and every target's B product.
  int64_t macs_per_row() const;
};

// y[r, :] += delta of x[r, :] for r in [0, rows): x [rows, in], y [rows, y_cols] (row-major,
// contiguous). u: scratch of kLoraTileRows * lora_pad(site.width) floats.
void lora_host_delta(const LoraHostSite& site, const float* x, int64_t rows, float* y,
                     int64_t y_cols, float* u);

}  // namespace llmrun
