// Sampling on the device, so that decoding reads back one token id per row instead of the
// vocabulary's logits: each row is sorted (CUB's segmented radix sort, descending, stable, so
// ties keep the lower id first) and one thread per row walks the sorted row with
// sampling_math.cuh's steps.
#pragma once
#ifndef LLMRUN_KERNEL_EMULATION  // llmrun-cuda-emulator runs the kernels on the CPU
#include <cuda_runtime.h>
#endif

#include <cstddef>
#include <cstdint>

#include "sampling_math.cuh"

namespace llmrun::kernels {

// Bytes of `workspace` sample_rows needs for rows x vocab logits.
size_t sample_rows_workspace_bytes(int rows, int vocab);

// ids[r] = the token sampled from logits [rows, vocab] (row r with params[r], on the device).
void sample_rows(int32_t* ids, const float* logits, int rows, int vocab, const RowSampling* params,
                 void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace llmrun::kernels
