#pragma once
// What a running training prints and records: the live progress line on rank 0 (redrawn
// in place on a terminal, one line per logged step otherwise) and the metrics JSONL.
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "train/train_step.h"
#include "train/zero_optimizer.h"

namespace llmrun {

// One pipeline stage's share of a step, as its first rank (tp 0, dp 0) saw it.
struct StageReport {
  TrainingMemory memory;
  size_t activation_bytes = 0;
  double pipeline_idle = 0;
};

struct StepReport {
  StepStats stats;
  int64_t total_steps = 0;
  double step_seconds = 0;
  double tokens_per_s = 0;
  double mfu = 0;  // fraction of the peak
  double eta_seconds = 0;
  double comm_share = 0;     // fraction of the step spent waiting for communication
  double pipeline_idle = 0;  // fraction of the step this pipeline stage waited on the others
  TrainingMemory memory;     // persistent bytes per rank
  size_t activation_bytes = 0;
  bool multi_rank = false;  // adds communication share and memory per rank to the line
  // precision.fp8: values clipped to the FP8 max / non-zero values cast to zero, summed over
  // every FP8 tensor and rank since the previous metrics line.
  bool fp8 = false;
  int64_t fp8_overflows = 0, fp8_underflows = 0;
  // model.moe: this rank's router statistics over the step: the aux and z losses (summed over
  // layers, mean over micro-batches), slots dropped by the capacity limit, and the smallest and
  // largest share of one expert's slots in one layer (1 / experts when perfectly balanced).
  bool moe = false;
  double moe_aux_loss = 0, moe_z_loss = 0, moe_load_min = 0, moe_load_max = 0;
  int64_t moe_dropped = 0;
  // parallel.pp > 1, logged steps: every stage's memory and idle share (the fields above are
  // the logging rank's, i.e. stage 0's).
  std::vector<StageReport> stages;
};

// Fills rep.stages on every rank of the pipeline group `pp` from each stage's own `rep`
// (a collective over pp: every rank calls it on the same steps).
void gather_stage_reports(StepReport& rep, Communicator& pp);

std::string format_duration(double seconds);
std::string format_progress(const StepReport& r);

class ProgressPrinter {
 public:
  ProgressPrinter();
  void update(const StepReport& r, bool logged_step);
  void finish();  // ends the in-place line

 private:
  bool tty_;
  bool open_line_ = false;
};

class MetricsWriter {
 public:
  // Empty path: writes nothing. A resumed run (resumed_step > 0) keeps the lines of steps up
  // to resumed_step and drops later ones (written after that checkpoint by the run that
  // stopped), so the file reads as one uninterrupted run.
  explicit MetricsWriter(const std::string& path, int64_t resumed_step = 0);
  ~MetricsWriter();  // says how many lines were lost, if any
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const StepReport& r);
  void write_validation(int64_t step, double val_loss);  // {"step", "val_loss", "val_ppl"}
  // Also hands every record to `sink` (the TensorBoard writer), with or without a JSONL path.
  void also_to(std::function<void(const nlohmann::json&)> sink) { sink_ = std::move(sink); }
  int64_t lost_lines() const { return lost_; }

 private:
  void append(const std::string& line);
  std::function<void(const nlohmann::json&)> sink_;
  std::string path_;
  int fd_ = -1;
  int64_t good_size_ = 0;  // the file's length after the last complete line
  int64_t lines_ = 0, lost_ = 0;
  int64_t last_lost_line_ = 0, next_warning_ = 10;
};

}  // namespace llmrun
