// SIGTERM/SIGINT/SIGUSR1 as a request to stop cleanly (Slurm preemption, Ctrl-C): the first one
// sets a flag the training loop polls after each step (it then checkpoints and exits 0);
// a second one exits at once, for a user who does not want to wait.
#pragma once

namespace llmrun {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  bool requested() const;
  int signal() const;  // the first signal received, 0 if none
};

}  // namespace llmrun
