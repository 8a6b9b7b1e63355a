// The emulated NCCL's element arithmetic (emulated_nccl.cpp): sizes of NCCL's data types and
// the element-wise reduction of one rank's contribution into an accumulator, in the type's own
// arithmetic as NCCL's kernels do it (a 16-bit float is widened to float, combined and rounded
// back to nearest-even at every step; integers wrap). No NCCL call here, only nccl.h's enums.
#pragma once
#include <nccl.h>

#include <cstddef>

namespace emu_nccl {

// Bytes per element; 0 for a value that is no data type.
size_t type_size(ncclDataType_t t);
const char* type_name(ncclDataType_t t);
const char* op_name(ncclRedOp_t op);

// Whether `op` over `t` is a reduction this emulation computes: sum, prod, max, min and avg
// over every integer and float type except the two FP8 ones (which llmrun never reduces).
bool reducible(ncclDataType_t t, ncclRedOp_t op);

// acc[i] = op(acc[i], x[i]) for n elements (avg accumulates a sum; finish_avg divides).
void reduce_into(void* acc, const void* x, size_t n, ncclDataType_t t, ncclRedOp_t op);
// acc[i] /= nranks, the last step of ncclAvg (integers: truncating division, as NCCL).
void finish_avg(void* acc, size_t n, ncclDataType_t t, int nranks);

}  // namespace emu_nccl
