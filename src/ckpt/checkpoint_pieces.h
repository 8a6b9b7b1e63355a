// Geometry of sharded checkpoint tensors. A checkpoint stores each full tensor as pieces; a
// piece is a rectangular slice of the full tensor, optionally cut to a flat range of that
// slice's elements (row-major within the slice). The flat range is what lets a ZeRO rank write
// exactly its partition of a bucket, which starts and ends in the middle of tensors (Megatron's
// distributed checkpoints call it `flattened_range`). A rank's own tensor (TensorShard: ranges
// along one axis) maps onto such pieces, and loading under any layout copies, for every piece,
// the elements it shares with what the rank needs.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "model/param_layout.h"

namespace llmrun {

using Slice = std::vector<std::pair<int64_t, int64_t>>;  // [begin, end) per dimension

// `count` consecutive elements at flat offset `global` in the full tensor and at offset `local`
// in a piece's (or a rank's tensor's) own element order.
struct ElementRun {
  int64_t global = 0, local = 0, count = 0;
};

// Elements [first, last) of `slice` of a tensor of `shape` (row-major within the slice; local =
// position - first), in increasing global order, adjacent runs merged.
std::vector<ElementRun> slice_runs(const std::vector<int64_t>& shape, const Slice& slice,
                                   int64_t first, int64_t last);

// Elements [first, last) of spec's local tensor (local = position - first), in increasing
// global order.
std::vector<ElementRun> local_runs(const ParamSpec& spec, int64_t first, int64_t last);

// fn(a_local, b_local, count) for every run of elements that both lists hold (each in
// increasing global order).
void for_each_overlap(const std::vector<ElementRun>& a, const std::vector<ElementRun>& b,
                      const std::function<void(int64_t, int64_t, int64_t)>& fn);

// Elements [first, last) of spec's local tensor as checkpoint pieces: one per shard range they
// touch (a rank's tensor is its ranges concatenated along the shard axis), each a slice of the
// full tensor plus the flat range of that slice they cover, and where its data starts in the
// local tensor (a contiguous run of local_count elements).
struct LocalPiece {
  Slice slice;
  int64_t flat_begin = 0, flat_end = 0;
  int64_t local_begin = 0;
};
std::vector<LocalPiece> local_pieces(const ParamSpec& spec, int64_t first, int64_t last);

}  // namespace llmrun
