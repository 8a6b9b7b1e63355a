#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include "train/training_run.h"

namespace llmrun {

void run_training(const Recipe& r, const LaunchEnvironment& env, const TrainingObserver& observer) {
  TrainingRun run(r, env);
  if (!run_training_loop(run, observer)) return;  // stopped by a signal, checkpoint saved
  if (observer.on_finish)
    observer.on_finish({run.topo.world(), run.peak.flops, run.backend->threads()});
  if (run.first_step > r.train.steps)
    spdlog::info("the checkpoint is at step {}, train.steps is {}: nothing to train",
                 run.first_step - 1, r.train.steps);
  export_trained_model(run);
  run.topo.world().barrier();
}

}  // namespace llmrun
