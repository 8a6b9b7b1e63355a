#pragma once
// The trainer's metrics JSONL (train/progress.cpp writes it) as per-quantity series.
#include <string>
#include <utility>
#include <vector>

namespace llmrun {

using Series = std::vector<std::pair<double, double>>;  // (step, value), in file order

struct MetricsLog {
  std::string path;
  Series loss, val_loss, tokens_per_s, mfu;  // mfu as a fraction of the peak
};

// Reads one file. Lines with "loss" are training steps, lines with "val_loss" validations;
// other objects are skipped (newer writers may add kinds of lines). Throws UserError naming
// "PATH:LINE" for a line that is not a JSON object, lacks an integer "step" or has a
// non-number where a number belongs, and for a missing or empty file or one with no steps.
// A JSON null value (NaN loss) leaves that point out. An unterminated last line that does
// not parse is skipped with a warning: the trainer may be writing it right now.
MetricsLog read_metrics_log(const std::string& path);

}  // namespace llmrun
