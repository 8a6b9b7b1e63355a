#include "parallel/pipeline_timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace llmrun {

namespace {

std::string percent(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * f);
  return buf;
}

std::string cell_label(const PipeOp& op, bool chunks) {
  std::string s = op.kind == PipeOpKind::forward ? "F" : "B";
  s += std::to_string(op.micro);
  if (chunks) s += static_cast<char>('a' + op.chunk % 26);
  return s;
}

char cell_char(const PipeOp& op) {
  const bool odd = op.chunk % 2 == 1;
  if (op.kind == PipeOpKind::forward) return odd ? 'f' : 'F';
  return odd ? 'b' : 'B';
}

}  // namespace

std::string render_pipeline_timeline(const PipelineSimulation& sim, PipelineSchedule s,
                                     int max_width) {
  const PipelineShape& shape = sim.shape;
  const bool chunks = shape.virtual_stages > 1;
  double unit = 0;
  for (const auto& row : sim.busy)
    for (const auto& iv : row) {
      const double d = iv.end - iv.start;
      if (d > 0 && (unit == 0 || d < unit)) unit = d;
    }
  std::string out = std::string("pipeline schedule ") + schedule_name(s) + ": " +
                    std::to_string(shape.stages) + " stages, " +
                    std::to_string(shape.micro_batches) + " micro-batches, " +
                    std::to_string(shape.virtual_stages) + " chunk(s) per stage\n";
  if (unit == 0) return out + "(nothing runs)\n";
  const int columns = static_cast<int>(std::lround(sim.makespan / unit));

  const std::string row_prefix_example = "stage " + std::to_string(shape.stages - 1) + " | ";
  const int label_width =
      static_cast<int>(std::to_string(shape.micro_batches - 1).size()) + 1 + (chunks ? 1 : 0);
  const bool labelled =
      static_cast<int>(row_prefix_example.size()) + columns * (label_width + 1) <= max_width;

  for (int p = 0; p < shape.stages; ++p) {
    std::vector<const PipeOp*> cells(columns, nullptr);
    for (const auto& iv : sim.busy[p]) {
      const int a = static_cast<int>(std::lround(iv.start / unit));
      const int b = std::min(columns, static_cast<int>(std::lround(iv.end / unit)));
      for (int c = a; c < b; ++c) cells[c] = &iv.op;
    }
    std::string row = "stage " + std::to_string(p);
    row.resize(row_prefix_example.size() - 3, ' ');
    row += " | ";
    for (int c = 0; c < columns; ++c) {
      if (labelled) {
        std::string cell = cells[c] ? cell_label(*cells[c], chunks) : ".";
        cell.resize(label_width, ' ');
        row += cell;
        if (c + 1 < columns) row += ' ';
      } else {
        row += cells[c] ? cell_char(*cells[c]) : '.';
      }
    }
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + "\n";
  }

  out += "one column = one forward of one micro-batch through ";
  out += chunks ? "one chunk" : "one stage";
  out += "; ";
  if (labelled) {
    out += "Fm / Bm = forward / backward of micro-batch m";
    if (chunks) out += ", letter = model chunk on the stage (a = first)";
  } else {
    out += "F / B = forward / backward";
    if (chunks) out += " of chunks 0, 2, ..., f / b of chunks 1, 3, ...";
  }
  out += "; . = idle\n";
  const double analytic = bubble_fraction(s, shape);
  out += "bubble (idle share of the step): " + percent(sim.bubble_fraction) + " simulated, " +
         percent(analytic) +
         (s == PipelineSchedule::interleaved ? " from (P-1)/(V*M+P-1)\n" : " from (P-1)/(M+P-1)\n");
  return out;
}

}  // namespace llmrun
