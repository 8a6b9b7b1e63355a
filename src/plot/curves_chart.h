#pragma once
// Training curves as one SVG: a panel per quantity (loss with val_loss, tokens/s, MFU)
// stacked over a shared step axis, one colour per metrics file.
#include <string>
#include <vector>

#include "plot/metrics_log.h"

namespace llmrun {

struct ChartOptions {
  double width = 900;
  double panel_height = 260;
  std::string title;  // empty: none
};

std::string render_curves_svg(const std::vector<MetricsLog>& logs, const ChartOptions& options);

// Legend names for files: the shortest path tails that tell them apart
// (runs/a/metrics.jsonl and runs/b/metrics.jsonl become a/metrics.jsonl and b/metrics.jsonl).
std::vector<std::string> distinct_labels(const std::vector<std::string>& paths);

}  // namespace llmrun
