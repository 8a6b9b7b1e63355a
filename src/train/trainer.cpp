#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include "train/training_run.h"

namespace llmrun {

void run_training(const Recipe& r, const LaunchEnvironment& env, const TrainingObserver& observer) {
  TrainingRun run(r, env);
  if (!run_training_loop(run, observer)) return;  // stopped by a signal, checkpoint saved
  if (run.context_parallel && run.topo.is_logger()) {
    const ContextParallel& cp = *run.context_parallel;
    spdlog::info(
        "context parallel, rank 0: {:.3f} s in attention ring steps, {:.3f} s of it waiting on "
        "transfers; key/value hops took {:.3f} s, {:.1f}% of that hidden behind the blocks; "
        "dK/dV hops took {:.3f} s, {:.1f}% of that hidden",
        cp.ring_seconds(), cp.exposed_wait_seconds(), cp.hop_seconds(),
        cp.hop_seconds() > 0 ? 100.0 * cp.hidden_seconds() / cp.hop_seconds() : 0.0,
        cp.grad_hop_seconds(),
        cp.grad_hop_seconds() > 0 ? 100.0 * cp.grad_hidden_seconds() / cp.grad_hop_seconds() : 0.0);
  }
  if (observer.on_finish)
    observer.on_finish({run.topo.world(), run.peak.flops, run.backend->threads()});
  if (run.first_step > r.train.steps)
    spdlog::info("the checkpoint is at step {}, train.steps is {}: nothing to train",
                 run.first_step - 1, r.train.steps);
  export_trained_model(run);
  run.topo.world().barrier();
}

}  // namespace llmrun
