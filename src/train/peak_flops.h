#pragma once
// The FLOP/s peak that MFU is measured against. On CPU it is measured once with an sgemm
// probe (the best a dense fp32 GEMM reaches on this machine with this thread count) and
// cached, so MFU says how close training runs to what the hardware really does.
#include <string>

#include "backend/backend.h"

namespace llmrun {

struct PeakFlops {
  double flops = 0;        // FLOP/s
  std::string source;      // how it was obtained, for the log line
};

PeakFlops measured_peak_flops(Backend& be);

}  // namespace llmrun
