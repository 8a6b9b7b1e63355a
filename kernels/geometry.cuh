// Launch geometry shared by every kernel family and by the host glue: block sizes, grid sizes
// of grid-stride loops, and the fixed partition of the deterministic reductions. Plain C++
// (no CUDA headers) so that the same arithmetic is unit-tested on machines without a GPU.
#pragma once
#include <cstdint>

namespace llmrun::kernels {

// The GPU's geometry, which the host glue shares (workspace sizes depend on it): also under
// llmrun-cuda-emulator (LLMRUN_EMULATED_DEVICE), which runs the glue with these kernels.
#if !defined(LLMRUN_KERNEL_EMULATION) || defined(LLMRUN_EMULATED_DEVICE)
// Threads per block of the elementwise (grid-stride) kernels.
constexpr int kBlockThreads = 256;
// Threads per block of the block-per-row kernels (norms, softmax, argmax).
constexpr int kRowThreads = 256;
// A grid-stride loop never needs more blocks than this: enough to fill an H100 (132 SMs x 16
// resident blocks) several times over, and small enough for gridDim.x on every device.
constexpr int64_t kMaxGridBlocks = 8192;
// Whole-tensor reductions always combine exactly this many per-block partials, in index
// order, so their result does not depend on the device or on timing (bitwise reproducible).
constexpr int kReduceBlocks = 256;
// Column reductions (dw, db, bias gradients) split the rows into groups of this many; each
// (group, column) partial is summed in row order, then the groups in group order.
constexpr int64_t kRowsPerGroup = 64;
// Columns per block in the column reductions (one thread per column).
constexpr int kColumnThreads = 128;
#else
// The CPU emulation (tests/kernels/) runs every CUDA thread as a host thread: small blocks and
// grids keep it fast, and make the grid-stride, row-stride and row-group loops run several
// times on the test shapes. Row blocks keep two warps so block reductions combine warps.
constexpr int kBlockThreads = 32;
constexpr int kRowThreads = 64;
constexpr int64_t kMaxGridBlocks = 4;
constexpr int kReduceBlocks = 32;
constexpr int64_t kRowsPerGroup = 16;
constexpr int kColumnThreads = 32;
#endif

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for a grid-stride loop over n elements with `threads` threads per block: at least 1
// (a zero-sized launch is an error), at most kMaxGridBlocks.
constexpr int grid_blocks(int64_t n, int threads = kBlockThreads) {
  const int64_t b = ceil_div(n > 0 ? n : 1, threads);
  return static_cast<int>(b < kMaxGridBlocks ? b : kMaxGridBlocks);
}

// Row groups of a column reduction over `rows` rows (at least 1).
constexpr int64_t row_groups(int64_t rows) { return rows > 0 ? ceil_div(rows, kRowsPerGroup) : 1; }

// Bytes of workspace a column reduction with `sums` sums per column (1 for bias grads, 2 for
// LayerNorm's dw and db) needs: one double per (sum, group, column).
constexpr uint64_t column_reduce_workspace_bytes(int64_t rows, int64_t cols, int sums) {
  return static_cast<uint64_t>(row_groups(rows)) * static_cast<uint64_t>(cols) *
         static_cast<uint64_t>(sums) * sizeof(double);
}

// Blocks of a whole-tensor reduction's fixed grid that see at least one of n elements (at
// least 1): the others would only write the identity, so they are not launched.
constexpr int reduce_blocks_used(int64_t n) {
  const int64_t b = ceil_div(n > 0 ? n : 1, kBlockThreads);
  return static_cast<int>(b < kReduceBlocks ? b : kReduceBlocks);
}

// Bytes of workspace a whole-tensor reduction needs: one double per partial.
constexpr uint64_t reduce_workspace_bytes() { return kReduceBlocks * sizeof(double); }

}  // namespace llmrun::kernels
