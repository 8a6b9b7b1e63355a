#pragma once
// The FLOP/s peak that MFU is measured against. On CPU it is measured with an sgemm probe
// (the best a dense fp32 GEMM reaches on this machine with this thread count) and the best
// value seen is cached, so MFU says how close training runs to what the hardware really does.
// A probe taken while other work shares the cores reads low; a training step that then runs
// faster than the "peak" proves it, and the peak is raised to that step's rate (and cached):
// an MFU above 100% is never reported. LLMRUN_PEAK_FLOPS=<FLOP/s per rank> sets the peak
// instead of probing (a datasheet figure), checked against the steps the same way.
#include <string>

#include "backend/backend.h"

namespace llmrun {

struct PeakFlops {
  double flops = 0;        // FLOP/s
  std::string source;      // how it was obtained, for the log line
  std::string cache_path;  // where a raised peak is kept ("" : not cached)
  bool raised = false;     // a step beat the probe (warned once)

  // The MFU (0..1) of work done at `achieved` FLOP/s per rank. Above the peak, the peak is
  // raised to `achieved` (with one warning, and written to the cache) and 1 is returned.
  double mfu(double achieved);
};

PeakFlops measured_peak_flops(Backend& be);

}  // namespace llmrun
