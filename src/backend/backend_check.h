// A backend's conformance check: every Backend op run on the backend under test and on a
// reference backend (the CPU one) with identical random inputs, the outputs compared. Used by
// `llmrun doctor` on every GPU and by tests/unit/test_backend_conformance.cpp. It goes through
// the public Backend interface only (Backend::copy moves data between host and device), so it
// checks any backend. Shapes are deliberately not multiples of tile sizes (37 x 129, ...), and
// outputs start poisoned with NaN so that an element a kernel forgets to write fails.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace llmrun {

struct OpCheck {
  std::string op;      // "matmul", "layernorm_bwd", ...
  std::string shape;   // the case, e.g. "37x129 @ 129x45 trans_b +bias"
  double max_rel_err;  // largest |test - ref| / max(|ref|, floor) over the outputs
  double tolerance;
  bool pass;
  std::string note;  // why it failed (an exception's message), else empty
};

// Tolerances: f32 ops agree to 1e-5 relative; GEMMs with bf16 operands to 1e-2; casts and
// index outputs (argmax) exactly. The relative error's floor is 1% of the output's largest
// magnitude (and at least 1e-6), so that elements that cancel to ~0 do not count as wrong
// because of summation order.
constexpr double kCheckTolF32 = 1e-5;
// f32 ops whose outputs are long sums in an order each backend picks (fp32 GEMMs, attention):
// two correct implementations differ by ~sqrt(k) roundings of the summands' magnitude, which
// against the 1% floor reached 1.5e-5 at these shapes (the CUDA kernels' float operations and a
// double-accumulating cuBLASLt, run by tests/device/'s llmrun-cuda-emulator, against sgemm).
constexpr double kCheckTolF32Sums = 5e-5;
constexpr double kCheckTolBf16 = 1e-2;
// Attention with bf16 operands (backend.h's attention_bf16_operands) on both sides: they round
// the same operands, but a probability or dS element within an ulp or two of a bf16 rounding
// boundary rounds the other way when the two exps differ in the last bit (the GPU's expf, the
// CPU's fast_exp): one term of a sum moves by 2^-8 relative, up to a few percent of an output
// element that lies near the 1% floor when that term carries half of its row's weight. Over 40
// seeds at the check's shape the CPU against the emulated kernels (host expf) gave 2e-6 to 3.2e-2.
// The kernels' precision itself is pinned by tests/kernels/test_attention_mma_emulation.cpp.
constexpr double kCheckTolBf16Attention = 5e-2;
// gelu_bwd's 1 - tanh(u)^2 cancels in float near |tanh| = 1 (see backend_check.cpp).
constexpr double kCheckTolGeluBwd = 1e-3;

// Runs every op on `test` and `ref` (each keeps its own gemm_dtype setting outside the bf16
// GEMM cases, which set and restore it). Never throws for a failing op: the failure is a row.
std::vector<OpCheck> check_backend(Backend& test, Backend& ref, uint64_t seed = 1);

}  // namespace llmrun
