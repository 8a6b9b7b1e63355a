#pragma once
// A simulated pipeline as text, one row per stage and one column per time unit (the
// shortest op's duration), for `llmrun plan`:
//
//   stage 0 | F0 F1 F2 F3 .  .  .  B0 B0 F4 ...
//
// Cells name the op (F forward, B backward), its micro-batch and, with several model chunks
// per rank, the chunk as a letter (F3a, F3b, ...); "." is idle. When labelled cells would
// make a row wider than `max_width` characters, each column is one character instead:
// F/B for chunk 0, 2, ... and f/b for chunk 1, 3, ... (the legend says which).
#include <string>

#include "parallel/pipeline_sim.h"

namespace llmrun {

std::string render_pipeline_timeline(const PipelineSimulation& sim, PipelineSchedule s,
                                     int max_width = 160);

}  // namespace llmrun
