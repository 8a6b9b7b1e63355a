// Included first by each kernels/*.cu compiled for llmrun-cuda-emulator
// (tests/device/emulated_cuda.cmake writes one such translation unit per family): the CUDA
// names mapped onto the CPU emulation, with launches going to the emulated runtime's streams.
#pragma once

#define LLMRUN_KERNEL_EMULATION 1
#define LLMRUN_ATTENTION_EMULATION 1
// The GPU's launch geometry (kernels/geometry.cuh), not the kernel tests' small one: the glue
// sizes workspaces with it.
#define LLMRUN_EMULATED_DEVICE 1

// The standard headers the kernels include, first, so the emulation's macros cannot touch them.
#include <math.h>
#include <string.h>

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda_emulation.h"

// The attention kernels declare `extern __shared__ float smem[]`: one array serves them all,
// as one block runs at a time.
#define LLMRUN_EMULATED_ATTENTION_SMEM                  \
  namespace llmrun::kernels::attention_detail {         \
  namespace {                                           \
  [[maybe_unused]] float smem[llmrun_emu::kSmemFloats]; \
  }                                                     \
  }
