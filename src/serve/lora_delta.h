#pragma once
// The CPU kernel of multi-LoRA serving's delta y[rows] += (x[rows] A^T) (scale B)^T for one
// adapter's row group, with the adapter packed once for it (lora_pack_site):
//  - one A product per fused GEMM input (q|k|v or gate|up share x): u = x A^T, A stored
//    transposed so the product runs along u's columns (no horizontal sums);
//  - one B product per target into its own columns of y (no block-diagonal zeros), B stored
//    transposed and scaled, again along y's columns.
// Both are stored in column panels, each panel contiguous in the order the kernel reads it, so
// every operand is one sequential stream: a row group of a decode step uses each adapter
// weight for only its few rows, so the kernel is bound by reading the adapter, and with plain
// row-major [in, width] / [rank, cols] layouts each k or j step jumped a row ahead (measured on
// the 2-core VM: most of the kernel's time in those loads' misses).
// Every y element is the same fixed-order sum whichever rows share the call (rows are tiled by
// up to kLoraTileRows, each row's arithmetic independent of its tile), so a sequence gets
// bitwise the same output alone or in any batch. Plain host code: no OpenMP regions, no
// allocations.
#include <cstdint>
#include <vector>

namespace llmrun {

// Columns are padded to this (one 16-float vector) in the packed tensors.
inline constexpr int64_t kLoraLanes = 16;
// Rows per register tile: the u scratch of one call holds this many rows.
inline constexpr int64_t kLoraTileRows = 4;
// Panel widths (floats): A^T in panels of up to 4 vectors (4 rows x 4 vectors of accumulators),
// each target's B^T in panels of up to 2.
inline constexpr int64_t kLoraAPanel = 64;
inline constexpr int64_t kLoraBPanel = 32;

inline int64_t lora_pad(int64_t n) { return (n + kLoraLanes - 1) / kLoraLanes * kLoraLanes; }

struct LoraHostTarget {
  int64_t col_begin = 0, cols = 0;  // y columns this target adds to
  int64_t u_begin = 0;              // its rank-r slice of u
  int64_t b_offset = 0;             // its packed scale * B^T in LoraHostSite::packed
};

struct LoraHostSite {
  int64_t in = 0, width = 0, rank = 0;  // x columns; u columns (targets * rank)
  std::vector<LoraHostTarget> targets;
  // A^T [in, lora_pad(width)] at offset 0, then each target's scale * B^T
  // [rank, lora_pad(cols)], zero-padded. A matrix of padded width w is stored as panels of P
  // columns (P = kLoraAPanel or kLoraBPanel; the last panel narrower): panel p holds columns
  // [p P, min(w, p P + P)) of every row, row by row, starting at element rows * P * p.
  std::vector<float> packed;
  bool empty() const { return targets.empty(); }
  // Multiply-adds per row: the A product and every target's B product.
  int64_t macs_per_row() const;
};

// One target of a site as loaded: y columns [col_begin, col_begin + cols), B [cols, rank].
struct LoraTargetSource {
  int64_t col_begin = 0, cols = 0;
  const float* b = nullptr;
};

// Packs a site: A [targets * rank, in] (the targets' A stacked in order, row-major), each
// target's B multiplied by scale.
LoraHostSite lora_pack_site(int64_t in, int64_t rank, const float* a,
                            const std::vector<LoraTargetSource>& targets, float scale);

// y[r, :] += delta of x[r, :] for r in [0, rows): x [rows, in], y [rows, y_cols] (row-major,
// contiguous). u: scratch of kLoraTileRows * lora_pad(site.width) floats.
void lora_host_delta(const LoraHostSite& site, const float* x, int64_t rows, float* y,
                     int64_t y_cols, float* u);

}  // namespace llmrun
