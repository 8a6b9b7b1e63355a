#pragma once
// TensorBoard event files for a training run (logging.tensorboard): every metrics JSONL record
// becomes one Event of scalar summaries (tag = the JSONL key, "stages/P/KEY" for a pipeline
// stage's fields) at its step, and the resolved recipe is a text summary. The file is
// TensorFlow's TFRecord framing of Event protobufs, encoded by hand (tb_event.h).
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace llmrun {

class TensorBoardWriter {
 public:
  // Writes to DIR/events.out.tfevents.<seconds>.llmrun, or continues the newest such file
  // already in DIR. A resumed run (resumed_step > 0) keeps the events of steps up to
  // resumed_step and drops later ones (logged after that checkpoint by the run that stopped),
  // so TensorBoard shows one run without duplicated steps; a fresh run (0) starts the file
  // anew. A torn last record (a crash mid-write) is dropped. `recipe_text` is logged as the
  // "recipe" text summary at resumed_step.
  TensorBoardWriter(const std::string& dir, int64_t resumed_step, const std::string& recipe_text);
  // One metrics record, {"step": N, "loss": ..., "stages": [{...}], ...}: every number (null:
  // NaN) becomes a scalar; other values are not plotted.
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  void append(const std::string& event);
  std::string path_;
  std::ofstream out_;
};

}  // namespace llmrun
